"""Named plugins and policies, and building a scheduler profile from configuration.

A policy is configuration, not code:

    {"name": "FGD", "score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}

    {"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}],
     "score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}

`filter` is optional (absent: ResourcesFit + GpuFit, kube-scheduler's pair); when given it is the
whole list, in order. `build_scheduler` validates a profile (unknown names and bad weights are refused
with the list of what is known) and wires the plugins. Plugins that need the workload's typical pods
or randomness receive them through `PluginContext`, so the same configuration runs in the evaluator
and in the service. `DEFAULT_PROFILE` (GpuAware) is the profile a deployment should run; `OURS`
(WasteGradient) stays the packing policy the benchmarks compare.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.framework import (
    BestFitGpu,
    CycleGpu,
    FilterPlugin,
    GpuFit,
    GpuSelector,
    RandomGpu,
    ResourcesFit,
    Scheduler,
    ScorePlugin,
    WeightedScore,
    WholeGpuOnly,
)
from gpuaware.placement.hetero import ThroughputScore
from gpuaware.placement.policies import (
    BestFitScore,
    DotProdScore,
    FgdScore,
    GpuClusteringScore,
    GpuPackingScore,
    RandomScore,
)
from gpuaware.placement.signals import (
    ForecastHeadroomScore,
    HealthScore,
    SignalAwareGpu,
    ThermalPowerScore,
    TopologyScore,
)
from gpuaware.placement.waste import FgdFloatScore, WasteGradientScore


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What plugin factories may draw on: the workload's typical pods and a seed for randomness."""

    typical: TypicalPods | None = None
    seed: int = 0

    def need_typical(self, plugin: str) -> TypicalPods:
        if self.typical is None:
            raise ValueError(f"plugin {plugin!r} needs typical pods (the workload's request distribution)")
        return self.typical

    def rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, salt])


ScoreFactory = Callable[[PluginContext, Mapping[str, Any]], ScorePlugin]
GpuFactory = Callable[[PluginContext, Mapping[str, Any]], GpuSelector]
FilterFactory = Callable[[PluginContext, Mapping[str, Any]], FilterPlugin]

FILTER_PLUGINS: dict[str, FilterFactory] = {
    "resources-fit": lambda ctx, args: ResourcesFit(),
    "gpu-fit": lambda ctx, args: GpuFit(),
    "whole-gpu-only": lambda ctx, args: WholeGpuOnly(),
}

SCORE_PLUGINS: dict[str, ScoreFactory] = {
    "fgd": lambda ctx, args: FgdScore(ctx.need_typical("fgd")),
    "bestfit": lambda ctx, args: BestFitScore(),
    "dotprod": lambda ctx, args: DotProdScore(),
    "gpupacking": lambda ctx, args: GpuPackingScore(),
    "gpuclustering": lambda ctx, args: GpuClusteringScore(),
    "random": lambda ctx, args: RandomScore(rng=ctx.rng(1)),
    "waste-gradient": lambda ctx, args: WasteGradientScore(ctx.need_typical("waste-gradient"), **args),
    "fgd-float": lambda ctx, args: FgdFloatScore(ctx.need_typical("fgd-float")),
    "throughput": lambda ctx, args: ThroughputScore(args.get("matrix", {})),
    "health": lambda ctx, args: HealthScore(),
    "forecast-headroom": lambda ctx, args: ForecastHeadroomScore(),
    "topology": lambda ctx, args: TopologyScore(),
    "thermal-power": lambda ctx, args: ThermalPowerScore(),
}


def _signal_aware(ctx: PluginContext, args: Mapping[str, Any]) -> SignalAwareGpu:
    inner = args.get("inner", "best")
    if inner not in GPU_SELECTORS or inner == "signal-aware":
        known = ", ".join(sorted(k for k in GPU_SELECTORS if k != "signal-aware"))
        raise ValueError(f"signal-aware: unknown inner GPU selector {inner!r}; known: {known}")
    return SignalAwareGpu(GPU_SELECTORS[inner](ctx, {}), tolerance=float(args.get("tolerance", 25.0)))


