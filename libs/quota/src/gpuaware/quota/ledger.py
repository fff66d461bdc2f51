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
* A reclaim plan takes pods of queues holding more than their guarantee (borrowers) only, in the
  order that loses the least work: lower priority first, checkpointable before not, least progress
  since the last checkpoint, newest first; pods younger than their queue's ``min_runtime_s`` are
  kept (their reclaim becomes possible at ``started + min_runtime``, reported as ``retry_after_s``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpuaware.quota.fairshare import DecayedUsage, jain_index, normalised_shares, water_fill
from gpuaware.quota.tree import ANY_TYPE, RESOURCES, QueueTree

__all__ = ["Admission", "Allocation", "Demand", "QuotaLedger", "demand_of"]

GPU_MILLI = RESOURCES.index("gpu_milli")


def guarded(g: np.ndarray) -> np.ndarray:
    """The resources a guarantee speaks for: GPUs always, the others only when it names them (a queue
    guaranteed 4 GPUs and no CPU does not borrow because its pods ask for CPU)."""
    mask = g > 0
    mask[:2] = True
    return mask


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod asks for, as a resource vector (see ``RESOURCES``) and the GPU type it takes."""

    vector: np.ndarray
    gpu_type: str = ANY_TYPE

    @classmethod
    def of(cls, *, gpus: int = 0, gpu_milli: int = 0, gpu_memory_mib: int = 0, cpu_milli: int = 0,
           memory_mib: int = 0, gpu_type: str = ANY_TYPE) -> Demand:
        return cls(np.array([gpus, gpu_milli, gpu_memory_mib, cpu_milli, memory_mib], dtype=np.int64), gpu_type)


def demand_of(num_gpu: int, gpu_milli: int, gpu_memory_mib: int, cpu_milli: int, memory_mib: int,
              gpu_type: str = ANY_TYPE, gpu_milli_total: int | None = None) -> Demand:
    """A pod's demand: whole GPUs count as devices; a fraction counts only as compute and memory."""
    whole = num_gpu if gpu_milli >= 1000 else 0
    total = gpu_milli_total if gpu_milli_total is not None else (gpu_milli if num_gpu == 1 else 1000 * num_gpu)
    return Demand.of(gpus=whole, gpu_milli=total, gpu_memory_mib=gpu_memory_mib * max(num_gpu, 1),
                     cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_type=gpu_type)


@dataclass(slots=True)
class Allocation:
    """A running pod as quota sees it."""

    uid: str
    queue: str
    demand: Demand
    started_at: float
    node: str | None = None
    priority: int = 0
    checkpointable: bool = False
    last_checkpoint_at: float | None = None
    name: str = ""
    namespace: str = ""

    def progress_at_risk(self, now: float) -> float:
        """Seconds of work lost if stopped now: since the last checkpoint (or since start)."""
        since = self.last_checkpoint_at if self.checkpointable and self.last_checkpoint_at else self.started_at
        return max(0.0, now - since)


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
    _held: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _leaf: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.usage is None:
            self.usage = DecayedUsage(self.tree.config.half_life_s, len(RESOURCES))
        # what each queue (and "" = the cluster) holds, per GPU type, kept as pods come and go: an
        # admission reads a few vectors instead of walking every running pod
        for a in list(self.running.values()):
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
        self.usage.advance(now, self._leaf)  # type: ignore[union-attr]

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
            self.running[alloc.uid] = alloc
            self._account(alloc, 1)

    def release(self, uid: str, now: float) -> Allocation | None:
        """Forget a finished or preempted pod; None if unknown (already released)."""
        if uid not in self.running:
            return None
        self.advance(now)
        a = self.running.pop(uid)
        self._account(a, -1)
        return a

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
        victims, wait = self.reclaim_plan(leaf, d, now, exclude={uid} if uid else set())
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

    def reclaim_order(self, candidates: Iterable[Allocation], now: float) -> list[Allocation]:
        """Least lost work first: priority, checkpointable first, progress at risk, newest first."""
        return sorted(candidates, key=lambda a: (a.priority, not a.checkpointable, a.progress_at_risk(now),
                                                 -a.started_at, a.uid))

    def reclaim_plan(self, queue: str, d: Demand, now: float,
                     exclude: set[str] | None = None) -> tuple[list[Allocation] | None, float | None]:
        """Borrowers' pods to stop so that ``d`` fits: (victims, None) or (None, seconds until a plan
        may exist because of minimum runtimes, or None when none ever will)."""
        exclude = exclude or set()
        cands, waits = [], []
        for a in self.running.values():
            if a.uid in exclude or a.queue == queue:
                continue  # a queue does not reclaim from itself
            if d.gpu_type != ANY_TYPE and a.demand.gpu_type != d.gpu_type:
                continue
            min_rt = self.tree.specs[a.queue].min_runtime_s
            if now - a.started_at < min_rt:
                waits.append(a.started_at + min_rt - now)
                continue
            cands.append(a)
        victims: list[Allocation] = []
        freed = np.zeros(len(RESOURCES), dtype=np.int64)
        taken: set[str] = set()
        for a in self.reclaim_order(cands, now):
            if self.room(d, freed):
                break
            if not self.borrowing(a.queue, taken, now):
                continue
            victims.append(a)
            taken.add(a.uid)
            freed += a.demand.vector
        if self.room(d, freed):
            return victims, None
        return None, (min(waits) if waits else None)

    def borrowing(self, queue: str, taken: set[str], now: float) -> bool:
        """Does ``queue`` (after the pods already taken) hold more than its guarantee somewhere up its
        chain below the root? Only such pods are reclaimable."""
        chain = self.tree.ancestors(queue)
        chain = chain[:-1] if len(chain) > 1 else chain
        for q in chain:
            if not self.tree.has_guarantee(q, now):
                continue
            used = self.used(q, exclude=taken)
            g = self.tree.guaranteed(q, ANY_TYPE, now)
            if np.any((used > g) & guarded(g)):
                return True
        return False

    def fair_reclaim_plan(self, queue: str, d: Demand, demand: dict[str, float], now: float,
                          exclude: set[str] | None = None) -> list[Allocation] | None:
        """Above the guarantees, fairness by reclaim: a queue holding less than its water-filled fair
        share (``fair_shares(demand)``, GPU milli) takes pods of queues above theirs, in reclaim
        order, while the victim's queue stays at least as well served as the asker will be:
        ``(held_v - pod) / share_v >= (held_q + asked) / share_q``. That inequality is what stops two
        queues trading the same GPUs back and forth. None when no such plan frees enough room."""
        exclude = exclude or set()
        fs = self.fair_shares(demand, now)
        mine = fs.get(queue, 0.0)
        held = float(self.used(queue)[GPU_MILLI])
        asked = float(d.vector[GPU_MILLI])
        if mine <= 0 or held >= mine:
            return None
        after_q = (held + asked) / mine
        taken: dict[str, float] = {}
        victims: list[Allocation] = []
        freed = np.zeros(len(RESOURCES), dtype=np.int64)
        cands = [a for a in self.running.values() if a.uid not in exclude and a.queue != queue
                 and now - a.started_at >= self.tree.specs[a.queue].min_runtime_s
                 and (d.gpu_type == ANY_TYPE or a.demand.gpu_type == d.gpu_type)]
        used_by = {q: float(self.used(q)[GPU_MILLI]) for q in {a.queue for a in cands}}
        for a in self.reclaim_order(cands, now):
            if self.room(d, freed):
                break
            share = fs.get(a.queue, 0.0)
            left = used_by[a.queue] - taken.get(a.queue, 0.0) - float(a.demand.vector[GPU_MILLI])
            if share > 0 and left / share < after_q:
                continue
            victims.append(a)
            taken[a.queue] = taken.get(a.queue, 0.0) + float(a.demand.vector[GPU_MILLI])
            freed += a.demand.vector
        return victims if self.room(d, freed) else None

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
        return self.usage.priority_key(queue, self.used(queue), cap, self.tree.weight(queue, now))  # type: ignore[union-attr]
