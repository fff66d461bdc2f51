"""Kubernetes as the binder's world: two watches in, Binding / Eviction / annotations out.

The rules live in ``gpuaware.k8s`` (translation, the watch state machine, the mirror that turns
changes into exactly-once contract events, the Binding quirk); this module runs them:

- ``run`` starts a pod watch (pods with our ``schedulerName``, every namespace) and a node watch, each
  ``gpuaware.k8s.watch.run_watch`` in a thread (the official client is synchronous), hands their
  changes to the event loop through a queue, feeds the mirror and publishes what it says (pending pods,
  finished pods, checkpoint answers). The DRA ResourceClaims (or templates) a pod names are read once
  each before it is translated. A pod the translation refuses gets a Warning Event saying why.
- ``bind`` creates the Binding with the GPU-assignment annotations (HAMi-core for fractions, MIG
  resource names, device UUIDs) merged in the same write, and an Event (``Scheduled`` or
  ``FailedScheduling`` with the reason).
- ``evict`` uses the Eviction API: a PodDisruptionBudget that forbids it now is a transient refusal.
- ``unschedulable`` posts placement's "why pending" explanation as a ``FailedScheduling`` Event.
- ``request_checkpoint`` writes the handshake annotations (request time, deadline); the victim answers
  by setting ``gpuaware.io/checkpoint-completed`` and the pod watch brings the answer back. A resize
  asks each running worker of an elastic job the same way, with ``gpuaware.io/checkpoint-world-size``
  (the job's worker count once it resumes) beside the request; a request removes the previous
  answer (a worker of an elastic job is asked again at each resize) and a request that is no resize
  removes the world size.
- ``elastic_workers`` finds an elastic job's bound workers among the watched pods: the pods of the
  same gang (annotation or GPUGang) in the same namespace.

With several replicas (the chart runs two) a coordination.k8s.io Lease (``gpuaware.k8s.election``)
picks the one that reports what the watches see; every replica keeps the cache warm and applies the
decisions it is handed (binding is idempotent: 409 to the same node is success), and a standby keeps
the latest events so a new leader says them again under the same de-duplication ids.

Selected with ``GPUAWARE_BINDER_WORLD=kubernetes`` (in-cluster config in a pod, else ``KUBECONFIG``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuaware import bus, k8s
from gpuaware.k8s import (
    ASSIGNED,
    EXTENDER_SCHEDULER_NAME,
    SCHEDULER_NAME,
    Change,
    KubeMirror,
    Watcher,
    assignment_annotations,
    checkpoint_annotations,
    event,
    is_ours,
    run_watch,
    why_pending,
)
from gpuaware.schemas import (
    CheckpointRequested,
    NodePowerChanged,
    NodePowerRecommended,
    PlacementDecided,
    PlannedPreemption,
    PodBound,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.services.binder.kube_power import switch_node
from gpuaware.services.binder.world import ElasticWorkers, Emit, PodStateName, Worker, WorldRefused

__all__ = ["KubeWorld"]

log = logging.getLogger(__name__)

WATCH_BACKOFF = bus.RetryPolicy(base=1.0, cap=30.0)
"""the wait after a watch's n-th failure in a row: 1, 2, 4 ... 30 s"""


def _ours_or_bound(pod: Any) -> bool:
    """Track our pods through their whole life (pending, bound, finished), not only while pending."""
    return (pod.get("spec") or {}).get("schedulerName") in (SCHEDULER_NAME, EXTENDER_SCHEDULER_NAME) or is_ours(pod)


