"""The quota service's view: one ``QuotaLedger`` plus what the contract's messages add to it (no I/O).

What it keeps, and why:
* *reservations*: a pod ``quota.admit`` admitted counts against its queue at once, before the
  binder's ``bound`` event arrives, so two pods asked about back to back cannot both pass a limit
  only one fits. A reservation that no ``bound`` follows within ``reservation_ttl_s`` is dropped.
  ``dry_run`` reserves nothing.
* *what a pod asked for* (its PodPending, from the admit request): priority and checkpointability
  order reclaim victims; the GPU type charges per-type amounts. A pod bound without having been
  asked about (quota started later, or placement admitted it while quota was away) still counts,
  with the defaults (priority 0, not checkpointable) and its bound slices as demand.
* *waiting demand*: a refused pod counts as its queue's demand for ``pending_ttl_s`` (fair shares
  and Jain's index weigh held against what each queue asks, running plus waiting).
* every ``bound`` is also a chargeback interval, every ``finished``/``preempted``/``bind_failed`` ends
  one (``store.py`` makes both idempotent in PostgreSQL).
* *preemptions per pod* (the ledger's count, which the tree's ``max_preemptions_per_pod`` caps): a
  ``preempted`` event whose pod goes back to pending (``requeued``) counts, and the count stays with
  the pod's uid; a pod gone for good -- finished, dropped after a bind failure, preempted without a
  re-queue -- is forgotten. A controller's replacement for a preempted pod (a new uid) brings its
  job's count in ``PodPending.job_preemptions`` (the binder's Kubernetes world counts evictions per
  controller), and its allocation starts from that.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpuaware.quota import (
    ANY_TYPE,
    RESOURCES,
    Allocation,
    Demand,
    Interval,
    QueueTree,
    QuotaLedger,
    demand_of,
)
from gpuaware.schemas import (
    AdmitReply,
    AdmitRequest,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    QueueUsage,
    QuotaUsageReported,
    ReclaimCandidate,
    Resources,
)

__all__ = ["POD_EVENT_TYPES", "Ended", "PodEvent", "PodGone", "QuotaView", "ended_at"]

GPU_MILLI = RESOURCES.index("gpu_milli")

PodGone = PodFinished | PodPreempted | PodBindFailed
"""a binder event after which the pod no longer runs"""
PodEvent = PodPending | PodBound | PodGone
POD_EVENT_TYPES = (PodPending, PodBound, PodBindFailed, PodPreempted, PodFinished)
"""the binder's events the quota view follows"""


@dataclass(frozen=True, slots=True)
class Ended:
    pod_uid: str
    ended_at: float
    outcome: str


def _resources(v) -> Resources:
    return Resources(gpu_milli=int(min(v[1], 2**62)), gpu_memory_mib=int(min(v[2], 2**62)),
                     cpu_milli=int(min(v[3], 2**62)), memory_mib=int(min(v[4], 2**62)))


