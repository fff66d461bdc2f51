"""A scheduler that remembers, per request shape, every node's verdict and recomputes only what changed.

Why: a placement service sees the same few dozen request shapes over and over (openb has ~300
distinct specs among 8,000 pods, a handful of them covering most pods), and one decision changes one
node. `Scheduler.schedule` still filters and scores all 1,213 (or 10,000) nodes per pod; with this
wrapper a pod whose shape was seen before costs the filters and scorers of the nodes whose `version`
moved since (typically the few nodes touched by the decisions in between) plus one compiled
arg-max (choose.py).

What is cached, per shape (every field of `PodRequest` but its name) and node: the filters' verdict,
the weighted score sum, and the GPU the score plugin picked for sharing pods (for selectors that read
it from the cycle state, like FGD's). An entry is valid for a node while the node's version is the
one it was computed at; a new cluster (uid) drops everything; shapes are evicted least-recently-used.

Results are identical to the wrapped scheduler's (same filters, the same float sums in the same
order, the same tie-break), which the tests check decision by decision on a trace. That holds only
for per-node plugins: a score with a `normalize` step (min-max across nodes, e.g. BestFit), a random
score, or a filter not known to be per-node makes the wrapper pass every call straight through
(`cacheable` says which).

What it buys, measured: the FGD-family scores (FGD, WasteGradient) keep a per-spec, per-node-version
cache of their own, so on openb (about 60 stale nodes per decision) the wrapper's gain is its
bookkeeping: filters on the changed rows only (`filter_rows`, compiled), one pass to choose, and the
weighted sums kept per node. The remaining cost is recomputing the stale nodes, which no cache
avoids; compiled (frag_kernels.py), the engine's part of a decision is about 135 µs on the 1,213-node
cluster. It pays for per-node scores without their own cache (DotProd, GpuPacking: 0.16-0.17 ->
0.13 ms per decision before the kernels) and gives `scores()` and `exclude` (constraints outside the
engine, applied at selection without invalidating anything).

Which decisions a signal changed (`watch`: a score, forecast-headroom by default, and its signal): the
score's weighted part of each node's sum is kept beside the sum, and while the signal exists on some
GPU (`Snapshot.signals`) every decision is also made without it: the node from the sum minus the part
(the same tie rule), and on the same node the GPUs the selector picks with the signal blanked
(`Snapshot.without_signal`; signal-aware GPU choice reads it too). `stats.watched_scored` counts those
decisions, `watched_changed` the ones whose node differs, `watched_gpu_changed` the ones on the same
node with other GPUs: how often the signal decided something, rather than whether it was read. It
costs about 16 µs per decision while the signal exists (openb, 1,213 nodes: the arg-max without the
part 2 µs, the blanked view 7 µs, the GPU choice again 7 µs; a decision's placement CPU is ~330 µs),
and nothing for a profile without the score.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import numpy as np

from gpuaware.placement import row_kernels
from gpuaware.placement.choose import best_index
from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import (
    Code,
    CycleState,
    Decision,
    GpuFit,
    ResourcesFit,
    Scheduler,
    Status,
    WholeGpuOnly,
    fit_gpus,
)
from gpuaware.placement.model import PodRequest

_SHAPE_FIELDS = tuple(f.name for f in fields(PodRequest) if f.name != "name")
_PER_NODE_FILTERS = (ResourcesFit, GpuFit, WholeGpuOnly)
_ARRAYS = ("model_idx", "cpu_capacity", "mem_capacity", "cpu_free", "mem_free", "gpu_count", "gpu_present",
           "gpu_free", "gpu_health", "tag_counts", "nvlink_island", "numa_node", "version",
           "gpu_health_score", "gpu_temp_c", "gpu_power_frac", "gpu_util_forecast", "gpu_mem_total", "gpu_mem_free")


_shape = attrgetter(*_SHAPE_FIELDS)


def shape_of(pod: PodRequest) -> tuple[Any, ...]:
    """Everything about a request that filters and scores may read (all fields but the name)."""
    return _shape(pod)


def rows_view(snap: Snapshot, rows: np.ndarray) -> Snapshot:
    """The snapshot restricted to `rows` (for per-node filters; scorers get the full snapshot)."""
    names = snap.node_names
    return Snapshot(snap.cluster_uid, [names[i] for i in rows], snap.models,
                    **{k: getattr(snap, k)[rows] for k in _ARRAYS}, signals=snap.signals)


@dataclass(slots=True)
class _Entry:
    version: np.ndarray  # [N] node version the row was computed at (-1: never)
    feasible: np.ndarray  # [N] bool
    total: np.ndarray  # [N] float64 weighted score sum where feasible, -inf elsewhere
    gpu: np.ndarray  # [N] int64 GPU picked by the score plugin (-1: none)
    part: np.ndarray | None = None  # [N] float64 the watched score's weighted part of `total` (0 elsewhere)


@dataclass(slots=True)
class CacheStats:
    decisions: int = 0
    shape_hits: int = 0
    nodes_recomputed: int = 0
    passthrough: int = 0
    watched_scored: int = 0
    """decisions made while the watched score's signal existed (see the module docstring)"""
    watched_changed: int = 0
    """of those, decisions whose node would differ without the watched score"""
    watched_gpu_changed: int = 0
    """of those, decisions on the same node whose GPUs would differ without the watched signal"""


