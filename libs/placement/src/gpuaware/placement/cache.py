"""A scheduler that remembers, per request shape, every node's verdict and recomputes only what changed.

Why: a placement service sees the same few dozen request shapes over and over, and one decision
changes one node. `Scheduler.schedule` filters and scores every node per pod; with this wrapper a
pod whose shape was seen before costs the filters and scorers of the nodes whose `version` moved
since (typically the few nodes touched by the decisions in between) plus one compiled arg-max
(choose.py). It also gives `scores()` and `exclude` (constraints outside the engine, applied at
selection without invalidating anything).

What is cached, per shape (every field of `PodRequest` but its name) and node: the filters' verdict,
the weighted score sum, and the GPU the score plugin picked for sharing pods (for selectors that
read it from the cycle state: `GpuSelector.picks_from`). An entry is valid for a node while the
node's version is the one it was computed at; a new cluster (uid) drops everything; shapes are
evicted least-recently-used.

Results are identical to the wrapped scheduler's (same filters, the same float sums in the same
order, the same tie-break), which the tests check decision by decision on a trace. That holds only
when every plugin declares itself per-node (`FilterPlugin.per_node`, `ScorePlugin.per_node`); a
profile with one that does not makes the wrapper pass every call straight through (`cacheable`).

Observers (`PickObserver`) see each cached decision made while their signal exists on some GPU,
with each node's weighted share of the scores that read that signal: enough to decide the node
again without them (`effects.SignalEffect` counts how often a signal changed a pick). A profile
with no score reading an observer's signal shows that observer nothing; without observers the
decision path does no extra work.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Protocol

import numpy as np

from gpuaware.placement import row_kernels
from gpuaware.placement.choose import best_index
from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import (
    Code,
    CycleState,
    Decision,
    Scheduler,
    Status,
    WeightedScore,
    fit_gpus,
)
from gpuaware.placement.model import PodRequest

__all__ = ["CacheStats", "CachedScheduler", "Pick", "PickObserver", "shape_of"]

_SHAPE_FIELDS = tuple(f.name for f in fields(PodRequest) if f.name != "name")
_shape: Callable[[PodRequest], tuple[Any, ...]] = attrgetter(*_SHAPE_FIELDS)


def shape_of(pod: PodRequest) -> tuple[Any, ...]:
    """Everything about a request that filters and scores may read (all fields but the name)."""
    return _shape(pod)


@dataclass(frozen=True, slots=True)
class Pick:
    """One cached decision as an observer sees it."""

    pod: PodRequest
    snap: Snapshot
    node: int
    gpus: tuple[int, ...]
    totals: np.ndarray
    """[N] every node's weighted score sum (-inf where the pod may not go)"""
    part: np.ndarray
    """[N] the share of `totals` that the scores reading the observer's signal gave each node"""
    tie_rank: np.ndarray | None
    """the scheduler's tie-break (`best_index(totals - part, tie_rank)` picks as the cache would)"""
    gpus_on: Callable[[Snapshot], tuple[int, ...]]
    """the GPUs the selector would choose on `node` in another view (e.g. the signal blanked)"""


class PickObserver(Protocol):
    """Told about each decision the cache makes while some GPU carries `signal` (`Snapshot.signals`)."""

    signal: str

    def observe(self, pick: Pick) -> None: ...


@dataclass(slots=True)
class _Entry:
    version: np.ndarray  # [N] node version the row was computed at (-1: never)
    feasible: np.ndarray  # [N] bool
    total: np.ndarray  # [N] float64 weighted score sum where feasible, -inf elsewhere
    gpu: np.ndarray  # [N] int64 GPU picked by the score plugin (-1: none)
    parts: tuple[np.ndarray, ...]  # [N] float64 per watched signal: its scores' weighted part of `total`


@dataclass(slots=True)
class CacheStats:
    decisions: int = 0
    shape_hits: int = 0
    nodes_recomputed: int = 0
    passthrough: int = 0


@dataclass(frozen=True, slots=True)
class _Watch:
    """An observer and the positions (in the profile's score list) of the scores reading its signal."""

    observer: PickObserver
    scores: frozenset[int]


