"""Decisions held at Permit: staged in an open statement until a Permit plugin's wait ends.

The placement service's Permit plugin answers *wait* for every decision: it is final only once quota
admitted it (when a quota service answers) and the stream stored it. Meanwhile the reservation and
the evictions are staged in the cluster (later sessions see them, so nobody takes those GPUs) but not
in the ledger, and the pod is not tried again. `allow` records the decision in the ledger; `reject`
discards the statement, so nothing stays reserved and every victim holds its GPUs again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from gpuaware.placement.gang import GangTable
from gpuaware.placement.ledger import HOLDING, Ledger, Phase, PodEntry
from gpuaware.placement.outcomes import QUOTA_EXCEEDED, Decided, Parked

__all__ = ["HeldDecisions"]


class HeldDecisions:
    """Held decisions by pod uid; `record(decided)` writes one into the ledger when it is allowed."""

    def __init__(self, ledger: Ledger, gangs: GangTable, record: Callable[[Decided], None],
                 clock: Callable[[], float]) -> None:
        self.ledger = ledger
        self.gangs = gangs
        self.record = record
        self.clock = clock
        self._held: dict[str, Decided] = {}

    def __contains__(self, uid: object) -> bool:
        return uid in self._held

    def get(self, uid: str) -> Decided | None:
        return self._held.get(uid)

    def stored(self, decision_id: str) -> bool:
        """The stream stored `decision_id` (its echo came back): allowed, if it is held. True when the
        ledger has it now."""
        uid = decision_id.rsplit("/", 1)[0]
        held = self._held.get(uid)
        if held is not None and held.decision_id == decision_id:
            self.allow(uid)
        entry = self.ledger.pods.get(uid)
        return entry is not None and entry.decision_id == decision_id

    def reject_all(self) -> int:
        """Every held decision discarded and its pod queued again (the leader steps down). How many."""
        uids = list(self._held)
        for uid in uids:
            self.reject(uid)
        return len(uids)

    def hold(self, decided: Decided) -> None:
        self._held[decided.entry.uid] = decided

    def allow(self, uid: str) -> None:
        """The wait for `uid` ended in favour: its unit's decisions are recorded once its statement is
        committed (a gang's when every member was allowed)."""
        d = self._held.get(uid)
        if d is None or d.permit is None or not d.permit.allow(uid):
            return
        for member in d.permit.pods:
            self.record(self._held.pop(member))

    def settle(self, uid: str) -> None:
        """The binder reported on `uid` (bound, failed, gone): its decision reached the world, so its
        whole unit is allowed and recorded before the event is applied to the ledger."""
        d = self._held.get(uid)
        if d is not None and d.permit is not None and d.permit.allow():
            for member in d.permit.pods:
                self.record(self._held.pop(member))

    def reject(self, uid: str, reason: str = "", retry_after_s: float | None = None) -> list[Parked]:
        """The wait for `uid` ended in refusal: its unit's statement is discarded and its pods wait
        again. With a `reason` (quota's) they are parked and returned; without one (the decision was not
        stored) they are queued again, to be decided anew."""
        d = self._held.get(uid)
        if d is None or d.permit is None:
            return []
        d.permit.reject()
        out: list[Parked] = []
        for member in d.permit.pods:
            held = self._held.pop(member)
            for v in held.victims:  # a victim that left while the decision was held gets nothing back
                if v.uid not in self.ledger.pods and self.ledger.cluster is not None:
                    self.ledger.cluster.unreserve(v.uid)
            entry = held.entry
            gang = self.gangs.gangs.get(entry.request.gang_id) if entry.request and entry.request.gang_id else None
            if gang is not None:
                gang.placed = False
            if not reason:
                self.ledger.set_phase(entry, Phase.QUEUED)
            elif self.ledger.wait(member, entry.attempt, Phase.PARKED, QUOTA_EXCEEDED, now=self.clock()):
                out.append(Parked(entry, QUOTA_EXCEEDED, reason, retry_after_s=retry_after_s))
        return out

    def evict_also(self, uid: str, victims: Iterable[str]) -> tuple[PodEntry, ...]:
        """A permit's reclaim plan names more victims for `uid`'s held decision: those still holding
        GPUs (and evicted by no other plan) are evicted in its statement. Returns them."""
        d = self._held.get(uid)
        if d is None or d.permit is None:
            return ()
        known = {v.uid for v in d.victims}
        added: list[PodEntry] = []
        for v in victims:
            e = self.ledger.pods.get(v)
            if v in known or e is None or e.phase not in HOLDING or e.evicting:
                continue
            if d.permit.evict(v):
                added.append(e)
                known.add(v)
        if added:
            self._held[uid] = replace(d, victims=d.victims + tuple(added))
        return tuple(added)
