"""Signal scores: GPU health, forecast headroom, NVLink/NUMA topology and thermal/power headroom.

Why: packing (WasteGradient) decides *how much* GPU a placement wastes but knows nothing about *which*
GPU is a good home: a degraded or throttling GPU, one whose current tenants are forecast to saturate
it, or a multi-GPU pod split across NVLink islands all cost the pod performance or its run. These four
scores carry that knowledge into a profile as small-weight tie-breakers next to the packing score
(the GpuAware policy, registry.py, explains its weights).

Every score is 0..100, vectorised over the feasible nodes like the framework's others, and looks at
the GPU(s) the pod would take on each node (`pod_gpu_value`):

* a GPU-sharing pod: the best value among the GPUs with enough free milli for it;
* a whole-GPU pod: the mean of the best `num_gpu` values among the fully free GPUs;
* a CPU-only pod: 100 on every node.

An unknown signal scores 100 (neutral), so a score whose signal is unknown or uniform returns the same
value for every node and leaves the arg-max of the profile, and so every decision, to the other
scores: with no telemetry, GpuAware decides exactly as WasteGradient does.

The signals are `Cluster.set_gpu_signals`' quantised values (health 5 points, 2 degC, 0.05), so a node's
version, and its score, only moves when its telemetry really changed. Each score keeps its values per
request shape and node version (like FGD's cache), so a decision recomputes only the nodes changed
since, rather than scoring every node four times over per pod. A kind of signal no GPU has (no
telemetry yet, or none of that kind) costs nothing: its score is 100 on every node the pod fits
without computing (`Snapshot.signals`, the score's declared `signal`).

`SignalAwareGpu` wraps a GPU selector (WasteGradient's pick for sharing pods) and overrides its choice
only when the picked GPU is clearly worse on the signals than the best fitting one on the node.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpuaware.placement.cluster import DEGRADED, Snapshot
from gpuaware.placement.framework import CycleState, GpuSelector, ScorePlugin, whole_gpus
from gpuaware.placement.model import MILLI, PodRequest
from gpuaware.placement.policies import _SpecCache

DEGRADED_HEALTH_CAP = 40
"""A GPU in the DEGRADED state counts as at most this healthy, whatever its telemetry score says."""

HOT_FROM_C, HOT_SPAN_C = 65.0, 25.0
"""Thermal score: 100 up to 65 degC, falling linearly to 0 at 90 degC."""

CAPPED_FROM, CAPPED_SPAN = 0.8, 0.2
"""Power score: 100 up to 80 % of the power limit, falling linearly to 0 at the limit."""

TOPOLOGY_NVLINK, TOPOLOGY_NUMA, TOPOLOGY_NONE = 100, 60, 0
"""Topology score of a multi-GPU pod: all its GPUs on one NVLink island / one NUMA node / neither."""


# -- per-GPU values ([rows, G] floats, 100 = best; absent slots are never read) --------------------


def health_values(snap: Snapshot, rows: np.ndarray) -> np.ndarray:
    """The telemetry health score, DEGRADED GPUs capped at 40."""
    score = snap.gpu_health_score[rows].astype(np.float64)
    out: np.ndarray = np.where(snap.gpu_health[rows] == DEGRADED, np.minimum(score, DEGRADED_HEALTH_CAP), score)
    return out


def thermal_power_values(snap: Snapshot, rows: np.ndarray) -> np.ndarray:
    """min(100 - 100 clip((T - 65) / 25, 0, 1), 100 - 100 clip((P - 0.8) / 0.2, 0, 1)); unknown = 100.

    Computed as clip(4 (90 - T), 0, 100) and clip(500 (1 - P), 0, 100), the same lines in fewer steps
    (this runs on every decision for the nodes that changed)."""
    hot = np.clip((HOT_FROM_C + HOT_SPAN_C - snap.gpu_temp_c[rows]) * (100.0 / HOT_SPAN_C), 0.0, 100.0)
    capped = np.clip((CAPPED_FROM + CAPPED_SPAN - snap.gpu_power_frac[rows]) * (100.0 / CAPPED_SPAN), 0.0, 100.0)
    out: np.ndarray = np.fmin(np.fmin(hot, capped), 100.0)  # fmin skips NaN (unknown): both unknown -> 100
    return out


def forecast_values(snap: Snapshot, rows: np.ndarray, share: float) -> np.ndarray:
    """100 (1 - max(0, f + share - 1)), clipped to 0..100: the forecast p90 utilisation f of the GPU plus
    the pod's share should stay within the GPU; every 1 % it overshoots costs a point. Unknown = 100.
    Computed as clip(100 (2 - share - f), 0, 100)."""
    v = np.clip(((2.0 - share) - snap.gpu_util_forecast[rows]) * 100.0, 0.0, 100.0)
    out: np.ndarray = np.fmin(v, 100.0)  # NaN (unknown) -> 100
    return out


def gpu_quality(snap: Snapshot, rows: np.ndarray, share: float) -> np.ndarray:
    """The worst of health, thermal/power and forecast headroom per GPU (what SignalAwareGpu ranks by)."""
    q = np.minimum(health_values(snap, rows), thermal_power_values(snap, rows))
    out: np.ndarray = np.minimum(q, forecast_values(snap, rows, share))
    return out


def has_signals(snap: Snapshot, node: int) -> bool:
    """Whether any GPU of `node` has a signal that is not neutral (a cheap test before ranking GPUs)."""
    if not snap.signals:
        return False
    return bool((snap.gpu_health_score[node] < 100).any() or (snap.gpu_health[node] == DEGRADED).any()
                or not np.isnan(snap.gpu_temp_c[node]).all() or not np.isnan(snap.gpu_power_frac[node]).all()
                or not np.isnan(snap.gpu_util_forecast[node]).all())


def pod_gpu_value(values: np.ndarray, pod: PodRequest, free: np.ndarray) -> np.ndarray:
    """[rows] int64: the value of the GPU(s) the pod would take per node (see the module docstring);
    0 on a node where the pod does not fit (only reachable with a profile lacking GpuFit)."""
    if pod.is_gpu_share:
        v = np.where(free >= pod.gpu_milli, values, -1.0).max(axis=1)
    else:
        k = pod.num_gpu
        v = np.sort(np.where(free >= MILLI, values, -np.inf), axis=1)[:, ::-1][:, :k].mean(axis=1)
    out: np.ndarray = np.rint(np.maximum(v, 0.0)).astype(np.int64)
    return out


class _CachedScore(ScorePlugin):
    """A per-node score kept per (GPUs, milli) and node version: `compute(pod, snap, rows)` runs for
    the nodes whose version moved since they were last scored for this shape. While no GPU in the
    cluster has the score's `signal` (`Snapshot.signals`), every node scores 100 without computing:
    exactly what `compute` gives a node whose GPUs all read neutral, on every node the pod fits."""

    per_node: ClassVar[bool] = True

    def __init__(self) -> None:
        self.cache = _SpecCache()

    def compute(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def constant(self, pod: PodRequest, snap: Snapshot) -> int | None:
        """100 for a CPU-only pod and while no GPU has the score's signal, else None (computed)."""
        if pod.num_gpu == 0 or (self.signal is not None and self.signal not in snap.signals):
            return 100
        return None

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        same = self.constant(pod, snap)
        if same is not None:
            return np.full(nodes.size, same, dtype=np.int64)
        val, _ = self.cache.values(snap, (pod.num_gpu, pod.gpu_milli), nodes,
                                   lambda rows: (self.compute(pod, snap, rows), None))
        out: np.ndarray = val[nodes].astype(np.int64)
        return out