GPU_SELECTORS: dict[str, GpuFactory] = {
    "best": lambda ctx, args: BestFitGpu(),
    "random": lambda ctx, args: RandomGpu(rng=ctx.rng(2)),
    "fgd": lambda ctx, args: CycleGpu(FgdScore.gpu_key),
    "waste-gradient": lambda ctx, args: CycleGpu(WasteGradientScore.gpu_key),
    "fgd-float": lambda ctx, args: CycleGpu(FgdFloatScore.gpu_key),
    "signal-aware": _signal_aware,
}

POLICIES: dict[str, dict[str, Any]] = {
    "Random": {"score": [{"name": "random", "weight": 1000}], "gpu": "random"},
    "DotProd": {"score": [{"name": "dotprod", "weight": 1000}], "gpu": "best"},
    "GpuClustering": {"score": [{"name": "gpuclustering", "weight": 1000}], "gpu": "best"},
    "GpuPacking": {"score": [{"name": "gpupacking", "weight": 1000}], "gpu": "best"},
    "BestFit": {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "best"},
    "FGD": {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"},
}
"""The six published policies, in the paper's order."""

PUBLISHED = tuple(POLICIES)

OURS = "WasteGradient"
"""Our policy: FGD's gradient on expected *waste* = fragmentation + GPU stranded by CPU + unfillable gaps."""


def _waste(strand: float, gap: float, kappa: float = 30.0) -> dict[str, Any]:
    return {"score": [{"name": "waste-gradient", "weight": 1000,
                       "args": {"strand": strand, "gap": gap, "kappa": kappa}}], "gpu": "waste-gradient"}


POLICIES.update({
    OURS: _waste(2.0, 4.0, 30.0),
    # the variants tried on the way, kept so the comparison stays honest (see bench/results/placement.json)
    "WasteGradient-StrandOnly": _waste(2.0, 0.0),
    "WasteGradient-GapOnly": _waste(0.0, 4.0, 30.0),
    "WasteGradient-RandomFill": _waste(2.0, 4.0, 1e6),  # gaps valued with unlimited small pods (no scarcity)
    "FGD-Float": {"score": [{"name": "fgd-float", "weight": 1}], "gpu": "fgd-float"},
})
VARIANTS = tuple(p for p in POLICIES if p not in PUBLISHED and p != OURS)

DEFAULT_PROFILE = "GpuAware"
"""The default profile: OURS (WasteGradient, unchanged) plus the signal scores as tie-breakers.

Weights. WasteGradient scores int(100 sigmoid(waste saved / 1000)) at weight 1000, so one point of it
(about 40 milli-GPU of expected waste near the middle of the scale) is worth 1000. A signal score s at
weight w moves a node by w * (difference in s); it outvotes k packing points only when that exceeds
1000 k. The weights are chosen so that a signal breaks every packing tie, outvotes one packing point
(up to three for a GPU at 0) only when the GPU is clearly bad, and never one for small differences:

  signal             w    outvotes 1 packing point when       e.g.
  health            32    health differs by >= 32 points      DEGRADED (<= 40) vs healthy 100: 1920
  thermal-power     18    thermal/power differs by >= 56      90 degC vs cool: 1800; 75 degC (60): 720
  forecast-headroom 12    overshoot differs by >= 0.84 GPU    a tie-breaker but for a GPU forecast full
  topology          11    NVLink island (100) vs neither (0)  one NUMA node (60) vs neither: 660

No single signal's weighted difference (at most 100 points) is a multiple of 1000, so a signal never
exactly ties a number of packing points (ties would fall to the node rank, not to the signal).
Unknown signals score 100 on every node (a constant), so without telemetry and topology the decisions
are exactly WasteGradient's. The GPU choice is WasteGradient's too unless the picked GPU is more than
25 quality points worse than the best fitting GPU of the node (signal-aware, tolerance 25).

  {"score": [{"name": "waste-gradient", "weight": 1000, "args": {"strand": 2.0, "gap": 4.0, "kappa": 30.0}},
             {"name": "health", "weight": 32}, {"name": "thermal-power", "weight": 18},
             {"name": "forecast-headroom", "weight": 12}, {"name": "topology", "weight": 11}],
   "gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient", "tolerance": 25}}
"""

SIGNAL_WEIGHTS: dict[str, int] = {"health": 32, "thermal-power": 18, "forecast-headroom": 12, "topology": 11}

POLICIES[DEFAULT_PROFILE] = {
    "score": [*copy.deepcopy(POLICIES[OURS]["score"]),
              *({"name": k, "weight": w} for k, w in SIGNAL_WEIGHTS.items())],
    "gpu": "signal-aware",
    "gpu_args": {"inner": POLICIES[OURS]["gpu"], "tolerance": 25},
}


def register_score(name: str, factory: ScoreFactory) -> None:
    SCORE_PLUGINS[name] = factory


def register_gpu_selector(name: str, factory: GpuFactory) -> None:
    GPU_SELECTORS[name] = factory


def register_filter(name: str, factory: FilterFactory) -> None:
    FILTER_PLUGINS[name] = factory


def register_policy(name: str, config: Mapping[str, Any]) -> None:
    POLICIES[name] = dict(config)


def canonical_policy(name: str) -> str:
    """The registered spelling of a policy name (case-insensitive); ValueError listing known ones."""
    for known in POLICIES:
        if known.lower() == name.strip().lower():
            return known
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")


def build_scheduler(
    config: Mapping[str, Any],
    *,
    typical: TypicalPods | None = None,
    seed: int = 0,
    tie_rank: np.ndarray | None = None,
    name: str | None = None,
) -> Scheduler:
    """A Scheduler from a profile mapping:
    {"filter": [{"name"}...], "score": [{"name", "weight", "args"}...], "gpu": name, "gpu_args": {...}}."""
    ctx = PluginContext(typical=typical, seed=int(config.get("seed", seed)))
    filters = _filters(config.get("filter"), ctx)
    entries = config.get("score")
    if not entries:
        raise ValueError("a profile needs at least one score plugin under 'score'")
    scores = []
    for entry in entries:
        plugin = entry.get("name")
        if plugin not in SCORE_PLUGINS:
            raise ValueError(f"unknown score plugin {plugin!r}; known: {', '.join(sorted(SCORE_PLUGINS))}")
        weight = entry.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight <= 0:
            raise ValueError(f"score plugin {plugin!r}: weight must be a positive integer, got {weight!r}")
        scores.append(WeightedScore(SCORE_PLUGINS[plugin](ctx, entry.get("args", {})), weight))
    gpu = config.get("gpu", "best")
    if gpu not in GPU_SELECTORS:
        raise ValueError(f"unknown GPU selector {gpu!r}; known: {', '.join(sorted(GPU_SELECTORS))}")
    selector = GPU_SELECTORS[gpu](ctx, config.get("gpu_args", {}))
    extra: dict[str, Any] = {} if filters is None else {"filters": filters}
    return Scheduler(name or str(config.get("name", "custom")), scores, selector, tie_rank=tie_rank, **extra)


def _filters(entries: Any, ctx: PluginContext) -> list[FilterPlugin] | None:
    """The profile's `filter` list as plugins; None when absent (the Scheduler's defaults)."""
    if entries is None:
        return None
    if not isinstance(entries, list | tuple) or not entries:
        raise ValueError("a profile's 'filter', when given, must be a non-empty list of {\"name\": ...}")
    out = []
    for entry in entries:
        plugin = entry.get("name") if isinstance(entry, Mapping) else None
        if plugin not in FILTER_PLUGINS:
            raise ValueError(f"unknown filter plugin {plugin!r}; known: {', '.join(sorted(FILTER_PLUGINS))}")
        out.append(FILTER_PLUGINS[plugin](ctx, entry.get("args", {})))
    return out


def policy(
    name: str, *, typical: TypicalPods | None = None, seed: int = 0, tie_rank: np.ndarray | None = None
) -> Scheduler:
    """A registered policy by name (case-insensitive)."""
    canonical = canonical_policy(name)
    return build_scheduler(POLICIES[canonical], typical=typical, seed=seed, tie_rank=tie_rank, name=canonical)
