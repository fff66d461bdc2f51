"""Quota as placement's asynchronous Permit: ask `quota.admit` about each decision held at Permit.

Admission. Every decision leaves the scheduling session held at Permit (permit.py); quota answers
over NATS, so it is asked here, between staging and publishing:

* admitted: the decision is published, and allowed once the stream stored it;
* refused: `PlacementState.reject` discards its statement (with every other member of its gang:
  nothing stays reserved) and parks the pod with quota's reason; the retry pass looks at it again
  after `retry_after_s`;
* admitted with a reclaim plan: the plan's victims are evicted in the same open statement and join
  the decision's planned preemptions;
* nobody listening on `quota.admit`: admitted (logged once; asked again every `quota_recheck_s`);
  no answer in time: a transient error (the pending pods come back).

Reclaim. Quota lends a queue's idle guarantee to others and gives it back by answering the owner's
pod with a reclaim plan (`AdmitReply.would_reclaim`). A lone pod that just found no room is asked
about as a dry run with no node; a plan in the answer is executed by the planner
(`PlacementState.reclaim`, gpuaware.placement.actions.reclaim): the pod is placed where evicting only
the pods quota named makes room, and they become the decision's planned preemptions (reason
``reclaim``, checkpoint first when they can), which the binder executes before binding. The decision
then goes through the ordinary admission with its node, which reserves it in quota.

Asking again. Borrowed capacity not reclaimable yet (minimum runtimes): after quota's
`retry_after_s`. A plan that cannot be executed here yet (a victim decided but not bound, or taken by
another plan): after a backoff (`bus.RetryPolicy`, 1 s doubling up to `quota_recheck_s`). A new
leader asks about every lone pod left parked (`recheck_parked`): the old leader's questions died with
it. These questions are advice: one that times out or finds nobody never fails a publish, and at
most `MAX_ASKS_PER_PASS` are asked per publish.

With every queue unlimited quota never plans a reclaim, so placement decides exactly as without quota
(tests/quota_service/test_quota_service_placement.py). Gangs are not reclaimed for: quota plans per
pod and a gang is placed all or none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpuaware import bus
from gpuaware.placement import Phase
from gpuaware.schemas import QUOTA_ADMIT, AdmitReply, AdmitRequest, PodPending, PodUnschedulable
from gpuaware.services.placement.absence import Absence
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, Outcome, PlacementState, Unschedulable

log = logging.getLogger(__name__)

NOT_FOR_RECLAIM = frozenset({"gang_incomplete", "quota_exceeded", "invalid_request", "refused_by_binder",
                             "elastic_grow"})
"""verdicts that more capacity would not change (or that quota itself gave): no reclaim is asked for"""
MAX_ASKS_PER_PASS = 64
"""reclaim questions per publish: a burst of parked pods does not hold the pending stream up"""


class QuotaPermit:
    def __init__(self, nc: bus.Client, settings: PlacementSettings, source: str, state: PlacementState,
                 retry_later: Callable[[float], None]) -> None:
        self.nc = nc
        self.settings = settings
        self.source = source
        self.state = state
        self.retry_later = retry_later
        self.absence = Absence()
        self.due: dict[str, float] = {}
        """pod uid -> when to ask quota for a reclaim plan again (monotonic): not reclaimable yet"""
        self._unplanned: dict[str, int] = {}
        """pod uid -> plans of quota's it could not execute in a row (the backoff's attempt)"""
        self.reclaims = 0
        """decisions this instance made from quota's reclaim plans"""

    @property
    def active(self) -> bool:
        """Worth asking: enabled, and a quota service answered (or was not known absent) lately."""
        return self.settings.quota_enabled and self.absence.present

    async def permit(self, outcomes: list[Outcome]) -> list[Outcome]:
        """What to publish once quota was asked: reclaim plans executed, refused decisions parked.
        While no quota service answers, pods that found no room are remembered and asked about once
        it may be back (`quota_recheck_s`)."""
        if not self.settings.quota_enabled:
            return outcomes
        if not self.active:
            wanted = [o.msg.pod_uid for o in outcomes if isinstance(o, Unschedulable) and self._wants(o.msg)]
            if wanted:
                self._later(wanted, self.absence.wait_s)
            return outcomes
        outcomes = await self.reclaim(outcomes)
        decided = [o for o in outcomes if isinstance(o, Decided)]
        if decided and self.active:
            refused, amended = await self.admit(decided)
            if refused or amended:
                outcomes = [amended.get(o.msg.pod_uid, o) if isinstance(o, Decided) else o for o in outcomes
                            if not (isinstance(o, Decided) and o.msg.pod_uid in refused)]
                outcomes += refused.values()
        return outcomes

    async def reclaim(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Pods that found no room (fresh verdicts, and pods whose plan is due again): those quota
        answers with a reclaim plan are decided with the plan's victims as preemptions."""
        now = time.monotonic()
        asking = [o.msg.pod_uid for o in outcomes if isinstance(o, Unschedulable) and self._wants(o.msg)]
        asking += [uid for uid, at in self.due.items() if at <= now and uid not in asking]
        if not asking or not self.active:
            return outcomes
        if len(asking) > MAX_ASKS_PER_PASS:  # a burst of parked pods: the rest on the next pass
            for uid in asking[MAX_ASKS_PER_PASS:]:
                self.due.setdefault(uid, now)
            asking = asking[:MAX_ASKS_PER_PASS]
            self.retry_later(0.0)
        made: dict[str, Decided] = {}
        for i, uid in enumerate(asking):
            self.due.pop(uid, None)
            entry = self.state.ledger.pods.get(uid)
            if entry is None or entry.phase != Phase.PARKED or not isinstance(entry.payload, PodPending):
                self._unplanned.pop(uid, None)  # placed meanwhile, or gone
                continue
            try:
                reply = await self.ask(entry.payload, None, None, True)
            except bus.TransientError as exc:  # a dry run is advice: the verdicts are published anyway
                self._later(asking[i:], exc.delay or 1.0)
                log.warning("quota did not answer about reclaiming for %d parked pods (%s); asking again in %.0fs",
                            len(asking) - i, exc, exc.delay or 1.0)
                break
            if reply is None:  # nobody answers: asked again once quota may be back
                self._later(asking[i:], self.settings.quota_recheck_s)
                break
            if not reply.admitted:
                if reply.retry_after_s is not None and reply.reason.startswith("no_capacity"):
                    self.due[uid] = time.monotonic() + reply.retry_after_s
                    self.retry_later(reply.retry_after_s)
                continue
            if not reply.would_reclaim:
                continue  # quota sees room: capacity, not quota, is short
            d = self.state.reclaim(uid, [c.pod_uid for c in reply.would_reclaim])
            if d is None:
                tries = self._unplanned[uid] = self._unplanned.get(uid, 0) + 1
                delay = bus.RetryPolicy(base=1.0, cap=max(1.0, self.settings.quota_recheck_s)).delay(tries)
                self.due[uid] = time.monotonic() + delay
                self.retry_later(delay)
                log.info("quota's reclaim plan for %s/%s (%s) does not make room on any one node here yet; "
                         "asking again in %.0fs", entry.payload.namespace, entry.payload.pod_name,
                         ", ".join(c.pod_uid for c in reply.would_reclaim)[:200], delay)
                continue
            self._unplanned.pop(uid, None)
            self.reclaims += 1
            made[uid] = d
            log.info("quota reclaim for %s/%s on %s: preempting %s", entry.payload.namespace,
                     entry.payload.pod_name, d.msg.node, ", ".join(p.pod_uid for p in d.msg.preemptions)[:200])
        if not made:
            return outcomes
        out: list[Outcome] = [o for o in outcomes if not (isinstance(o, Unschedulable) and o.msg.pod_uid in made)]
        return out + list(made.values())

    def _later(self, uids: list[str], delay: float) -> None:
        at = time.monotonic() + delay
        for uid in uids:
            self.due[uid] = at
        self.retry_later(delay)

    def recheck_parked(self) -> int:
        """Ask quota again about every lone pod parked for lack of room (a new leader: the previous
        one's pending questions died with it, and quota may have come up since). Returns how many."""
        now = time.monotonic()
        n = 0
        for e in self.state.ledger.waiting([Phase.PARKED]):
            p = e.payload
            if (isinstance(p, PodPending) and e.reason not in NOT_FOR_RECLAIM
                    and not (p.gang_id and p.gang_min_members > 1)):
                self.due.setdefault(e.uid, now)
                n += 1
        if n:
            self.retry_later(0.0)
        return n

    def _wants(self, msg: PodUnschedulable) -> bool:
        """A fresh verdict for lack of room (not one more capacity could not change) of a lone pod."""
        pod = msg.pod
        entry = self.state.ledger.pods.get(msg.pod_uid)
        return (pod is not None and entry is not None and entry.phase == Phase.PARKED
                and msg.reason not in NOT_FOR_RECLAIM and not (pod.gang_id and pod.gang_min_members > 1))

    async def ask(self, pod: PodPending, node: str | None, gpu_milli: int | None, dry_run: bool) -> AdmitReply | None:
        """The quota service's answer, or None when nobody answers `quota.admit` (admit)."""
        s = self.settings
        if not self.active:
            return None
        req = AdmitRequest(source=self.source, emitted_at=time.time(), cluster=s.cluster, pod=pod, node=node,
                           gpu_milli=gpu_milli, dry_run=dry_run)
        try:
            return await bus.request(self.nc, QUOTA_ADMIT, req, AdmitReply, timeout=s.quota_timeout_s)
        except bus.NoResponders:
            self.absence.noticed(s.quota_recheck_s, "no quota service answers %s: admitting every pod (asking again "
                                 "every %.0fs)", QUOTA_ADMIT, s.quota_recheck_s)
            return None
        except bus.RequestTimeout as exc:
            raise bus.TransientError(f"quota did not answer: {exc}", delay=1.0) from None

    async def admit(self, decided: list[Decided]) -> tuple[dict[str, Unschedulable], dict[str, Decided]]:
        """Ask quota about each held decision; the refused ones (with their whole gang) are rejected
        and parked. Returns their verdicts by pod uid, to publish instead, and the decisions an
        admit's reclaim plan added preemptions to."""
        refused: dict[str, Unschedulable] = {}
        amended: dict[str, Decided] = {}
        for o in decided:
            entry = self.state.ledger.pods.get(o.msg.pod_uid)
            if entry is None or entry.payload is None or o.msg.pod_uid in refused:
                continue
            reply = await self.ask(entry.payload, o.msg.node, sum(s.gpu_milli for s in o.msg.slices), False)
            if reply is None:
                if not self.active:
                    break
                continue
            if not reply.admitted:
                for verdict in self.state.reject(o.msg.pod_uid, reply.reason or "refused by quota",
                                                 reply.retry_after_s):
                    refused[verdict.msg.pod_uid] = verdict
                if reply.retry_after_s:
                    self.retry_later(reply.retry_after_s)
            elif reply.would_reclaim:
                msg = self.state.reclaim_for(o.msg, [c.pod_uid for c in reply.would_reclaim])
                if msg is not o.msg:
                    amended[o.msg.pod_uid] = Decided(msg)
        if refused:
            self.retry_later(self.settings.quota_recheck_s)
        return refused, amended