def _share(pod: PodRequest) -> float:
    return pod.gpu_milli / MILLI


# -- the scores -------------------------------------------------------------------------------------


class HealthScore(_CachedScore):
    """Prefer nodes whose GPUs the pod would use are healthiest.

    Per GPU: the telemetry health score (0..100, 100 when unknown), at most 40 when the GPU is
    DEGRADED. Node: the best fitting GPU for a sharing pod, the mean of the best `num_gpu` fully free
    GPUs for a whole-GPU pod; 100 for CPU-only pods.

    ``{"score": [{"name": "waste-gradient", "weight": 1000}, {"name": "health", "weight": 32}], ...}``
    """

    name: ClassVar[str] = "health"
    signal: ClassVar[str | None] = "health"

    def compute(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        return pod_gpu_value(health_values(snap, rows), pod, snap.gpu_free[rows])


class ForecastHeadroomScore(_CachedScore):
    """Prefer GPUs where the forecast utilisation plus the pod's share stays below one GPU.

    Per GPU: 100 (1 - max(0, f + s - 1)) with f the forecast p90 utilisation of the GPU over the
    horizon and s = gpu_milli / 1000 the pod's share (1 for whole GPUs); unknown forecast = 100.
    E.g. f = 0.6, s = 0.5: overshoot 0.1 -> 90. Node: as HealthScore; 100 for CPU-only pods.

    ``{"score": [{"name": "waste-gradient", "weight": 1000}, {"name": "forecast-headroom", "weight": 12}], ...}``
    """

    name: ClassVar[str] = "forecast-headroom"
    signal: ClassVar[str | None] = "forecast"

    def compute(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        return pod_gpu_value(forecast_values(snap, rows, _share(pod)), pod, snap.gpu_free[rows])


class TopologyScore(_CachedScore):
    """Prefer nodes that can give a multi-GPU pod all its GPUs on one NVLink island (100), else on one
    NUMA node (60), else 0 (GPUs without known topology count as neither). One-GPU and CPU-only pods:
    100. A preference only: the pod's hard `topology` request is GpuFit's filter.

    ``{"score": [{"name": "waste-gradient", "weight": 1000}, {"name": "topology", "weight": 11}], ...}``
    """

    name: ClassVar[str] = "topology"

    def constant(self, pod: PodRequest, snap: Snapshot) -> int | None:
        return 100 if pod.num_gpu < 2 else None  # one GPU or none: nothing to keep together

    def compute(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        k = pod.num_gpu
        full = snap.gpu_free[rows] >= MILLI

        def fits(group: np.ndarray) -> np.ndarray:
            best = np.zeros(rows.size, dtype=np.int64)
            for gid in np.unique(group[group >= 0]):
                best = np.maximum(best, (full & (group == gid)).sum(axis=1))
            return best >= k

        return np.where(fits(snap.nvlink_island[rows]), TOPOLOGY_NVLINK,
                        np.where(fits(snap.numa_node[rows]), TOPOLOGY_NUMA, TOPOLOGY_NONE))


class ThermalPowerScore(_CachedScore):
    """Prefer cooler, less power-capped GPUs.

    Per GPU: min(100 - 100 clip((T - 65) / 25, 0, 1), 100 - 100 clip((P - 0.8) / 0.2, 0, 1)) with T
    the temperature in degC and P the power draw / power limit; each unknown = 100. E.g. 75 degC and
    P = 0.9: min(60, 50) = 50. Node: as HealthScore; 100 for CPU-only pods.

    ``{"score": [{"name": "waste-gradient", "weight": 1000}, {"name": "thermal-power", "weight": 18}], ...}``
    """

    name: ClassVar[str] = "thermal-power"
    signal: ClassVar[str | None] = "thermal"

    def compute(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> np.ndarray:
        return pod_gpu_value(thermal_power_values(snap, rows), pod, snap.gpu_free[rows])


# -- GPU choice -------------------------------------------------------------------------------------


class SignalAwareGpu(GpuSelector):
    """Keep the wrapped selector's GPU unless it is clearly worse on the signals.

    Per GPU, quality = min(health, thermal/power, forecast headroom) as the scores compute them.
    A sharing pod keeps the inner pick (WasteGradient's least-waste GPU) when its quality is within
    `tolerance` points of the best fitting GPU's; otherwise it goes to the tightest-fitting GPU among
    those within `tolerance` of the best. Whole-GPU pods take the fully free GPUs of the best quality
    band (bands `tolerance` wide, so small differences keep index order), multi-GPU pods on one NVLink
    island, else one NUMA node, when the node has one that can hold them (`whole_gpus`). With no
    signals and no topology every choice equals the inner selector's.

    ``{"gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient", "tolerance": 25}}``
    """

    name: ClassVar[str] = "signal-aware"

    def __init__(self, inner: GpuSelector, tolerance: float = 25.0) -> None:
        if tolerance < 0:
            raise ValueError("signal-aware: tolerance must be >= 0")
        self.inner = inner
        self.tolerance = float(tolerance)
        self.picks_from: str | None = inner.picks_from

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        signals = has_signals(snap, node)
        if pod.is_gpu_share:
            pick = self.inner.select(cycle, pod, snap, node)
            if not signals:
                return pick
            q = gpu_quality(snap, np.array([node]), _share(pod))[0]
            row = snap.gpu_free[node]
            fits = row >= pod.gpu_milli
            floor = q[fits].max() - self.tolerance
            if q[pick[0]] >= floor:
                return pick
            ok = fits & (q >= floor)
            return (int(np.argmin(np.where(ok, row, np.iinfo(np.int64).max))),)
        if not signals:
            return whole_gpus(snap, node, pod, prefer_groups=True)
        q = gpu_quality(snap, np.array([node]), _share(pod))[0]
        band = -np.floor((100.0 - q) / self.tolerance) if self.tolerance > 0 else q
        return whole_gpus(snap, node, pod, quality=band, prefer_groups=True)