class CachedScheduler:
    """`schedule(pod, snap)` like the wrapped `Scheduler`, with per-(shape, node) results reused."""

    def __init__(self, scheduler: Scheduler, *, max_shapes: int = 1024,
                 observers: Sequence[PickObserver] = ()) -> None:
        self.inner = scheduler
        self.max_shapes = max_shapes
        self.gpu_key: str | None = scheduler.gpu_selector.picks_from
        self.cacheable = all(ws.plugin.per_node for ws in scheduler.scores) and all(
            f.per_node for f in scheduler.filters)
        self.total_weight = sum(ws.weight for ws in scheduler.scores) or 1
        self._scores: tuple[WeightedScore, ...] = tuple(scheduler.scores)
        self._watches: tuple[_Watch, ...] = ()
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._uid = -1
        for observer in observers:
            self.observe(observer)

    @property
    def name(self) -> str:
        return self.inner.name

    def observe(self, observer: PickObserver) -> None:
        """Show `observer` the decisions made while its signal exists; nothing when no score of the
        profile reads that signal. Cached entries restart (they keep no share for it yet)."""
        scores = frozenset(i for i, ws in enumerate(self._scores) if ws.plugin.signal == observer.signal)
        if scores:
            self._watches = (*self._watches, _Watch(observer, scores))
            self.clear()

    def clear(self) -> None:
        self._entries.clear()

    # -- the cached evaluation ---------------------------------------------------------------------

    def _entry(self, pod: PodRequest, snap: Snapshot) -> _Entry | Status:
        if snap.cluster_uid != self._uid:
            self._entries.clear()
            self._uid = snap.cluster_uid
        key = shape_of(pod)
        entry = self._entries.get(key)
        n = snap.num_nodes
        if entry is None:
            entry = _Entry(np.full(n, -1, np.int64), np.zeros(n, bool), np.full(n, -np.inf),
                           np.full(n, -1, np.int64), tuple(np.zeros(n) for _ in self._watches))
            self._entries[key] = entry
            if len(self._entries) > self.max_shapes:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
            self.stats.shape_hits += 1
        stale = row_kernels.changed_rows(entry.version, snap.version)
        if stale.size == 0:
            return entry
        self.stats.nodes_recomputed += int(stale.size)
        cycle = CycleState()
        mask = np.ones(stale.size, dtype=bool)
        for f in self.inner.filters:
            mask &= f.filter_rows(cycle, pod, snap, stale)
        ok = stale[mask]
        total = np.zeros(ok.size, dtype=np.float64)
        for part in entry.parts:
            part[stale] = 0.0
        if ok.size:
            for i, ws in enumerate(self._scores):
                try:
                    same = ws.plugin.constant(pod, snap)
                    # a score that is the same on every node is added as one number: the same float
                    # sums in the same order as adding its array
                    weighted = ws.weight * (ws.plugin.score(cycle, pod, snap, ok) if same is None else same)
                    total += weighted
                except Exception as exc:  # as Scheduler.schedule: the cycle fails, naming the plugin
                    entry.version[stale] = -1
                    return Status(Code.ERROR, f"{type(exc).__name__}: {exc}", ws.plugin.name)
                for watch, part in zip(self._watches, entry.parts, strict=True):
                    if i in watch.scores:
                        part[ok] += weighted
            if self.gpu_key is not None and self.gpu_key in cycle:
                nodes, gpus = cycle[self.gpu_key]
                entry.gpu[nodes] = gpus
        row_kernels.store_verdicts(stale, mask, ok, total, entry.feasible, entry.total, entry.version, snap.version)
        return entry

    def schedule(self, pod: PodRequest, snap: Snapshot, exclude: np.ndarray | None = None) -> Decision | Status:
        """As `Scheduler.schedule`. `exclude` (bool per node) takes nodes out of the choice without
        touching the cache: constraints the engine does not model (GPU memory held by pods, a node the
        binder just refused). When it leaves nothing, the status names the plugin `exclude`."""
        self.stats.decisions += 1
        if not self.cacheable:
            self.stats.passthrough += 1
            if exclude is not None and exclude.any():
                return self._schedule_excluding(pod, snap, exclude)
            return self.inner.schedule(pod, snap)
        entry = self._entry(pod, snap)
        if isinstance(entry, Status):
            return entry
        masked = entry.total if exclude is None else np.where(exclude, -np.inf, entry.total)
        pick, best = best_index(masked, self.inner.tie_rank)
        if pick < 0:
            if exclude is not None and entry.feasible.any():
                return Status(Code.UNSCHEDULABLE, f"every node that fits pod {pod.name} is excluded", "exclude")
            return self.inner.schedule(pod, snap)  # nothing fits: the wrapped scheduler says why
        cycle = CycleState()
        if self.gpu_key is not None:
            cycle[self.gpu_key] = (np.array([pick]), entry.gpu[pick : pick + 1])
        selector = self.inner.gpu_selector
        gpus = fit_gpus(pod, snap, pick, selector.select(cycle, pod, snap, pick))
        for watch, part in zip(self._watches, entry.parts, strict=True):
            if watch.observer.signal in snap.signals:
                watch.observer.observe(Pick(
                    pod, snap, pick, gpus, masked, part, self.inner.tie_rank,
                    lambda view: fit_gpus(pod, view, pick, selector.select(cycle, pod, view, pick))))
        return Decision(pod.name, pick, snap.node_names[pick], gpus, float(best), int(np.count_nonzero(entry.feasible)))

    def _schedule_excluding(self, pod: PodRequest, snap: Snapshot, exclude: np.ndarray) -> Decision | Status:
        nodes, total = self.scores(pod, snap)
        keep = ~exclude[nodes]
        if not keep.any():
            if nodes.size:
                return Status(Code.UNSCHEDULABLE, f"every node that fits pod {pod.name} is excluded", "exclude")
            return self.inner.schedule(pod, snap)
        nodes, total = nodes[keep], total[keep]
        rank = self.inner.tie_rank
        i, best = best_index(total, None if rank is None else rank[nodes])
        pick = int(nodes[i])
        gpus = fit_gpus(pod, snap, pick, self.inner.gpu_selector.select(CycleState(), pod, snap, pick))
        return Decision(pod.name, pick, snap.node_names[pick], gpus, float(best), int(nodes.size))

    def scores(self, pod: PodRequest, snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
        """(feasible node indices, their weighted score sums) without deciding (for explanations)."""
        if self.cacheable:
            entry = self._entry(pod, snap)
            if isinstance(entry, Status):
                raise RuntimeError(entry.reason)
            nodes = np.flatnonzero(entry.feasible)
            return nodes, entry.total[nodes].copy()
        cycle = CycleState()
        nodes = self.inner.feasible(cycle, pod, snap)
        total = np.zeros(nodes.size, dtype=np.float64)
        if nodes.size:
            for ws in self.inner.scores:
                total += ws.weight * ws.plugin.normalize(cycle, pod, ws.plugin.score(cycle, pod, snap, nodes))
        return nodes, total

    def normalized(self, score: float) -> float:
        """A weighted sum mapped back onto 0..100 (the contract's score range)."""
        return float(min(100.0, max(0.0, score / self.total_weight)))