class KubeWorld:
    kind = "kubernetes"

    def __init__(self, core: Any, *, cluster: str, source: str = "binder/k8s", resync_s: float = 300.0,
                 clock: Callable[[], float] = time.time, lease: Any = None, buffer: int = 10_000,
                 node_power: bool = False) -> None:
        self.core = core
        self.node_power = node_power
        """carry out node-power recommendations (kube_power.py); off: answer each with a refusal"""
        self.lease = lease
        """a ``KubeLeaderLease``: with several replicas only the leader reports the watches' events (all
        keep a hot cache and apply decisions); None = report always"""
        self._held: collections.deque[tuple[Any, str]] = collections.deque(maxlen=buffer)
        self.cluster = cluster
        self.source = source
        self.clock = clock
        self.mirror = KubeMirror(cluster=cluster, source=source)
        self.resync_s = resync_s
        self._warned: set[tuple[str, str]] = set()

    def now(self) -> float:
        return self.clock()

    def wall_seconds(self, world_seconds: float) -> float:
        return world_seconds

    # -- the watches -----------------------------------------------------------------------------

    async def run(self, emit: Emit, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Change]] = asyncio.Queue()
        halt = threading.Event()

        def start(kind: str, source: tuple[Any, Any], keep: Callable[[Any], bool]) -> threading.Thread:
            w = Watcher(keep=keep, resync_s=self.resync_s)

            def handle(ch: Change) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, ch))

            t = threading.Thread(target=run_watch, name=f"watch {kind}", daemon=True,
                                 args=(w, source[0], source[1], handle, halt.is_set, self.clock,
                                       lambda n: halt.wait(WATCH_BACKOFF.delay(n))))
            t.start()
            return t

        start("node", k8s.node_source(self.core), lambda _n: True)
        start("pod", k8s.pod_source(self.core, SCHEDULER_NAME), _ours_or_bound)
        # extender mode: kube-scheduler's pods that our extender bound (reported bound, then finished)
        start("pod", k8s.pod_source(self.core, EXTENDER_SCHEDULER_NAME), _ours_or_bound)
        if self.lease is not None:
            await self.lease.start()
        try:
            while not stop.is_set():
                try:
                    kind, ch = await asyncio.wait_for(queue.get(), timeout=0.5)
                except TimeoutError:
                    if self.reporting and self._held:  # became leader while the watches were quiet
                        while self._held:
                            await emit(*self._held[0])
                            self._held.popleft()
                    continue
                if kind == "node":
                    self.mirror.on_node(ch)
                    continue
                if ch.kind != "deleted" and await self._read_claims(ch):
                    self.mirror.refused.pop(ch.uid, None)
                for ev, msg_id in self.mirror.on_pod(ch, self.clock()):
                    self._held.append((ev, msg_id))
                if not self.reporting:
                    continue  # a standby keeps the latest events: a new leader says them again (same ids)
                while self._held:
                    ev, msg_id = self._held[0]
                    await emit(ev, msg_id)
                    self._held.popleft()
                reason = self.mirror.refused.get(ch.uid)
                if reason is not None and (ch.uid, reason) not in self._warned:
                    self._warned.add((ch.uid, reason))
                    meta = ch.obj["metadata"]
                    await self._event(meta.get("namespace") or "default", meta["name"], ch.uid, "InvalidGpuRequest",
                                      reason, "Warning")
        finally:
            halt.set()
            if self.lease is not None:
                await self.lease.stop(release=True)

    @property
    def reporting(self) -> bool:
        return self.lease is None or self.lease.leading

    async def _read_claims(self, ch: Change) -> bool:
        """Read the DRA ResourceClaims (or templates) and the GPUGang a pod names, once each. True when
        something was read."""
        self.mirror.pods.setdefault(ch.uid, ch.obj)
        read = False
        for ns, name, template in self.mirror.missing_claims(ch.uid):
            try:
                obj = await asyncio.to_thread(k8s.read_claim, ns, name, template=template, core=self.core)
            except Exception as exc:
                log.warning("DRA claim %s/%s not read: %s", ns, name, exc)
                continue
            if obj is not None:
                self.mirror.claims[f"{ns}/{name}"] = obj
                read = True
        gang = self.mirror.missing_gang(ch.uid)
        if gang is not None:
            ns, name = gang
            try:
                spec = await asyncio.to_thread(k8s.read_gang, ns, name, core=self.core)
            except Exception as exc:
                log.warning("GPUGang %s/%s not read: %s", ns, name, exc)
            else:
                if spec is None:
                    self.mirror.no_gang.add(f"{ns}/{name}")
                else:
                    self.mirror.gangs[f"{ns}/{name}"] = spec
                    read = True
        return read

    async def _event(self, namespace: str, name: str, uid: str, reason: str, message: str,
                     type_: str = "Normal") -> None:
        body = event(namespace=namespace, pod_name=name, pod_uid=uid, reason=reason, message=message,
                     now=self.clock(), type_=type_, component="gpuaware-binder")
        try:
            await asyncio.to_thread(k8s.post_event, self.core, body)
        except Exception as exc:  # an Event is advice: never fail a bind over it
            log.warning("event %s for %s/%s not posted: %s", reason, namespace, name, exc)

    async def unschedulable(self, ev: PodUnschedulable) -> None:
        """Placement's "why pending" as a Warning Event on the pod, once per attempt and reason."""
        key = (ev.pod_uid, f"{ev.attempt}/{ev.reason}")
        if not self.reporting or ev.cluster != self.cluster or key in self._warned or self.mirror.state(ev.pod_uid) != "pending":
            return
        self._warned.add(key)
        await self._event(ev.namespace, ev.pod_name, ev.pod_uid, "FailedScheduling",
                          why_pending(ev.reason, ev.message, ev.node_classes), "Warning")

    # -- the world's questions -----------------------------------------------------------------

    async def state(self, pod_uid: str) -> PodStateName:
        return self.mirror.state(pod_uid)  # type: ignore[return-value]  # the mirror's state names are PodStateName's literals

    async def bound(self, pod_uid: str) -> PodBound | None:
        return self.mirror.bound(pod_uid)

    async def checkpointable(self, pod_uid: str) -> bool:
        p = self.mirror.pending_of_bound(pod_uid)
        return bool(p and p.checkpointable)

    async def elastic_workers(self, pod_uid: str) -> ElasticWorkers | None:
        me = self.mirror.pending_of_bound(pod_uid)
        if me is None or me.gang_id is None or me.gang_max_members <= max(1, me.gang_min_members):
            return None
        running = []
        for uid, pod in list(self.mirror.pods.items()):
            meta = pod.get("metadata") or {}
            if (meta.get("namespace") or "default") != me.namespace or self.mirror.state(uid) != "bound":
                continue
            other = self.mirror.pending_of_bound(uid)
            b = self.mirror.bound(uid, pod)
            if other is not None and other.gang_id == me.gang_id and b is not None:
                running.append(Worker(uid, b.pod_name, b.namespace, b.node))
        return ElasticWorkers(f"{me.namespace}/{me.gang_id}", max(1, me.gang_min_members),
                              tuple(sorted(running, key=lambda w: w.pod_uid)))

    async def snapshot(self, request: WorldSnapshotRequest) -> WorldSnapshotReply:
        return self.mirror.snapshot(request, self.clock())

    async def requeue(self, pod_uid: str) -> PodPending | None:
        return self.mirror.requeue(pod_uid, self.clock())

    # -- acting ----------------------------------------------------------------------------------

    async def bind(self, decision: PlacementDecided) -> PodBound:
        pod = self.mirror.pods.get(decision.pod_uid)
        if pod is None:
            raise WorldRefused("unknown_pod", f"pod {decision.namespace}/{decision.pod_name} is not known",
                               transient=False)
        ann = assignment_annotations(decision.node, decision.slices, pod=pod, decision_id=decision.decision_id,
                                     now=self.clock())
        out = await asyncio.to_thread(k8s.bind, self.core, decision.namespace, decision.pod_name, decision.pod_uid,
                                      decision.node, ann)
        if not out.ok:
            await self._event(decision.namespace, decision.pod_name, decision.pod_uid, "FailedScheduling",
                              f"binding to {decision.node} refused: {out.message or out.reason}", "Warning")
            raise WorldRefused(out.reason, out.message, transient=out.transient)
        gpus = ", ".join(s.gpu_uuid for s in decision.slices)
        await self._event(decision.namespace, decision.pod_name, decision.pod_uid, "Scheduled",
                          f"Successfully assigned {decision.namespace}/{decision.pod_name} to {decision.node}"
                          + (f" (GPUs {gpus})" if gpus else ""))
        now = self.clock()
        return PodBound(source=self.source, emitted_at=now, cluster=self.cluster, pod_uid=decision.pod_uid,
                        pod_name=decision.pod_name, namespace=decision.namespace, node=decision.node,
                        slices=decision.slices, bound_at=now, decision_id=decision.decision_id, queue=decision.queue)

    async def evict(self, victim: PlannedPreemption, *, checkpointed: bool,
                    decision: PlacementDecided) -> tuple[PodPreempted, PodPending | None]:
        b = self.mirror.bound(victim.pod_uid)
        if b is None or b.node != victim.node:
            raise WorldRefused("victim_moved", f"pod {victim.pod_uid} is not bound to {victim.node}", transient=False)
        outcome, msg = await asyncio.to_thread(k8s.evict, self.core, victim.namespace, victim.pod_name,
                                               victim.pod_uid, int(victim.grace_period_s))
        if outcome == k8s.EvictOutcome.BLOCKED:
            raise WorldRefused("disruption_budget", msg, transient=True)
        if outcome == k8s.EvictOutcome.GONE:
            raise WorldRefused("unknown_pod", msg, transient=False)
        if outcome != k8s.EvictOutcome.EVICTED:
            raise WorldRefused("eviction_failed", msg, transient=True)
        self.mirror.preempted(victim.pod_uid)  # its controller's replacement brings the count along
        await self._event(victim.namespace, victim.pod_name, victim.pod_uid, "Preempted",
                          f"evicted for {decision.namespace}/{decision.pod_name} ({victim.reason})", "Warning")
        now = self.clock()
        return PodPreempted(source=self.source, emitted_at=now, cluster=self.cluster, pod_uid=victim.pod_uid,
                            pod_name=victim.pod_name, namespace=victim.namespace, node=victim.node,
                            reason=victim.reason, preempted_at=now, decision_id=decision.decision_id,
                            preemptor_pod_uid=decision.pod_uid, checkpointed=checkpointed, requeued=False,
                            slices=b.slices), None

    async def power(self, rec: NodePowerRecommended) -> NodePowerChanged:
        now = self.clock()
        if not self.node_power:
            return NodePowerChanged(source=self.source, emitted_at=now, cluster=self.cluster, node=rec.node,
                                    state="on", changed_at=now, recommendation_id=rec.recommendation_id,
                                    reason="node_power_off: this binder does not switch nodes "
                                           "(GPUAWARE_BINDER_NODE_POWER, the chart's power.enabled)")
        return await switch_node(self.core, rec, now=now, source=self.source)

    async def request_checkpoint(self, request: CheckpointRequested) -> None:
        now = self.clock()
        annotations: dict[str, str | None] = {
            **checkpoint_annotations(now + request.deadline_s, now), ASSIGNED.CHECKPOINT_DONE: None,
            ASSIGNED.CHECKPOINT_WORLD_SIZE: None if request.world_size is None else str(request.world_size)}
        await asyncio.to_thread(k8s.patch_pod_annotations, self.core, request.namespace, request.pod_name,
                                annotations)
        self.mirror.pending_checkpoints[request.pod_uid] = request.request_id  # answers after this request
