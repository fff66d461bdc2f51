"""The allocation ledger as an event-sourced state: which pod holds which GPUs, and which pods wait.

Placement owns the ledger but not the truth: the binder (Kubernetes or the digital twin) says what
really happened. So every change here is a reaction to one event, applied idempotently and in any
order the streams may deliver it after a restart:

    pod's life                      ledger                           capacity
    pending (queued by the leader)  QUEUED
    no fit now / gang incomplete    PARKED / HELD (waits)
    can never fit                   UNRESOLVABLE (re-checked only when the node set changes)
    decided                         DECIDED   reserve               taken
    bound                           BOUND     commit (the binder's placement wins if it differs)
    a victim of a planned eviction  (evicting) released now, re-reserved if the plan falls through
    bind failed                     -         roll back, close       freed
    finished / preempted            -         release, close         freed

*Closing* keeps a tombstone (uid -> last attempt), so a late or replayed event of an attempt that is
over (a decision echoed after its bind failure, a bound event after the pod finished) is ignored
instead of resurrecting a reservation. A new attempt (the binder re-queues a pod with attempt + 1)
opens the pod again. Tombstones are bounded (oldest forgotten first).

Preemption: a decision that plans evictions releases its victims' reservations at once (so the
preemptor can reserve what they hold) but keeps them open and marked `evicting`: the binder's
``preempted`` (or ``finished``) event closes them; if the plan falls through (the preemptor's
binding failed, or it bound while a victim was never evicted) the victims still marked take their
reservation back. Leader and standbys apply the same rule to the same decision, so their views agree.

GPU memory is the cluster's (`Cluster.gpu_mem_free`): a pod holds the memory its slices name
(`gpu_mem`), so the filters see which GPUs can still take a pod that needs, say, 8 GiB, even when
their compute is free (a worldly binder refuses such a binding). The world's word is not refused:
a binding reserves even where our memory accounting says it does not fit.

GPU health and telemetry signals are kept beside the pods (gpu_telemetry.py) and applied to every
rebuilt cluster.

The node set is not fixed: inventories come and go. `set_nodes` rebuilds the `Cluster` (a new uid,
so every score cache starts over) and re-reserves every allocation; allocations on nodes that
vanished are dropped and returned, since their pods went with the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaware.placement.cluster import Allocation, Cluster, ReserveError
from gpuaware.placement.entries import HOLDING, RETRIED, WAITING, Phase, PodEntry
from gpuaware.placement.gpu_telemetry import GpuTelemetry
from gpuaware.placement.model import GPU_CATALOG, GpuModel, NodeSpec, PodRequest, RequestError
from gpuaware.placement.tombstones import Tombstones

__all__ = ["HOLDING", "RETRIED", "WAITING", "Ledger", "LedgerStats", "Phase", "PodEntry"]

@dataclass(slots=True)
class LedgerStats:
    reserved: int = 0
    committed: int = 0
    rolled_back: int = 0
    released: int = 0
    ignored: int = 0
    """events about closed attempts or unknown pods, dropped idempotently"""
    conflicts: int = 0
    """the truth replaced a different reservation (a decision of an old leader, a moved pod)"""
    orphaned: int = 0
    """holding pods without a reservation after the last node-set change"""
    stale_forecasts: int = 0
    """GPU forecasts refused because they were issued before the GPU's last pod left"""


