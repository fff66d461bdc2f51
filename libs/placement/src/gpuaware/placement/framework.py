"""The scheduling framework: filter -> score -> normalise -> select node and GPUs -> reserve.

Shaped after kube-scheduler's framework (one small Protocol per extension point, scores 0..100 with a
normalise step, a per-cycle scratchpad, a closed Status code set) with one deliberate change: plugins
work on *all nodes at once*. A filter returns a boolean mask over the snapshot's nodes and a scorer
returns an int64 score array for the feasible nodes, because per-node Python calls cannot score 10,000
nodes inside the latency budget. The arithmetic per node is still the plugin's own, and each plugin's
docstring shows the configuration that enables it.

A scheduler never mutates the cluster: `Scheduler.schedule` returns a `Decision`; the scheduling
session (session.py) stages it in a statement and commits or discards it, the one place that does.
The other extension points (Permit, PostFilter) are in extensions.py,
QueueSort in queue_order.py.

Filters are part of a profile too (registry.py): the default pair is ResourcesFit + GpuFit, and
WholeGpuOnly adds stock Kubernetes' integer `nvidia.com/gpu` arithmetic for the KubeDefault baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from gpuaware.placement import fit_kernels
from gpuaware.placement.choose import best_index
from gpuaware.placement.cluster import DEGRADED, Snapshot
from gpuaware.placement.model import MILLI, PodRequest

MIN_NODE_SCORE = 0
MAX_NODE_SCORE = 100


class Code(IntEnum):
    """What happened to a pod in one cycle, and what happens next."""

    SUCCESS = 0
    """A node and GPUs were chosen: reserve them, then bind."""
    UNSCHEDULABLE = 1
    """No node fits now: keep the pod pending; retry when capacity is freed (a departure)."""
    UNRESOLVABLE = 2
    """No node could ever fit (asks more than any node has, or a GPU type nobody has): reject."""
    ERROR = 3
    """A plugin failed: retry after a back-off; the reason names the plugin."""
    DENIED = 4
    """A Permit plugin refused the chosen placement for now (quota): wait; the reason says for what."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reason: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


@dataclass(frozen=True, slots=True)
class Decision:
    """A staged placement: commit with `Cluster.reserve(pod, node, gpus)`, or drop it."""

    pod: str
    node: int
    node_name: str
    gpus: tuple[int, ...]
    score: float  # weighted sum of the plugins' scores
    feasible: int  # how many nodes passed the filters


class CycleState(dict[str, Any]):
    """Scratchpad for one pod's cycle: plugins leave results here for later phases (e.g. GPU choice)."""


# -- extension points -----------------------------------------------------------------------------
#
# Each protocol states the traits a plugin declares (class attributes): what the score cache
# (cache.py) may reuse depends on them, so it reads them instead of probing plugins for methods.
# The built-in plugins subclass their protocol, which gives them its default methods.

_SNAPSHOT_ARRAYS = ("model_idx", "cpu_capacity", "mem_capacity", "cpu_free", "mem_free", "gpu_count", "gpu_present",
                    "gpu_free", "gpu_health", "tag_counts", "nvlink_island", "numa_node", "version",
                    "gpu_health_score", "gpu_temp_c", "gpu_power_frac", "gpu_util_forecast", "gpu_mem_total",
                    "gpu_mem_free")


def rows_view(snap: Snapshot, rows: np.ndarray) -> Snapshot:
    """The snapshot restricted to `rows` (what a per-node filter needs to judge those nodes only)."""
    names = snap.node_names
    return Snapshot(snap.cluster_uid, [names[i] for i in rows], snap.models,
                    **{k: getattr(snap, k)[rows] for k in _SNAPSHOT_ARRAYS}, signals=snap.signals)