class QuotaView:
    def __init__(self, tree: QueueTree, *, cluster: str, source: str, reservation_ttl_s: float = 60.0,
                 pending_ttl_s: float = 300.0) -> None:
        self.tree = tree
        self.ledger = QuotaLedger(tree)
        self.cluster = cluster
        self.source = source
        self.reservation_ttl_s = reservation_ttl_s
        self.pending_ttl_s = pending_ttl_s
        self.reserved: dict[str, float] = {}
        """pod uid -> when its reservation lapses"""
        self.asked: dict[str, PodPending] = {}
        self.waiting: dict[str, tuple[str, int, float]] = {}
        """pod uid -> (queue, GPU milli asked, when): refused by quota.admit (lapses after pending_ttl_s)"""
        self.pending: dict[str, tuple[str, int]] = {}
        """pod uid -> (queue, GPU milli asked): announced pending by the binder, not bound or gone yet"""
        self.counts: Counter[str] = Counter()
        self.reclaims = 0

    def replace_tree(self, tree: QueueTree) -> int:
        """Swap in a validated tree; running pods keep counting under their queue if it still exists
        (the decayed usage history and the preemption counts carry over). Returns how many pods lost their queue (they stay
        billed, no longer counted against a queue)."""
        ledger = QuotaLedger(tree, usage=self.ledger.usage, preempted_at=self.ledger.preempted_at)
        lost = 0
        for uid, a in self.ledger.running.items():
            if a.queue in tree.specs:
                ledger.adopt(a)
            else:
                lost += 1
                self.reserved.pop(uid, None)
        self.tree, self.ledger = tree, ledger
        self.waiting = {u: w for u, w in self.waiting.items() if w[0] in tree.specs}
        self.counts["tree_replaced"] += 1
        return lost

    @staticmethod
    def gpu_type(pod: PodPending) -> str:
        return pod.gpu_types[0] if len(pod.gpu_types) == 1 else ANY_TYPE

    def demand(self, pod: PodPending, gpu_milli: int | None = None) -> Demand:
        return demand_of(pod.num_gpu, pod.gpu_milli, pod.gpu_memory_mib, pod.cpu_milli, pod.memory_mib,
                         gpu_type=self.gpu_type(pod), gpu_milli_total=gpu_milli)

    # --- quota.admit ------------------------------------------------------------------------------
    def admit(self, req: AdmitRequest, now: float) -> AdmitReply:
        pod = req.pod
        self.expire(now)
        held = self.ledger.running.get(pod.pod_uid)
        if held is not None:  # asked again (a retry pass, a second decision): it already counts
            self.counts["asked_again"] += 1
            return self._reply(pod, True, held.queue, "already admitted")
        d = self.demand(pod, req.gpu_milli)
        a = self.ledger.admit(pod.queue, d, now, node=req.node, allow_reclaim=req.allow_reclaim, uid=pod.pod_uid)
        self.counts["admitted" if a.admitted else "refused"] += 1
        if not a.admitted:
            if a.queue in self.tree.specs:
                self.waiting[pod.pod_uid] = (a.queue, int(d.vector[GPU_MILLI]), now)
            return self._reply(pod, False, a.queue, a.reason, retry_after_s=a.retry_after_s)
        victims = tuple(ReclaimCandidate(pod_uid=v.uid, pod_name=v.name or v.uid, namespace=v.namespace or "default",
                                         queue=v.queue, node=v.node or "", frees=_resources(v.demand.vector))
                        for v in a.reclaim)
        if victims:
            self.counts["reclaim_plans"] += 1
            self.reclaims += 1
        if not req.dry_run:
            self.waiting.pop(pod.pod_uid, None)
            self.asked[pod.pod_uid] = pod
            self.reserved[pod.pod_uid] = now + self.reservation_ttl_s
            self.ledger.bind(Allocation(pod.pod_uid, a.queue, d, started_at=now, node=req.node,
                                        priority=pod.priority, checkpointable=pod.checkpointable,
                                        name=pod.pod_name, namespace=pod.namespace,
                                        preemptions=pod.job_preemptions), now=now)
        return self._reply(pod, True, a.queue, a.reason, would_reclaim=victims)

    def _reply(self, pod: PodPending, admitted: bool, queue: str, reason: str, **kw: object) -> AdmitReply:
        return AdmitReply(source=self.source, emitted_at=pod.emitted_at, cluster=self.cluster, pod_uid=pod.pod_uid,
                          admitted=admitted, queue=queue or "default", reason=reason[:1000], **kw)  # type: ignore[arg-type]  # kw holds AdmitReply's optional fields

    # --- the binder's events ------------------------------------------------------------------------
    def announced(self, pod: PodPending) -> None:
        """A pod waits for placement: its queue's demand grows until it is bound or gone."""
        leaf, _ = self.tree.resolve(pod.queue)
        if leaf is not None and pod.pod_uid not in self.ledger.running:
            self.pending[pod.pod_uid] = (leaf, pod.gpu_milli_total)
        self.counts["pending"] += 1

    def bound(self, ev: PodBound, now: float) -> Interval:
        """Count the pod as running (its reservation becomes its allocation); the interval to store."""
        pod = self.asked.get(ev.pod_uid)
        leaf, _ = self.tree.resolve(pod.queue if pod is not None else ev.queue)
        milli = sum(s.gpu_milli for s in ev.slices)
        mem = sum(s.memory_mib for s in ev.slices)
        self.reserved.pop(ev.pod_uid, None)
        self.waiting.pop(ev.pod_uid, None)
        self.pending.pop(ev.pod_uid, None)
        if leaf is not None:
            held = self.ledger.running.get(ev.pod_uid)
            if held is not None:  # from the reservation: now it really runs, and there
                held.started_at = ev.bound_at
                held.node = ev.node
            else:
                d = self.demand(pod) if pod is not None else Demand.of(
                    gpus=sum(1 for s in ev.slices if s.gpu_milli >= 1000), gpu_milli=milli, gpu_memory_mib=mem)
                self.ledger.bind(Allocation(ev.pod_uid, leaf, d, started_at=ev.bound_at, node=ev.node,
                                            priority=pod.priority if pod else 0,
                                            checkpointable=pod.checkpointable if pod else False,
                                            name=ev.pod_name, namespace=ev.namespace,
                                            preemptions=pod.job_preemptions if pod else 0), now=now)
        self.counts["bound"] += 1
        queue = leaf or ev.queue
        tenant = self.tree.tenant.get(queue, queue)
        return Interval(ev.pod_uid, queue, tenant, milli, mem, ev.bound_at)

    def gone(self, ev: PodGone, now: float) -> Ended | None:
        """Stop counting the pod; the interval end to store (None when it never ran)."""
        self.reserved.pop(ev.pod_uid, None)
        self.asked.pop(ev.pod_uid, None)
        comes_back = (isinstance(ev, PodBindFailed) and ev.transient) or (isinstance(ev, PodPreempted) and ev.requeued)
        if not comes_back:
            self.pending.pop(ev.pod_uid, None)
            self.ledger.finished(ev.pod_uid, now)
        elif isinstance(ev, PodPreempted):
            self.ledger.preempted(ev.pod_uid, ev.preempted_at)
        else:
            self.ledger.release(ev.pod_uid, now)
        if isinstance(ev, PodFinished):
            self.counts["finished"] += 1
            return Ended(ev.pod_uid, ev.finished_at, ev.outcome.value) if ev.node is not None else None
        if isinstance(ev, PodPreempted):
            self.counts["preempted"] += 1
            return Ended(ev.pod_uid, ev.preempted_at, f"preempted:{ev.reason}")
        self.counts["bind_failed"] += 1
        return None

    def expire(self, now: float) -> None:
        for uid, until in list(self.reserved.items()):
            if until <= now:
                del self.reserved[uid]
                self.asked.pop(uid, None)
                self.ledger.release(uid, now)
                self.counts["reservations_lapsed"] += 1
        for uid, (_, _, at) in list(self.waiting.items()):
            if at + self.pending_ttl_s <= now:
                del self.waiting[uid]

    # --- reporting ----------------------------------------------------------------------------------
    def report(self, now: float) -> QuotaUsageReported:
        self.expire(now)
        self.ledger.advance(now)
        asked: dict[str, float] = {}
        running: Counter[str] = Counter()
        pending: Counter[str] = Counter()
        for a in self.ledger.running.values():
            asked[a.queue] = asked.get(a.queue, 0.0) + float(a.demand.vector[GPU_MILLI])
            running[a.queue] += 1
        waiting = {**{u: (q, m) for u, (q, m, _) in self.waiting.items()}, **self.pending}
        for uid, (q, milli) in waiting.items():
            if uid in self.ledger.running:
                continue
            asked[q] = asked.get(q, 0.0) + milli
            pending[q] += 1
        leaves_asking = {q: v for q, v in asked.items() if v > 0}
        shares = self.ledger.fair_shares(leaves_asking, now) if leaves_asking else {}
        jain = self.ledger.jain(leaves_asking, now) if len(leaves_asking) >= 2 else None
        queues = []
        for name in self.tree.specs:
            lim = self.tree.limit(name, ANY_TYPE, now)
            unbounded = bool((lim >= 2**60).all())
            sub = [q for q in shares if name in self.tree.ancestors(q)]
            queues.append(QueueUsage(
                queue=name, parent=self.tree.parent[name], weight=self.tree.weight(name, now),
                guaranteed=_resources(self.tree.guaranteed(name, ANY_TYPE, now)),
                limit=None if unbounded else _resources(lim), used=_resources(self.ledger.used(name)),
                fair_share=Resources(gpu_milli=int(sum(shares[q] for q in sub))),
                running_pods=sum(running[q] for q in running if name in self.tree.ancestors(q)),
                pending_pods=sum(pending[q] for q in pending if name in self.tree.ancestors(q))))
        return QuotaUsageReported(source=self.source, emitted_at=now, cluster=self.cluster, as_of=now,
                                  queues=tuple(queues), jain_index=None if jain is None else round(jain, 6),
                                  reclaims=self.reclaims)


def ended_at(ev: PodGone) -> float:
    """When the pod stopped running, by the event's own clock."""
    if isinstance(ev, PodFinished):
        return ev.finished_at
    if isinstance(ev, PodPreempted):
        return ev.preempted_at
    return ev.failed_at
