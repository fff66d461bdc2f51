"""The cluster as numpy arrays, and the allocation ledger that changes it.

Why arrays: every policy scores every node for every pod (1,213 nodes in openb, 10,000 in the
synthetic scale test), so the state is laid out for vectorised scoring: one row per node, one column
per GPU slot (padded with absent slots for nodes with fewer GPUs). A `Snapshot` exposes read-only
views of those arrays for one scheduling cycle; `reserve` / `unreserve` are the only writers of the
allocation state, both idempotent (reserving the same placement twice, or unreserving an unknown pod,
is a no-op), and each bumps the changed node's `version` so scorers can cache per-node results safely.

Per-GPU signals (telemetry health score, temperature, power draw against the limit, forecast
utilisation) ride along for the signal scores (signals.py). They are stored *quantised* (health to 5
points, temperature to 2 degC, power and forecast to 0.05) and a node's version moves only when a
quantised value changes: telemetry is noisy, and every version bump throws away that node's cached
scores (the FGD-family caches, CachedScheduler), so a GPU drifting from 61.3 to 61.9 degC must not
cost a recompute. Unknown is NaN (health: 100), and an unknown signal scores neutral. The cluster
counts, per kind of signal, the GPUs that have one (`Snapshot.signals`): a kind no GPU has scores
every node alike, and its score is not computed at all (a cluster without telemetry, the loop bench).

GPU memory is part of the model too: a sharing pod holds the memory it asks for (or, asking none, its
compute share of the GPU's memory, rounded down, so proportional pods can never run out of memory
where their compute fits), and `gpu_mem_free` lets `GpuFit` and preemption plans see what pods that
hold more memory than their compute share leave. GPUs of undisclosed memory (openb's G1..G3) are not
accounted: `gpu_mem_free` reads `UNACCOUNTED` there.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuaware.placement import fit_kernels
from gpuaware.placement.model import GPU_CATALOG, MILLI, GpuModel, NodeSpec, PodRequest, RequestError
from gpuaware.schemas import find_gpu_model

UNACCOUNTED = 1 << 40
"""free GPU memory (MiB) reported for GPUs whose memory is unknown: always enough"""

HEALTHY, DEGRADED, QUARANTINED = 0, 1, 2
"""GPU health states: quarantined GPUs take no new pods; degraded ones do (health scoring may avoid them)."""

SIGNALS = frozenset({"health", "thermal", "forecast"})
"""The kinds of per-GPU signal: health (telemetry score below 100, or DEGRADED), thermal (a temperature
or power reading), forecast (a utilisation forecast)."""

_uids = itertools.count(1)


class ReserveError(RuntimeError):
    """The staged placement no longer fits (the cluster changed since the snapshot). Transient:
    discard the decision and schedule the pod again against a fresh snapshot."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a reserved pod holds on its node."""

    pod: str
    node: int
    gpus: tuple[int, ...]
    gpu_milli: int  # per GPU
    cpu_milli: int
    memory_mib: int
    tag: int  # PodRequest.affinity_tag
    gpu_mem: int = 0  # GPU memory held on each of its GPUs, MiB (0 on unaccounted GPUs)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster as scheduling reads it: read-only views of its live arrays (so what it shows moves
    with every reserve/unreserve; the cluster's `generation` counts those), its node names, models
    and the signal kinds present when it was made.
    """

    cluster_uid: int
    node_names: Sequence[str]
    models: Sequence[GpuModel]  # distinct GPU models; model_idx indexes it (-1 = CPU-only node)
    model_idx: np.ndarray  # [N] int
    cpu_capacity: np.ndarray  # [N] int64
    mem_capacity: np.ndarray  # [N] int64
    cpu_free: np.ndarray  # [N] int64
    mem_free: np.ndarray  # [N] int64
    gpu_count: np.ndarray  # [N] int64
    gpu_present: np.ndarray  # [N, G] bool
    gpu_free: np.ndarray  # [N, G] int64 milli free on usable GPUs (0 on absent or quarantined slots)
    gpu_health: np.ndarray  # [N, G] int8
    tag_counts: np.ndarray  # [N, G+1] int32: pods per GpuClustering tag (0 share, k = k-gpu)
    nvlink_island: np.ndarray  # [N, G] int16 (-1 none)
    numa_node: np.ndarray  # [N, G] int16 (-1 unknown)
    version: np.ndarray  # [N] int64, bumped whenever a node changes
    gpu_health_score: np.ndarray  # [N, G] int16 telemetry health 0..100 (100 when unknown), 5-point steps
    gpu_temp_c: np.ndarray  # [N, G] float32 degC, 2-degree steps (NaN = unknown)
    gpu_power_frac: np.ndarray  # [N, G] float32 power draw / power limit, 0.05 steps (NaN = unknown)
    gpu_util_forecast: np.ndarray  # [N, G] float32 forecast p90 utilisation 0..1, 0.05 steps (NaN = unknown)
    gpu_mem_total: np.ndarray  # [N, G] int64 GPU memory per slot, MiB (0 = undisclosed, not accounted)
    gpu_mem_free: np.ndarray  # [N, G] int64 free GPU memory, MiB (UNACCOUNTED where total is 0)
    signals: frozenset[str] = SIGNALS
    """the signal kinds some GPU has a non-neutral value of (a kind not named is neutral on every GPU, so
    its score is the same for every node); the default, every kind, is always safe"""

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    def without_signal(self, kind: str) -> Snapshot:
        """This view as it would be if no GPU had a signal of `kind` (its arrays neutral, read-only):
        what a decision would have been without it (the score cache's counts of what a signal changed)."""
        neutral = {name: _neutral_array(getattr(self, name).shape, getattr(self, name).dtype.str, value)
                   for name, value in _NEUTRAL[kind]}
        changes: dict[str, Any] = {"signals": self.signals - {kind}, **neutral}
        return dataclasses.replace(self, **changes)


@functools.lru_cache(maxsize=16)
def _neutral_array(shape: tuple[int, ...], dtype: str, value: float) -> np.ndarray:
    """A read-only array of `value`, shared by every snapshot of that shape (one per decision would
    cost an allocation each time the score cache counts what a signal changed)."""
    return _readonly(np.full(shape, value, dtype=dtype))


_NEUTRAL: dict[str, tuple[tuple[str, float], ...]] = {
    "health": (("gpu_health_score", 100),),
    "thermal": (("gpu_temp_c", math.nan), ("gpu_power_frac", math.nan)),
    "forecast": (("gpu_util_forecast", math.nan),),
}
"""each signal kind's arrays and the value that means "no signal" (as `Cluster` initialises them)"""


def gpu_memory_held(pod: PodRequest, total: int) -> int:
    """GPU memory `pod` holds on a GPU of `total` MiB: what it asks, else its compute share, rounded
    down (so proportional pods never run out where their compute fits); 0 where `total` is 0 (memory
    not accounted). The one rule (fit_kernels.memory_held): reservations, filters and preemption plans
    all use it."""
    return int(fit_kernels.memory_held(int(total), pod.gpu_memory_mib, pod.gpu_milli))


def _catalogued(name: str) -> GpuModel:
    """The one catalog's record for a node's model name (an alias or NVML name too), under the node's
    own spelling; an unknown model is a bare record (no capabilities, memory undisclosed)."""
    found = find_gpu_model(name)
    return GpuModel(name) if found is None else dataclasses.replace(found, name=name)


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _step(value: float, step: float) -> float:
    """`value` rounded to the nearest multiple of `step` (halves up, unlike round()'s halves to even)."""
    return math.floor(value / step + 0.5) * step


class Cluster:
    """Mutable cluster state plus the allocation ledger (pod name -> Allocation)."""

    def __init__(self, nodes: Sequence[NodeSpec], catalog: dict[str, GpuModel] | None = None) -> None:
        if not nodes:
            raise RequestError("a cluster needs at least one node")
        catalog = GPU_CATALOG if catalog is None else catalog
        self.uid = next(_uids)
        self.generation = 0
        self.specs: tuple[NodeSpec, ...] = tuple(nodes)
        self.node_names: tuple[str, ...] = tuple(n.name for n in nodes)
        self.index: dict[str, int] = {}
        for i, name in enumerate(self.node_names):
            if name in self.index:
                raise RequestError(f"duplicate node name {name!r}")
            self.index[name] = i
        model_names = sorted({n.gpu_model for n in nodes if n.num_gpu > 0})
        self.models: tuple[GpuModel, ...] = tuple(catalog.get(m) or _catalogued(m) for m in model_names)
        self.model_of: dict[str, int] = {m: i for i, m in enumerate(model_names)}
        n = len(nodes)
        g = max(1, max(s.num_gpu for s in nodes))
        self.max_gpus = g
        self.model_idx = np.array([self.model_of[s.gpu_model] if s.num_gpu > 0 else -1 for s in nodes], dtype=np.int64)
        self.cpu_capacity = np.array([s.cpu_milli for s in nodes], dtype=np.int64)
        self.mem_capacity = np.array([s.memory_mib for s in nodes], dtype=np.int64)
        self.gpu_count = np.array([s.num_gpu for s in nodes], dtype=np.int64)
        self.gpu_present = np.arange(g)[None, :] < self.gpu_count[:, None]
        self.cpu_free = self.cpu_capacity.copy()
        self.mem_free = self.mem_capacity.copy()
        self.gpu_used = np.zeros((n, g), dtype=np.int64)
        self.gpu_health = np.zeros((n, g), dtype=np.int8)
        self.gpu_free = np.where(self.gpu_present, MILLI, 0).astype(np.int64)
        self.tag_counts = np.zeros((n, g + 1), dtype=np.int32)
        self.nvlink_island = np.full((n, g), -1, dtype=np.int16)
        self.numa_node = np.full((n, g), -1, dtype=np.int16)
        for i, s in enumerate(nodes):
            if s.nvlink_islands:
                self.nvlink_island[i, : s.num_gpu] = s.nvlink_islands
            if s.numa_nodes:
                self.numa_node[i, : s.num_gpu] = s.numa_nodes
        self.version = np.zeros(n, dtype=np.int64)
        self.gpu_health_score = np.full((n, g), 100, dtype=np.int16)
        self.gpu_temp_c = np.full((n, g), np.nan, dtype=np.float32)
        self.gpu_power_frac = np.full((n, g), np.nan, dtype=np.float32)
        self.gpu_util_forecast = np.full((n, g), np.nan, dtype=np.float32)
        self.gpu_mem_total = np.zeros((n, g), dtype=np.int64)
        for i, s in enumerate(nodes):
            model = self.models[self.model_of[s.gpu_model]] if s.num_gpu > 0 else None
            if model is not None and model.memory_mib:
                self.gpu_mem_total[i, : s.num_gpu] = model.memory_mib
        self.gpu_mem_free = np.where(self.gpu_mem_total > 0, self.gpu_mem_total, UNACCOUNTED).astype(np.int64)
        self.allocations: dict[str, Allocation] = {}
        self.total_gpu_milli = int(self.gpu_count.sum()) * MILLI
        self.used_gpu_milli = 0
        self._snap: Snapshot | None = None
        """the snapshot `snapshot()` hands out, made again when the signal kinds change"""
        self._signalled = dict.fromkeys(sorted(SIGNALS), 0)
        """per signal kind, how many GPUs have a non-neutral value (kept by the two signal writers)"""

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    def node_mask(self, names: Iterable[str]) -> np.ndarray | None:
        """A bool mask over the nodes, True for those of `names` the cluster has; None when none."""
        rows = [i for n in names if (i := self.index.get(n)) is not None]
        if not rows:
            return None
        mask = np.zeros(self.num_nodes, bool)
        mask[rows] = True
        return mask

    def snapshot(self) -> Snapshot:
        """A read-only view of the current state: views of the live arrays, so one object serves until
        the set of signal kinds changes (a new one is made then; every decision asks for one)."""
        snap = self._snap
        if snap is None:
            names = (
                "model_idx", "cpu_capacity", "mem_capacity", "cpu_free", "mem_free", "gpu_count", "gpu_present",
                "gpu_free", "gpu_health", "tag_counts", "nvlink_island", "numa_node", "version",
                "gpu_health_score", "gpu_temp_c", "gpu_power_frac", "gpu_util_forecast", "gpu_mem_total",
                "gpu_mem_free",
            )
            views = {k: _readonly(getattr(self, k)) for k in names}
            signals = frozenset(k for k, count in self._signalled.items() if count)
            snap = self._snap = Snapshot(self.uid, self.node_names, self.models, **views, signals=signals)
        return snap

    def _signal_kinds(self, node: int, gpu: int) -> tuple[bool, bool, bool]:
        """Whether GPU (node, gpu) has a non-neutral health, thermal and forecast signal."""
        return (bool(self.gpu_health_score[node, gpu] < 100 or self.gpu_health[node, gpu] == DEGRADED),
                not (math.isnan(self.gpu_temp_c[node, gpu]) and math.isnan(self.gpu_power_frac[node, gpu])),
                not math.isnan(self.gpu_util_forecast[node, gpu]))

    def _count_signals(self, node: int, gpu: int, before: tuple[bool, bool, bool]) -> None:
        for kind, was, now in zip(("health", "thermal", "forecast"), before, self._signal_kinds(node, gpu),
                                  strict=True):
            if now != was:
                count = self._signalled[kind] = self._signalled[kind] + int(now) - int(was)
                if count == int(now):  # 0 -> 1 or 1 -> 0: the set of signal kinds changed
                    self._snap = None

    # -- the ledger -------------------------------------------------------------------------------

    def _touch(self, node: int) -> None:
        self.version[node] += 1
        self.generation += 1

    def gpu_memory_of(self, pod: PodRequest, node: int) -> int:
        """GPU memory `pod` holds on each of its GPUs on `node`, MiB: what it asks, else its compute share
        of the GPU's memory (rounded down); 0 where the GPU's memory is not accounted."""
        return 0 if pod.num_gpu == 0 else gpu_memory_held(pod, int(self.gpu_mem_total[node, 0]))

    def reserve(self, pod: PodRequest, node: int, gpus: Iterable[int] = (), gpu_mem: int | None = None,
                *, check_memory: bool = True) -> Allocation:
        """Take `pod`'s resources on `node` (GPU slots `gpus`). Idempotent for the same placement.

        `gpu_mem` is the GPU memory held per GPU (None: `gpu_memory_of`). `check_memory=False` takes it
        even where it exceeds what is free, and on a quarantined GPU as far as its compute is not used
        (the world reports a pod bound: the truth is not refused; quarantine only stops new pods).
        Raises ReserveError when it does not fit (transient: reschedule on a fresh snapshot) and
        RequestError when the pod already holds a different placement (permanent: unreserve first).
        """
        gpus = tuple(int(x) for x in gpus)
        existing = self.allocations.get(pod.name)
        if existing is not None:
            if existing.node == node and existing.gpus == gpus:
                return existing
            raise RequestError(f"pod {pod.name} is already placed on {self.node_names[existing.node]}")
        if not 0 <= node < self.num_nodes:
            raise RequestError(f"pod {pod.name}: node index {node} out of range")
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise RequestError(f"pod {pod.name}: needs {pod.num_gpu} distinct GPUs, got {list(gpus)}")
        if self.cpu_free[node] < pod.cpu_milli or self.mem_free[node] < pod.memory_mib:
            raise ReserveError(f"pod {pod.name}: CPU/memory no longer fit on {self.node_names[node]}")
        mem = self.gpu_memory_of(pod, node) if gpu_mem is None else max(0, int(gpu_mem))
        for g in gpus:
            if not 0 <= g < self.gpu_count[node]:
                raise ReserveError(f"pod {pod.name}: GPU {g} on {self.node_names[node]} has too little free")
            free = self.gpu_free[node, g]
            if not check_memory and self.gpu_health[node, g] == QUARANTINED:
                free = MILLI - self.gpu_used[node, g]
            if free < pod.gpu_milli:
                raise ReserveError(f"pod {pod.name}: GPU {g} on {self.node_names[node]} has too little free")
            if check_memory and self.gpu_mem_free[node, g] < mem:
                raise ReserveError(f"pod {pod.name}: GPU {g} on {self.node_names[node]} has too little free "
                                   f"memory ({int(self.gpu_mem_free[node, g])} MiB < {mem} MiB)")
        alloc = Allocation(pod.name, node, gpus, pod.gpu_milli, pod.cpu_milli, pod.memory_mib, pod.affinity_tag,
                           mem if self.gpu_mem_total[node, 0] > 0 else 0)
        self._apply(alloc, +1)
        return alloc

    def restore(self, alloc: Allocation) -> Allocation:
        """Put back an allocation `unreserve` returned (a discarded statement), exactly as it was."""
        existing = self.allocations.get(alloc.pod)
        if existing is not None:
            if existing == alloc:
                return existing
            raise RequestError(f"pod {alloc.pod} is already placed on {self.node_names[existing.node]}")
        self._apply(alloc, +1)
        return alloc

    def unreserve(self, pod_name: str) -> Allocation | None:
        """Give back what `pod_name` holds; a no-op (returns None) when it holds nothing."""
        alloc = self.allocations.get(pod_name)
        if alloc is None:
            return None
        self._apply(alloc, -1)
        return alloc

    def _apply(self, alloc: Allocation, sign: int) -> None:
        node = alloc.node
        self.cpu_free[node] -= sign * alloc.cpu_milli
        self.mem_free[node] -= sign * alloc.memory_mib
        for g in alloc.gpus:
            self.gpu_used[node, g] += sign * alloc.gpu_milli
            if self.gpu_health[node, g] != QUARANTINED:
                self.gpu_free[node, g] -= sign * alloc.gpu_milli
            if alloc.gpu_mem:
                self.gpu_mem_free[node, g] -= sign * alloc.gpu_mem
        if alloc.tag >= 0:
            self.tag_counts[node, min(alloc.tag, self.max_gpus)] += sign
        self.used_gpu_milli += sign * alloc.gpu_milli * len(alloc.gpus)
        if sign > 0:
            self.allocations[alloc.pod] = alloc
        else:
            del self.allocations[alloc.pod]
        self._touch(node)

    def set_gpu_health(self, node: int, gpu: int, state: int) -> None:
        """Mark one GPU healthy, degraded or quarantined (quarantined GPUs take no new pods)."""
        if state not in (HEALTHY, DEGRADED, QUARANTINED):
            raise RequestError(f"unknown GPU health state {state}")
        if not 0 <= gpu < self.gpu_count[node]:
            raise RequestError(f"node {self.node_names[node]} has no GPU {gpu}")
        before = self._signal_kinds(node, gpu)
        self.gpu_health[node, gpu] = state
        self.gpu_free[node, gpu] = 0 if state == QUARANTINED else MILLI - self.gpu_used[node, gpu]
        self._count_signals(node, gpu, before)
        self._touch(node)

    def set_gpu_signals(
        self,
        node: int,
        gpu: int,
        *,
        health_score: float | None = None,
        temp_c: float | None = None,
        power_frac: float | None = None,
        util_forecast: float | None = None,
    ) -> bool:
        """Store one GPU's telemetry signals, quantised; True when a stored value changed.

        None leaves a signal as it is; NaN makes it unknown again (health: back to 100). Health is
        clipped to 0..100 and kept in 5-point steps, temperature in 2 degC steps, power (draw / limit,
        clipped at >= 0) and the forecast p90 utilisation (clipped to 0..1) in 0.05 steps. Only a
        change of a quantised value bumps the node's version (and the generation), so per-node score
        caches survive telemetry noise.
        """
        if not 0 <= node < self.num_nodes:
            raise RequestError(f"node index {node} out of range")
        if not 0 <= gpu < self.gpu_count[node]:
            raise RequestError(f"node {self.node_names[node]} has no GPU {gpu}")
        changed = False
        before = self._signal_kinds(node, gpu)
        if health_score is not None:
            h = 100 if math.isnan(health_score) else _step(min(100.0, max(0.0, float(health_score))), 5.0)
            if self.gpu_health_score[node, gpu] != h:
                self.gpu_health_score[node, gpu] = int(h)
                changed = True
        for arr, value, step, top in (
            (self.gpu_temp_c, temp_c, 2.0, math.inf),
            (self.gpu_power_frac, power_frac, 0.05, math.inf),
            (self.gpu_util_forecast, util_forecast, 0.05, 1.0),
        ):
            if value is None:
                continue
            q = np.float32(math.nan if math.isnan(value) else _step(min(top, max(0.0, float(value))), step))
            old = arr[node, gpu]
            if not (old == q or (np.isnan(old) and np.isnan(q))):
                arr[node, gpu] = q
                changed = True
        if changed:
            self._count_signals(node, gpu, before)
            self._touch(node)
        return changed

    def check(self) -> None:
        """Re-derive the state from the ledger and compare (tests and debugging)."""
        cpu = self.cpu_capacity.copy()
        mem = self.mem_capacity.copy()
        used = np.zeros_like(self.gpu_used)
        gmem = np.where(self.gpu_mem_total > 0, self.gpu_mem_total, UNACCOUNTED)
        for a in self.allocations.values():
            cpu[a.node] -= a.cpu_milli
            mem[a.node] -= a.memory_mib
            for g in a.gpus:
                used[a.node, g] += a.gpu_milli
                gmem[a.node, g] -= a.gpu_mem
        assert (cpu == self.cpu_free).all() and (cpu >= 0).all(), "CPU ledger mismatch or over-commit"
        assert (mem == self.mem_free).all() and (mem >= 0).all(), "memory ledger mismatch or over-commit"
        assert (used == self.gpu_used).all() and (used <= MILLI).all(), "GPU ledger mismatch or over-commit"
        assert int(used.sum()) == self.used_gpu_milli
        assert (gmem == self.gpu_mem_free).all(), "GPU memory ledger mismatch"