class CachedScheduler:
    """`schedule(pod, snap)` like the wrapped `Scheduler`, with per-(shape, node) results reused."""

    WATCH = "forecast-headroom"

    def __init__(self, scheduler: Scheduler, *, max_shapes: int = 1024, watch: str | None = WATCH) -> None:
        self.inner = scheduler
        self.max_shapes = max_shapes
        self.gpu_key: str | None = getattr(scheduler.gpu_selector, "key", None)
        self.cacheable = all(
            getattr(ws.plugin, "normalize", None) is None and getattr(ws.plugin, "name", "") != "random"
            for ws in scheduler.scores
        ) and all(isinstance(f, _PER_NODE_FILTERS) or getattr(f, "per_node", False) for f in scheduler.filters)
        self.total_weight = sum(ws.weight for ws in scheduler.scores) or 1
        self._rows_filters = all(callable(getattr(f, "filter_rows", None)) for f in scheduler.filters)
        """every filter checks chosen rows of the whole snapshot itself (`filter_rows`, the built-in ones
        do): no restricted view is built per decision"""
        self._scores = tuple((ws, getattr(ws.plugin, "constant", None)) for ws in scheduler.scores)
        """each weighted score with its `constant(pod, snap)` (a plugin's optional word that every node
        scores alike this time: a signal no GPU has)"""
        watched = [ws.plugin for ws in scheduler.scores if watch is not None and ws.plugin.name == watch]
        self.watched = watched[0] if watched else None
        """the score whose effect on the pick is counted (None: the profile has no such score)"""
        self._watched_signal: str | None = getattr(self.watched, "signal", None)
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._uid = -1

    @property
    def name(self) -> str:
        return self.inner.name

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
                           np.full(n, -1, np.int64), np.zeros(n) if self.watched is not None else None)
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
        mask = None
        if self._rows_filters:
            for f in self.inner.filters:
                m = f.filter_rows(cycle, pod, snap, stale)
                mask = m if mask is None else (mask & m)
        else:
            view = snap if stale.size == n else rows_view(snap, stale)
            for f in self.inner.filters:
                m = f.filter(cycle, pod, view)
                mask = m if mask is None else (mask & m)
        assert mask is not None
        ok = stale[mask]
        total = np.zeros(ok.size, dtype=np.float64)
        if entry.part is not None:
            entry.part[stale] = 0.0
        if ok.size:
            for ws, constant in self._scores:
                try:
                    same = None if constant is None else constant(pod, snap)
                    # a score that is the same on every node is added as one number: the same float
                    # sums in the same order as adding its array
                    weighted = ws.weight * (ws.plugin.score(cycle, pod, snap, ok) if same is None else same)
                    total += weighted
                except Exception as exc:  # as Scheduler.schedule: the cycle fails, naming the plugin
                    entry.version[stale] = -1
                    return Status(Code.ERROR, f"{type(exc).__name__}: {exc}", ws.plugin.name)
                if ws.plugin is self.watched:
                    entry.part[ok] = weighted
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
        watching = entry.part is not None and self._watched_signal in snap.signals
        same_node = watching and self._count_watched(masked, entry.part, pick)
        cycle = CycleState()
        if self.gpu_key is not None:
            cycle[self.gpu_key] = (np.array([pick]), entry.gpu[pick : pick + 1])
        selector = self.inner.gpu_selector
        gpus = fit_gpus(pod, snap, pick, selector.select(cycle, pod, snap, pick))
        if same_node:
            blind = snap.without_signal(self._watched_signal)
            if fit_gpus(pod, blind, pick, selector.select(cycle, pod, blind, pick)) != gpus:
                self.stats.watched_gpu_changed += 1
        return Decision(pod.name, pick, snap.node_names[pick], gpus, float(best), np.count_nonzero(entry.feasible))

    def _count_watched(self, total: np.ndarray, part: np.ndarray, pick: int) -> bool:
        """Counts whether the node would differ without the watched score (infeasible nodes stay
        -inf); True when it would not."""
        self.stats.watched_scored += 1
        without, _ = best_index(total - part, self.inner.tie_rank)
        if without != pick:
            self.stats.watched_changed += 1
            return False
        return True

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
                s = ws.plugin.score(cycle, pod, snap, nodes)
                normalize = getattr(ws.plugin, "normalize", None)
                if normalize is not None:
                    s = normalize(cycle, pod, s)
                total += ws.weight * s
        return nodes, total

    def normalized(self, score: float) -> float:
        """A weighted sum mapped back onto 0..100 (the contract's score range)."""
        return float(min(100.0, max(0.0, score / self.total_weight)))
