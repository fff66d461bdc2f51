"""The quota ledger: who holds what, whether a pod may run, and whom to reclaim to make room.

Why it looks like this:

* One in-memory ledger per cluster (the service keeps it; a bench or the twin can keep their own):
  ``bind`` / ``release`` follow the binder's events, ``admit`` answers ``quota.admit``. Times are
  passed in; nothing reads a clock or does I/O.
* ``admit`` in order (first refusal wins, its reason is the reply's):
  1. queue resolution (unknown -> ``queue_unknown``; no queue -> the default, said in the reason);
  2. strict partitions: a node reserved to other queues is refused (``partition``), even idle;
  3. limits of the queue and every ancestor, for ``"*"`` and the pod's GPU type (``over_limit``);
  4. room: with a node chosen by placement the room exists; without one (or when the tree knows the
     cluster's capacity and it is full) a queue still inside its guarantee gets a *reclaim plan*,
     anyone else ``no_capacity``;
  the reason is ``guaranteed`` inside the guarantee and ``borrowed`` above it (borrowed pods are the
  ones reclaimed later).
* Whom a reclaim plan takes is reclaim.py's. The ledger counts each pod's preemptions for it
  (``preempted``): the count outlives the pod's release, since a preempted pod is pending again under
  the same uid and its next run must still know, and is dropped when the pod is gone for good
  (``finished``). ``bind`` stamps the count on the pod's ``Allocation``, where the plans read it.
  Counting by the event's time makes a redelivered preemption count once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpuaware.quota.demand import GPU_MILLI, Allocation, Demand, demand_of, guarded
from gpuaware.quota.fairshare import DecayedUsage, jain_index, normalised_shares, water_fill
from gpuaware.quota.reclaim import reclaim_plan
from gpuaware.quota.tree import ANY_TYPE, RESOURCES, QueueTree

__all__ = ["GPU_MILLI", "Admission", "Allocation", "Demand", "QuotaLedger", "demand_of", "guarded"]

@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    queue: str
    reason: str
    reclaim: tuple[Allocation, ...] = ()
    retry_after_s: float | None = None
    borrowed: bool = False


@dataclass(slots=True)
class QuotaLedger:
    tree: QueueTree
    running: dict[str, Allocation] = field(default_factory=dict)
    usage: DecayedUsage | None = None
    preempted_at: dict[str, list[float]] = field(default_factory=dict)
    """pod uid -> when it was preempted, each time once; kept across its re-queues (``preempted``)"""
    _held: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _leaf: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.usage is None:
            self.usage = DecayedUsage(self.tree.config.half_life_s, len(RESOURCES))
        # what each queue (and "" = the cluster) holds, per GPU type, kept as pods come and go: an
        # admission reads a few vectors instead of walking every running pod
        for a in list(self.running.values()):
            a.preemptions = max(a.preemptions, self.preemptions(a.uid))
            self._account(a, 1)

    def _account(self, a: Allocation, sign: int) -> None:
        v = sign * a.demand.vector
        for q in (*self.tree.ancestors(a.queue), ""):
            for gt in {ANY_TYPE, a.demand.gpu_type}:
                cur = self._held.get((q, gt))
                self._held[(q, gt)] = v.copy() if cur is None else cur + v
        cur = self._leaf.get(a.queue)
        self._leaf[a.queue] = v.copy() if cur is None else cur + v

    # -- bookkeeping -------------------------------------------------------------------------
    def used(self, queue: str, gpu_type: str = ANY_TYPE, exclude: Iterable[str] = ()) -> np.ndarray:
        """What ``queue`` and its descendants hold (of ``gpu_type``; ``"*"`` = all types), less the
        pods in ``exclude``."""
        out = self._held.get((queue, gpu_type))
        out = np.zeros(len(RESOURCES), dtype=np.int64) if out is None else out.copy()
        for uid in exclude:
            a = self.running.get(uid)
            if a is not None and (gpu_type == ANY_TYPE or a.demand.gpu_type == gpu_type) \
                    and queue in self.tree.ancestors(a.queue):
                out -= a.demand.vector
        return out

    def total_used(self, gpu_type: str = ANY_TYPE) -> np.ndarray:
        return self.used("", gpu_type)

    def advance(self, now: float) -> None:
        """Fold what every leaf queue held since the last call into the decayed history."""
        self.usage.advance(now, self._leaf)  # type: ignore[union-attr]  # usage is set in __post_init__

    def bind(self, alloc: Allocation, now: float | None = None) -> bool:
        """Record a running pod; False if it was already recorded (events are redelivered)."""
        if alloc.uid in self.running:
            return False
        self.advance(alloc.started_at if now is None else now)
        self.adopt(alloc)
        return True

    def adopt(self, alloc: Allocation) -> None:
        """Record a running pod without advancing the history (moving pods into a new ledger)."""
        if alloc.uid not in self.running:
            alloc.preemptions = max(alloc.preemptions, self.preemptions(alloc.uid))
            self.running[alloc.uid] = alloc
            self._account(alloc, 1)

    def release(self, uid: str, now: float) -> Allocation | None:
        """Stop counting a pod that no longer runs (its preemption count stays); None if unknown."""
        if uid not in self.running:
            return None
        self.advance(now)
        a = self.running.pop(uid)
        self._account(a, -1)
        return a

    def preempted(self, uid: str, at: float) -> int:
        """The pod was preempted at ``at`` (and may come back under the same uid): release it and count
        the preemption, once however often the event is delivered. Returns its count."""
        times = self.preempted_at.setdefault(uid, [])
        if at not in times:
            times.append(at)
        self.release(uid, at)
        return len(times)

    def finished(self, uid: str, now: float) -> Allocation | None:
        """The pod is gone for good (finished, deleted, dropped): release it and forget its count."""
        self.preempted_at.pop(uid, None)
        return self.release(uid, now)

    def preemptions(self, uid: str) -> int:
        """How often the pod was preempted since it was first seen (0 once it finished)."""
        return len(self.preempted_at.get(uid, ()))

    def checkpointed(self, uid: str, at: float) -> None:
        a = self.running.get(uid)
        if a is not None:
            a.last_checkpoint_at = at

    # -- decisions ---------------------------------------------------------------------------
    def over_limit(self, queue: str, d: Demand, now: float | None) -> str | None:
        for q in self.tree.ancestors(queue):
            for gt in {ANY_TYPE, d.gpu_type}:
                after = self.used(q, gt) + d.vector
                lim = self.tree.limit(q, gt, now)
                bad = np.flatnonzero(after > lim)
                if bad.size:
                    i = bad[0]
                    return (f"over_limit: {q} would hold {RESOURCES[i]}[{gt}] {after[i]} > limit {lim[i]}")
        return None

    def within_guarantee(self, queue: str, d: Demand, now: float | None) -> bool:
        """Would ``queue`` and each ancestor below the root stay inside its guarantee with ``d`` added?
        (The roots' guarantees are checked against the cluster's capacity when the tree is validated;
        below them a queue's holding counts its children's borrowing, so the root would call every
        pod of a full cluster borrowed.)"""
        chain = self.tree.ancestors(queue)
        for q in chain[:-1] if len(chain) > 1 else chain:
            if not self.tree.has_guarantee(q, now):
                continue
            for gt in {ANY_TYPE, d.gpu_type}:
                g = self.tree.guaranteed(q, gt, now)
                asked = (d.vector > 0) & guarded(g)
                if np.any((self.used(q, gt) + d.vector)[asked] > g[asked]):
                    return False
        return True

    def admit(self, queue: str, d: Demand, now: float, node: str | None = None,
              allow_reclaim: bool = True, uid: str = "") -> Admission:
        """May a pod of ``queue`` asking ``d`` run now (on ``node``, if placement chose one)?"""
        leaf, why = self.tree.resolve(queue)
        if leaf is None:
            return Admission(False, queue or "default", why)
        note = f" ({why})" if why else ""
        part = self.tree.allowed_on(leaf, node)
        if part is not None:
            return Admission(False, leaf, f"partition: node {node} is reserved to {list(part.queues)} "
                                          f"by partition {part.name}{note}")
        if (over := self.over_limit(leaf, d, now)) is not None:
            return Admission(False, leaf, over + note)
        inside = self.within_guarantee(leaf, d, now)
        label = "borrowed" if not inside else (
            "guaranteed" if any(self.tree.has_guarantee(q, now) for q in self.tree.ancestors(leaf)) else "unlimited")
        room = self.room(d)
        if node is not None or room:
            return Admission(True, leaf, label + note, borrowed=not inside)
        if not inside or not allow_reclaim:
            return Admission(False, leaf, ("no_capacity: the cluster is full and the queue is above its "
                                           "guarantee" if not inside else "no_capacity: reclaim not allowed")
                             + note)
        victims, wait = reclaim_plan(self, leaf, d, now, exclude={uid} if uid else set())
        if victims is None:
            return Admission(False, leaf, "no_capacity: borrowed capacity is not reclaimable yet" + note,
                             retry_after_s=wait)
        return Admission(True, leaf, "guaranteed: reclaiming borrowed capacity" + note, reclaim=tuple(victims))

    def room(self, d: Demand, freed: np.ndarray | None = None) -> bool:
        """Does the cluster (as far as the tree knows its capacity) hold ``d`` now? Unknown = yes."""
        ok = True
        for gt in {ANY_TYPE, d.gpu_type}:
            cap = self.tree.capacity(gt)
            if cap is None:
                continue
            free = cap - self.total_used(gt) + (0 if freed is None else freed)
            asked = d.vector > 0
            ok &= bool(np.all(free[asked] >= d.vector[asked]))
        return ok

    # -- reporting ---------------------------------------------------------------------------
    def fair_shares(self, demand: dict[str, float], now: float | None = None) -> dict[str, float]:
        """Water-filled GPU-milli entitlement of each leaf queue with ``demand`` (running + pending)."""
        cap = self.tree.capacity()
        total = float(cap[GPU_MILLI]) if cap is not None and cap[GPU_MILLI] < 1 << 60 else float(
            sum(demand.values()))
        weights = {q: self.tree.weight(q, now) for q in demand}
        guaranteed = {q: float(self.tree.guaranteed(q, ANY_TYPE, now)[GPU_MILLI]) for q in demand}
        return water_fill(total, demand, weights, guaranteed)

    def jain(self, demand: dict[str, float], now: float | None = None) -> float:
        """Jain's index over leaf queues with demand of min(1, held GPU / entitled GPU)."""
        ent = self.fair_shares(demand, now)
        got = {q: float(self.used(q)[GPU_MILLI]) for q in demand}
        return jain_index(normalised_shares(got, ent))

    def order_key(self, queue: str, now: float | None = None) -> float:
        """Who is served next among queues over their guarantee: smaller first (decayed DRF)."""
        cap = self.tree.capacity()
        cap = cap if cap is not None else np.maximum(self.total_used(), 1)
        return self.usage.priority_key(queue, self.used(queue), cap, self.tree.weight(queue, now))  # type: ignore[union-attr]  # usage is set in __post_init__