@dataclass(slots=True)
class Ledger:
    """Pods by uid plus the `Cluster` their reservations live in (pod uid = `PodRequest.name`)."""

    nodes: Sequence[NodeSpec] = ()
    catalog: dict[str, GpuModel] = field(default_factory=lambda: dict(GPU_CATALOG))
    max_tombstones: int = 200_000
    cluster: Cluster | None = None
    pods: dict[str, PodEntry] = field(default_factory=dict)
    closed: Tombstones = field(init=False)
    """uid -> the highest closed attempt, for the `max_tombstones` most recently closed pods"""
    clock: Callable[[], float] = time.time
    """the telemetry's clock (forecasts' ``issued_at`` are on it): wall time"""
    gpus: GpuTelemetry = field(init=False)
    stats: LedgerStats = field(default_factory=LedgerStats)
    _seq: int = 0
    _waiting: dict[str, PodEntry] = field(default_factory=dict)
    _evictions: dict[str, list[str]] = field(default_factory=dict)
    """decision id -> uids of the victims its plan evicts (while any is still open)"""

    def __post_init__(self) -> None:
        self.closed = Tombstones(self.max_tombstones)
        self.gpus = GpuTelemetry(self.clock)
        if self.nodes:
            self.set_nodes(self.nodes)

    # -- nodes --------------------------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[NodeSpec], catalog: dict[str, GpuModel] | None = None) -> list[PodEntry]:
        """Replace the node set; re-reserve every holding pod. Returns the holding pods left without a
        reservation (their node is not in the view, or they no longer fit): they stay in the ledger
        until the binder says they left, and are placed again by the next `set_nodes`."""
        if catalog is not None:
            self.catalog = dict(catalog)
        self.nodes = tuple(nodes)
        self.cluster = Cluster(self.nodes, self.catalog) if self.nodes else None
        if self.cluster is not None:
            self.gpus.apply_all(self.cluster)
        unplaced = []
        for entry in self.pods.values():
            if entry.phase in (Phase.BOUND, Phase.DECIDED):
                entry.placed = False  # nothing is reserved in the new cluster yet
        for phase in (Phase.BOUND, Phase.DECIDED):  # bindings first: they are the truth
            for entry in sorted((e for e in self.pods.values() if e.phase == phase), key=lambda e: e.seq):
                if entry.evicting:
                    continue
                # a binding is the world's truth: it holds its GPUs even where one is quarantined since
                if self._reserve(entry, entry.node, entry.gpus, truth=phase == Phase.BOUND) is None:
                    unplaced.append(entry)
        self.stats.orphaned = len(unplaced)
        return unplaced

    def set_gpu_health(self, node: str, slot: int, state: int) -> bool:
        """Record a GPU's health; True when it gave capacity back (quarantine lifted)."""
        return self.gpus.set_health(self.cluster, node, slot, state)

    def set_gpu_signals(self, node: str, slot: int, **values: float | None) -> bool:
        """Record a GPU's telemetry signals (``Cluster.set_gpu_signals`` keywords); kept across
        node-set rebuilds. True when the cluster's (quantised) view changed."""
        return self.gpus.set_signals(self.cluster, node, slot, values)

    def set_gpu_forecast(self, node: str, slot: int, util: float, issued_at: float) -> bool:
        """Record a GPU's forecast p90 utilisation (0..1) issued at ``issued_at``; refused (False) when
        the GPU's last pod left after that (gpu_telemetry.py)."""
        if self.gpus.is_stale(node, slot, issued_at):
            self.stats.stale_forecasts += 1
            return False
        return self.set_gpu_signals(node, slot, util_forecast=util)

    # -- bookkeeping --------------------------------------------------------------------------------

    def is_closed(self, uid: str, attempt: int) -> bool:
        last = self.closed.get(uid)
        return last is not None and attempt <= last

    def is_stale(self, uid: str, attempt: int) -> bool:
        """An event about an attempt that is over, or older than the one the ledger holds."""
        if self.is_closed(uid, attempt):
            return True
        entry = self.pods.get(uid)
        return entry is not None and attempt < entry.attempt

    def set_phase(self, entry: PodEntry, phase: Phase) -> None:
        entry.phase = phase
        if phase in RETRIED:
            self._waiting[entry.uid] = entry
        else:
            self._waiting.pop(entry.uid, None)

    def _drop(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self._waiting.pop(uid, None)

    def _close(self, uid: str, attempt: int) -> None:
        self._drop(uid)
        self.closed.close(uid, attempt)

    def _entry(self, uid: str, attempt: int, phase: Phase, request: PodRequest | None, now: float,
               payload: Any) -> PodEntry:
        entry = self.pods.get(uid)
        if entry is None or entry.attempt != attempt:
            if entry is not None and entry.phase in HOLDING:
                self._release(entry)  # a newer attempt replaces the old one
            self._seq += 1
            entry = PodEntry(uid, attempt, phase, request, now, payload=payload, seq=self._seq)
            self.pods[uid] = entry
            self.set_phase(entry, phase)
        else:
            self.set_phase(entry, phase)
            entry.since = now
            if request is not None:
                entry.request = request
            if payload is not None:
                entry.payload = payload
        return entry

    def _reserve(self, entry: PodEntry, node: str, gpus: tuple[int, ...], *, truth: bool = False) -> Allocation | None:
        """Reserve `entry` on `node`; None when impossible. With `truth` (a binding the binder
        reports) undecided reservations in the way are evicted first: the world wins over our plans."""
        if self.cluster is None or entry.request is None:
            return None
        i = self.cluster.index.get(node)
        if i is None:
            return None
        for _ in range(2):
            try:
                alloc = self.cluster.reserve(entry.request, i, gpus, entry.gpu_mem or None, check_memory=not truth)
            except ReserveError:
                if not truth or not self._evict_decided(node, entry.uid):
                    self.stats.conflicts += 1
                    return None
                continue
            except RequestError:
                return None
            entry.node, entry.gpus, entry.placed = node, tuple(gpus), True
            return alloc
        self.stats.conflicts += 1
        return None

    def _evict_decided(self, node: str, keep: str) -> bool:
        """Release every not-yet-bound decision on `node` (they will fail to bind). True if any."""
        victims = [e for e in self.pods.values()
                   if e.phase == Phase.DECIDED and e.placed and e.node == node and e.uid != keep]
        for e in victims:
            self._release(e)
            self._drop(e.uid)
            self.stats.conflicts += 1
        return bool(victims)

    def _release(self, entry: PodEntry) -> bool:
        placed, entry.placed = entry.placed, False
        if self.cluster is None or not placed:
            return False
        if self.cluster.unreserve(entry.uid) is None:
            return False
        self.gpus.released(self.cluster, entry.node, entry.gpus)
        return True

    # -- waiting pods -------------------------------------------------------------------------------

    def queue(self, uid: str, attempt: int, request: PodRequest, now: float = 0.0, payload: Any = None) -> bool:
        """A pending pod arrived. False when it is stale or already known for this attempt."""
        if self.is_stale(uid, attempt):
            self.stats.ignored += 1
            return False
        entry = self.pods.get(uid)
        if entry is not None and entry.attempt == attempt:
            return False
        self._entry(uid, attempt, Phase.QUEUED, request, now, payload)
        return True

    def wait(self, uid: str, attempt: int, phase: Phase, reason: str, request: PodRequest | None = None,
             now: float = 0.0, payload: Any = None) -> bool:
        """Park, hold or mark unresolvable. Never downgrades a decided/bound pod of the same attempt
        (an echo of an older "unschedulable" arriving after the decision)."""
        assert phase in (Phase.PARKED, Phase.HELD, Phase.UNRESOLVABLE, Phase.QUEUED)
        if self.is_stale(uid, attempt):
            self.stats.ignored += 1
            return False
        entry = self.pods.get(uid)
        if entry is not None and entry.attempt == attempt and entry.phase in HOLDING:
            return False
        if entry is None and request is None:
            self.stats.ignored += 1
            return False
        entry = self._entry(uid, attempt, phase, request, now, payload)
        entry.reason = reason
        return True

    def waiting(self, phases: Iterable[Phase] = (Phase.PARKED,)) -> list[PodEntry]:
        """Pods in `phases`, highest priority first, then oldest first (parked and queued pods are
        indexed: asking for those costs their number, not the ledger's size)."""
        wanted = set(phases)
        pool = self._waiting.values() if wanted <= set(RETRIED) else self.pods.values()
        out = [e for e in pool if e.phase in wanted and e.request is not None]
        out.sort(key=lambda e: (-(e.request.priority if e.request else 0), e.seq))
        return out

    def __iter__(self) -> Iterator[PodEntry]:
        return iter(self.pods.values())

    # -- holding pods -------------------------------------------------------------------------------

    def decide(self, uid: str, attempt: int, decision_id: str, node: str, gpus: Sequence[int],
               request: PodRequest | None = None, now: float = 0.0, payload: Any = None, gpu_mem: int = 0) -> bool:
        """Reserve for a decision (ours, or one read back from the stream). Idempotent: the same
        decision again is a no-op; a different decision for the same attempt replaces the
        reservation (the stream's copy is the truth when two leaders raced)."""
        gpus = tuple(int(g) for g in gpus)
        if self.is_stale(uid, attempt):
            self.stats.ignored += 1
            return False
        entry = self.pods.get(uid)
        if entry is not None and entry.attempt == attempt and entry.phase in HOLDING:
            if entry.decision_id == decision_id and entry.node == node and entry.gpus == gpus:
                return False
            if entry.phase == Phase.BOUND:
                self.stats.ignored += 1  # the binding is the truth; a decision cannot move it
                return False
            self.stats.conflicts += 1
            self._release(entry)
        entry = self._entry(uid, attempt, Phase.DECIDED, request, now, payload)
        if entry.request is None:
            self._drop(uid)
            return False
        self.set_phase(entry, Phase.DECIDED)
        entry.decision_id = decision_id
        entry.node, entry.gpus, entry.gpu_mem = node, gpus, gpu_mem
        if self._reserve(entry, node, gpus) is not None:
            self.stats.reserved += 1
        return True

    def bound(self, uid: str, attempt: int, node: str, gpus: Sequence[int], request: PodRequest | None = None,
              decision_id: str = "", now: float = 0.0, gpu_mem: int | None = None) -> bool:
        """Commit: the binder placed the pod on `node`/`gpus`. The binder's placement wins."""
        gpus = tuple(int(g) for g in gpus)
        if self.is_closed(uid, attempt):
            self.stats.ignored += 1
            return False
        entry = self.pods.get(uid)
        if entry is not None and entry.phase in HOLDING and entry.node == node and entry.gpus == gpus:
            if not entry.placed and not entry.evicting:
                self._reserve(entry, node, gpus, truth=True)
            if entry.phase == Phase.DECIDED:
                self.set_phase(entry, Phase.BOUND)
                entry.since = now
                self.stats.committed += 1
                self._restore_victims(entry.decision_id)
                return True
            return False
        if entry is not None and entry.phase in HOLDING:
            self.stats.conflicts += 1
            self._release(entry)
        if request is None and entry is not None:
            request = entry.request
        if request is None:
            self.stats.ignored += 1
            return False
        entry = self._entry(uid, max(attempt, entry.attempt if entry else attempt), Phase.BOUND, request, now, None)
        self.set_phase(entry, Phase.BOUND)
        entry.decision_id = decision_id or entry.decision_id
        entry.node, entry.gpus = node, gpus
        if gpu_mem is not None:
            entry.gpu_mem = gpu_mem
        self._reserve(entry, node, gpus, truth=True)
        self.stats.committed += 1
        self._restore_victims(entry.decision_id)
        return True

    def refine(self, uid: str, request: PodRequest) -> bool:
        """Replace a holding pod's request by a fuller one (a binding seen before its decision
        carried no CPU/memory); its reservation is taken again with the new amounts."""
        entry = self.pods.get(uid)
        if entry is None or entry.phase not in HOLDING or entry.request == request:
            return False
        was_placed = entry.placed
        self._release(entry)
        old, entry.request = entry.request, request
        if was_placed and self._reserve(entry, entry.node, entry.gpus, truth=True) is None:
            entry.request = old
            self._reserve(entry, entry.node, entry.gpus, truth=True)
            return False
        return True

    def rollback(self, uid: str, decision_id: str, attempt: int | None = None) -> bool:
        """The binder could not bind `decision_id`: release it and close the attempt (the binder
        re-queues the pod as a new attempt when it should be tried again). True when capacity
        was freed."""
        entry = self.pods.get(uid)
        if entry is None or (decision_id and entry.decision_id and entry.decision_id != decision_id):
            if attempt is not None:
                self.closed.close(uid, attempt)
            self.stats.ignored += 1
            return False
        freed = entry.phase in HOLDING and self._release(entry)
        self._close(uid, entry.attempt if attempt is None else max(attempt, entry.attempt))
        self._restore_victims(entry.decision_id)
        if freed:
            self.stats.rolled_back += 1
        return freed

    def release(self, uid: str, attempt: int | None = None) -> bool:
        """The pod left (finished, deleted, preempted): free what it held and close it. True when
        capacity was freed."""
        entry = self.pods.get(uid)
        if entry is None:
            if attempt is not None:
                self._close(uid, attempt)
            self.stats.ignored += 1
            return False
        freed = entry.phase in HOLDING and self._release(entry)
        self._close(uid, entry.attempt if attempt is None else max(attempt, entry.attempt))
        if freed:
            self.stats.released += 1
        return freed

    # -- preemption ---------------------------------------------------------------------------------

    def evict_for(self, decision_id: str, victims: Iterable[str]) -> list[PodEntry]:
        """A decision plans to evict `victims`: release their reservations now, keep them open until
        the binder reports them gone. Idempotent; unknown or not-holding victims are skipped.
        Returns the entries released by this call."""
        out = []
        for uid in victims:
            entry = self.pods.get(uid)
            if entry is None or entry.phase not in HOLDING or entry.evicting:
                continue
            self._release(entry)
            entry.evicting = decision_id
            self._evictions.setdefault(decision_id, []).append(uid)
            out.append(entry)
        return out

    def evicting(self) -> list[PodEntry]:
        return [e for uids in self._evictions.values() for u in uids
                if (e := self.pods.get(u)) is not None and e.evicting]

    def _restore_victims(self, decision_id: str) -> None:
        """The plan of `decision_id` is over: victims the binder did not report gone hold again."""
        for uid in self._evictions.pop(decision_id, ()) if decision_id else ():
            entry = self.pods.get(uid)
            if entry is None or entry.evicting != decision_id:
                continue
            entry.evicting = ""
            if entry.phase in HOLDING and not entry.placed:
                self._reserve(entry, entry.node, entry.gpus, truth=entry.phase == Phase.BOUND)

    def check(self) -> None:
        """The cluster's ledger matches the holding pods (tests)."""
        assert set(self._waiting) == {e.uid for e in self.pods.values() if e.phase in RETRIED}, "waiting index"
        if self.cluster is None:
            return
        self.cluster.check()
        holding = {e.uid for e in self.pods.values() if e.phase in HOLDING and e.placed}
        assert not any(e.placed and e.evicting for e in self.pods.values()), "an evicting pod still holds"
        assert holding == set(self.cluster.allocations), "ledger and cluster disagree on who holds GPUs"