@runtime_checkable
class FilterPlugin(Protocol):
    name: ClassVar[str]
    per_node: ClassVar[bool]
    """True when a node's verdict reads only the pod and that node's row of the snapshot: the score
    cache then re-checks only the nodes whose version moved (`filter_rows`). False: every decision
    of a profile with this filter is computed afresh."""

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        """Boolean mask over all nodes: True where the pod may go."""
        ...

    def filter_rows(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        """The verdict for the nodes `rows` only (asked of per-node filters). By default `filter` on
        the snapshot restricted to them; the built-in filters compute it directly, and `filter`
        through it."""
        return self.filter(cycle, pod, rows_view(snap, rows))


@runtime_checkable
class ScorePlugin(Protocol):
    name: ClassVar[str]
    per_node: ClassVar[bool]
    """True when a node's score reads only the pod and that node's row of the snapshot (and which
    signal kinds exist): the score cache reuses it until the node's version moves. False (a random
    score, a `normalize` across nodes): every decision of a profile with this score is computed afresh."""
    signal: ClassVar[str | None] = None
    """the kind of GPU signal (`Snapshot.signals`) the score reads, if any"""

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        """int64 scores for `nodes` (indices of feasible nodes), nominally 0..100."""
        ...

    def normalize(self, cycle: CycleState, pod: PodRequest, scores: np.ndarray) -> np.ndarray:
        """Map raw scores onto 0..100 (called after `score`, before weighting). By default they are
        already on it."""
        return scores

    def constant(self, pod: PodRequest, snap: Snapshot) -> int | None:
        """The score of every node this time when it is the same for all of them (e.g. a signal no
        GPU has), so it is added as one number without scoring; None otherwise (the default)."""
        return None


@runtime_checkable
class GpuSelector(Protocol):
    name: ClassVar[str]
    picks_from: str | None = None
    """the cycle-state key under which a score plugin leaves its GPU pick per scored node, when this
    selector uses it (the score cache keeps those picks per node and puts the chosen node's back);
    None: the selector chooses on its own"""

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        """GPU slots for the pod on the chosen node (empty for CPU-only pods)."""
        ...


# -- default filters (kube-scheduler's NodeResourcesFit + the GPU-share filter) --------------------


class ResourcesFit(FilterPlugin):
    """CPU and memory requests fit the node's free capacity (kube-scheduler NodeResourcesFit)."""

    name: ClassVar[str] = "resources-fit"
    per_node: ClassVar[bool] = True

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        return self.filter_rows(cycle, pod, snap, np.arange(snap.num_nodes))

    def filter_rows(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        return fit_kernels.resources_fit(rows, snap.cpu_free, snap.mem_free, pod.cpu_milli, pod.memory_mib)


def _rows(snap: Snapshot, rows: np.ndarray | Sequence[int] | slice) -> np.ndarray:
    if isinstance(rows, slice):
        return np.arange(snap.num_nodes)[rows]
    return np.asarray(rows, dtype=np.int64)


def usable_gpus(pod: PodRequest, snap: Snapshot, rows: np.ndarray | Sequence[int] | slice = slice(None)) -> np.ndarray:
    """[len(rows), G] bool: GPUs of `rows` that can take (their share of) the pod: compute, memory and
    health (fit_kernels.py states the rule). Quarantined GPUs have no free compute; DEGRADED ones take
    only pods that tolerate failure."""
    need = MILLI if not pod.is_gpu_share else pod.gpu_milli
    return fit_kernels.usable_rows(_rows(snap, rows), snap.gpu_free, snap.gpu_mem_free, snap.gpu_mem_total,
                                   snap.gpu_health, need, pod.gpu_memory_mib, pod.gpu_milli, pod.tolerates_failure,
                                   DEGRADED)


def fit_gpus(pod: PodRequest, snap: Snapshot, node: int, gpus: tuple[int, ...]) -> tuple[int, ...]:
    """`gpus` when each can take the pod; otherwise the selector's choice is replaced within what fits:
    a sharing pod takes the tightest usable GPU, a whole-GPU pod the first usable ones (a score plugin
    that picks GPUs by compute alone cannot see memory held by pods that ask more than their share)."""
    if not gpus:
        return gpus
    ok = usable_gpus(pod, snap, (node,))[0]
    if all(ok[g] for g in gpus):
        return gpus
    if pod.is_gpu_share:
        row = np.where(ok, snap.gpu_free[node], np.iinfo(np.int64).max)
        return (int(np.argmin(row)),) if ok.any() else gpus
    keep = [g for g in gpus if ok[g]]
    extra = [int(g) for g in np.flatnonzero(ok) if g not in keep]
    picked = tuple(sorted(keep + extra[: pod.num_gpu - len(keep)]))
    return picked if len(picked) == pod.num_gpu else gpus


class GpuFit(FilterPlugin):
    """The GPU request fits: an allowed, capable model with enough free, healthy GPU slots and GPU memory.

    A sharing pod needs one GPU with >= gpu_milli free and its memory free (`usable_gpus`); a
    whole-GPU pod needs num_gpu fully free GPUs. Health: quarantined GPUs never, degraded GPUs only for
    pods that tolerate failure (`PodRequest.tolerates_failure`). The model's memory must cover `gpu_memory_mib` and
    `min_gpu_memory_mib`; capabilities are checked against the GPU model; `topology` asks for all GPUs
    on one NVLink island or NUMA node.
    """

    name: ClassVar[str] = "gpu-fit"
    per_node: ClassVar[bool] = True

    def __init__(self) -> None:
        self._model_cache: dict[tuple[Any, ...], np.ndarray] = {}

    def model_ok(self, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        """[n_models + 1] bool per GPU model (last: CPU-only nodes)."""
        key = (snap.cluster_uid, pod.gpu_types, pod.capabilities, pod.min_gpu_memory_mib, pod.gpu_memory_mib)
        ok = self._model_cache.get(key)
        if ok is None:
            ok = np.zeros(len(snap.models) + 1, dtype=bool)
            for i, m in enumerate(snap.models):
                good = not pod.gpu_types or m.name in pod.gpu_types
                good = good and all(m.has(c) for c in pod.capabilities)
                need_mem = max(pod.min_gpu_memory_mib, pod.gpu_memory_mib)
                if need_mem and m.memory_mib is not None:
                    good = good and m.memory_mib >= need_mem
                elif need_mem:
                    good = False  # undisclosed memory cannot prove it is enough
                ok[i] = good
            self._model_cache[key] = ok
        return ok

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        return self.filter_rows(cycle, pod, snap, np.arange(snap.num_nodes))

    def filter_rows(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        if pod.num_gpu == 0:
            return np.ones(rows.size, dtype=bool)
        grouped = bool(pod.topology) and pod.num_gpu > 1
        groups = snap.numa_node if grouped and pod.topology != "nvlink" else snap.nvlink_island
        need = MILLI if not pod.is_gpu_share else pod.gpu_milli
        return fit_kernels.gpu_fit(rows, self.model_ok(pod, snap), snap.model_idx, snap.gpu_free, snap.gpu_mem_free,
                                   snap.gpu_mem_total, snap.gpu_health, groups, need, pod.gpu_memory_mib,
                                   pod.gpu_milli, pod.tolerates_failure, DEGRADED, pod.num_gpu, pod.is_gpu_share,
                                   grouped)


class WholeGpuOnly(FilterPlugin):
    """Stock Kubernetes' GPU arithmetic: ``nvidia.com/gpu`` is an integer, so a pod asking a fraction
    of a GPU is rounded up to one and needs a fully free GPU; it waits rather than share. Whole-GPU
    and CPU-only pods pass (GpuFit decides for them).

    ``{"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}], ...}``
    """

    name: ClassVar[str] = "whole-gpu-only"
    per_node: ClassVar[bool] = True

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        return self.filter_rows(cycle, pod, snap, np.arange(snap.num_nodes))

    def filter_rows(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        if not pod.is_gpu_share:
            return np.ones(rows.size, dtype=bool)
        return fit_kernels.whole_gpu_free(rows, snap.gpu_free, MILLI)


# -- GPU selection --------------------------------------------------------------------------------


def exclusive_gpus(free_row: np.ndarray, num_gpu: int) -> tuple[int, ...]:
    """The first `num_gpu` fully free GPUs by index (the FGD simulator's AllocateExclusiveGpuId)."""
    idx = np.flatnonzero(free_row >= MILLI)[:num_gpu]
    return tuple(int(i) for i in idx)


def whole_gpus(
    snap: Snapshot, node: int, pod: PodRequest, quality: np.ndarray | None = None, prefer_groups: bool = False
) -> tuple[int, ...]:
    """`pod.num_gpu` fully free GPUs of `node`, ascending.

    A multi-GPU pod with a hard `topology` ("nvlink" / "numa", which GpuFit filtered on) gets all its
    GPUs from one NVLink island / NUMA node; `prefer_groups` asks the same of every multi-GPU pod as a
    preference (an NVLink island first, else a NUMA node, else anywhere). Among groups that can hold
    the pod: the best summed `quality` (per GPU, higher is better), then the fewest free GPUs (best
    fit: roomier islands stay whole for later pods), then the lowest group id. Within the choice,
    GPUs by quality, then by index. Without quality or groups this is `exclusive_gpus`.
    """
    free = np.flatnonzero(snap.gpu_free[node] >= MILLI)
    k = pod.num_gpu
    grouped = k > 1 and (bool(pod.topology) or prefer_groups)
    if quality is None and not grouped:
        return tuple(int(i) for i in free[:k])
    q = np.zeros(snap.gpu_free.shape[1]) if quality is None else np.asarray(quality, dtype=np.float64)

    def ranked(idx: np.ndarray) -> np.ndarray:
        return idx[np.lexsort((idx, -q[idx]))]  # quality descending, then index

    if grouped:
        kinds = {"nvlink": ("nvlink",), "numa": ("numa",)}.get(pod.topology, ("nvlink", "numa"))
        for kind in kinds:
            ids = (snap.nvlink_island if kind == "nvlink" else snap.numa_node)[node][free]
            best: tuple[tuple[float, int, int], np.ndarray] | None = None
            for gid in np.unique(ids[ids >= 0]):
                members = ranked(free[ids == gid])
                if members.size < k:
                    continue
                key = (-float(q[members[:k]].sum()), int(members.size), int(gid))
                if best is None or key < best[0]:
                    best = (key, members[:k])
            if best is not None:
                return tuple(sorted(int(i) for i in best[1]))
    return tuple(sorted(int(i) for i in ranked(free)[:k]))


class BestFitGpu(GpuSelector):
    """Sharing pods go to the tightest-fitting GPU (least free milli that still fits; first index on
    ties); whole-GPU pods take the first fully free GPUs (on one island / NUMA node when the pod's
    `topology` demands it, see `whole_gpus`)."""

    name: ClassVar[str] = "best"

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        row = snap.gpu_free[node]
        if pod.is_gpu_share:
            fits = np.where(row >= pod.gpu_milli, row, np.iinfo(np.int64).max)
            return (int(np.argmin(fits)),)
        return whole_gpus(snap, node, pod)


class RandomGpu(GpuSelector):
    """Sharing pods go to a uniformly random fitting GPU; whole-GPU pods take the first free GPUs."""

    name: ClassVar[str] = "random"

    def __init__(self, seed: int | None = None, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(seed)

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        row = snap.gpu_free[node]
        if pod.is_gpu_share:
            fits = np.flatnonzero(row >= pod.gpu_milli)
            return (int(fits[self.rng.integers(len(fits))]),)
        return whole_gpus(snap, node, pod)


class CycleGpu(GpuSelector):
    """Use the GPU a score plugin already picked for the chosen node (left in the cycle state under
    `key` as an int array over the scored nodes), falling back to best-fit."""

    name: ClassVar[str] = "from-score"

    def __init__(self, key: str) -> None:
        self.picks_from: str | None = key
        self._key = key
        self.fallback = BestFitGpu()

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.is_gpu_share and self._key in cycle:
            nodes, gpus = cycle[self._key]
            pos = np.searchsorted(nodes, node)
            if pos < len(nodes) and nodes[pos] == node:
                return (int(gpus[pos]),)
        return self.fallback.select(cycle, pod, snap, node)


# -- the scheduler --------------------------------------------------------------------------------


@dataclass(slots=True)
class WeightedScore:
    plugin: ScorePlugin
    weight: int = 1


@dataclass(slots=True)
class Scheduler:
    """One profile: filters, weighted scorers, a GPU selector and a tie-break.

    Ties between equally scored nodes go to the node with the lowest `tie_rank` (a seeded random
    permutation, as the FGD simulator's random node-name prefixes do); without ranks, the lowest index.
    """

    name: str
    scores: Sequence[WeightedScore]
    gpu_selector: GpuSelector
    filters: Sequence[FilterPlugin] = field(default_factory=lambda: (ResourcesFit(), GpuFit()))
    tie_rank: np.ndarray | None = None

    def feasible(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        mask = None
        for f in self.filters:
            m = f.filter(cycle, pod, snap)
            mask = m if mask is None else (mask & m)
        assert mask is not None
        return np.flatnonzero(mask)

    def schedule(self, pod: PodRequest, snap: Snapshot, cycle: CycleState | None = None) -> Decision | Status:
        cycle = CycleState() if cycle is None else cycle
        nodes = self.feasible(cycle, pod, snap)
        if nodes.size == 0:
            if self._never_fits(pod, snap):
                return Status(Code.UNRESOLVABLE, f"no node of this cluster can ever hold pod {pod.name}")
            return Status(Code.UNSCHEDULABLE, f"no node fits pod {pod.name} now")
        total = np.zeros(nodes.size, dtype=np.float64)  # exact for int scores; allows float scorers
        for ws in self.scores:
            try:
                s = ws.plugin.normalize(cycle, pod, ws.plugin.score(cycle, pod, snap, nodes))
            except Exception as exc:  # a plugin fault fails the cycle, loudly, with its name
                return Status(Code.ERROR, f"{type(exc).__name__}: {exc}", ws.plugin.name)
            total += ws.weight * s
        i, best = best_index(total, None if self.tie_rank is None else self.tie_rank[nodes])
        pick = int(nodes[i])
        gpus = fit_gpus(pod, snap, pick, self.gpu_selector.select(cycle, pod, snap, pick))
        return Decision(pod.name, pick, snap.node_names[pick], gpus, float(best), int(nodes.size))

    @staticmethod
    def _never_fits(pod: PodRequest, snap: Snapshot) -> bool:
        cap = (snap.cpu_capacity >= pod.cpu_milli) & (snap.mem_capacity >= pod.memory_mib)
        if pod.num_gpu:
            cap &= snap.gpu_count >= pod.num_gpu
            cap &= GpuFit().model_ok(pod, snap)[snap.model_idx]
        return not cap.any()
