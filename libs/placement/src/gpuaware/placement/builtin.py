"""The built-in plugin set and the registry every caller uses.

Every plugin gpuaware ships is one line in the table of its kind, its arguments a Struct of args.py;
the policies are in profiles.py. To add a built-in plugin: write the class (subclassing the protocol
of its extension point, framework.py / extensions.py / queue_order.py), an args Struct if it takes
arguments, and one line here, e.g.

    _SCORES = {..., "my-score": Plugin(lambda ctx, a: MyScore(a.alpha), MyScoreArgs)}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from gpuaware.placement.args import (
    CpuReserveArgs,
    DefaultPreemptionArgs,
    FairShareArgs,
    Profile,
    SignalAwareArgs,
    ThroughputArgs,
    WasteGradientArgs,
)
from gpuaware.placement.cpu_reserve import GpuNodeCpuReserve
from gpuaware.placement.extensions import DefaultPreemption
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
from gpuaware.placement.profiles import BUILTIN_POLICIES
from gpuaware.placement.queue_order import FairShareOrder, PrioritySort, QueueSort
from gpuaware.placement.registry import Kind, Plugin, PluginSet, Registry
from gpuaware.placement.signals import (
    ForecastHeadroomScore,
    HealthScore,
    SignalAwareGpu,
    ThermalPowerScore,
    TopologyScore,
)
from gpuaware.placement.stock import FirstFitScore, WholeGpu
from gpuaware.placement.waste import FgdFloatScore, WasteGradientScore

__all__ = ["BUILTIN", "POLICIES", "REGISTRY", "build_scheduler", "canonical_policy", "policy"]

_FILTERS: dict[str, Plugin[FilterPlugin]] = {
    "resources-fit": Plugin(lambda ctx, a: ResourcesFit()),
    "gpu-fit": Plugin(lambda ctx, a: GpuFit()),
    "whole-gpu-only": Plugin(lambda ctx, a: WholeGpuOnly()),
    "gpu-node-cpu-reserve": Plugin(lambda ctx, a: GpuNodeCpuReserve(a.fraction), CpuReserveArgs),
}

_SCORES: dict[str, Plugin[ScorePlugin]] = {
    "fgd": Plugin(lambda ctx, a: FgdScore(ctx.need_typical("fgd"))),
    "bestfit": Plugin(lambda ctx, a: BestFitScore()),
    "dotprod": Plugin(lambda ctx, a: DotProdScore()),
    "gpupacking": Plugin(lambda ctx, a: GpuPackingScore()),
    "gpuclustering": Plugin(lambda ctx, a: GpuClusteringScore()),
    "random": Plugin(lambda ctx, a: RandomScore(rng=ctx.rng(1))),
    # WasteGradientArgs' fields are WasteGradientScore's keyword arguments (a new one goes in both)
    "waste-gradient": Plugin(
        lambda ctx, a: WasteGradientScore(ctx.need_typical("waste-gradient"), **msgspec.structs.asdict(a)),
        WasteGradientArgs),
    "fgd-float": Plugin(lambda ctx, a: FgdFloatScore(ctx.need_typical("fgd-float"))),
    "throughput": Plugin(lambda ctx, a: ThroughputScore(a.matrix), ThroughputArgs),
    "health": Plugin(lambda ctx, a: HealthScore()),
    "forecast-headroom": Plugin(lambda ctx, a: ForecastHeadroomScore()),
    "topology": Plugin(lambda ctx, a: TopologyScore()),
    "thermal-power": Plugin(lambda ctx, a: ThermalPowerScore()),
    "first-fit": Plugin(lambda ctx, a: FirstFitScore()),  # KubeDefault's (stock.py)
}


def _check_signal_aware(args: SignalAwareArgs, registry: Registry) -> None:
    inner = [n for n in registry.names(Kind.GPU)
             if n != "signal-aware" and not msgspec.structs.fields(registry.plugins[Kind.GPU][n].args)]
    if args.inner not in inner:
        raise ValueError(f"unknown inner GPU selector {args.inner!r}; known: {', '.join(inner)} - at `$.inner`")


_GPUS: dict[str, Plugin[GpuSelector]] = {
    "best": Plugin(lambda ctx, a: BestFitGpu()),
    "random": Plugin(lambda ctx, a: RandomGpu(rng=ctx.rng(2))),
    "fgd": Plugin(lambda ctx, a: CycleGpu(FgdScore.gpu_key)),
    "waste-gradient": Plugin(lambda ctx, a: CycleGpu(WasteGradientScore.gpu_key)),
    "fgd-float": Plugin(lambda ctx, a: CycleGpu(FgdFloatScore.gpu_key)),
    "signal-aware": Plugin(lambda ctx, a: SignalAwareGpu(ctx.gpu_selector(a.inner), tolerance=a.tolerance),
                           SignalAwareArgs, check=_check_signal_aware),
    "whole-gpu": Plugin(lambda ctx, a: WholeGpu()),  # KubeDefault's (stock.py)
}

_POST_FILTERS: dict[str, Plugin[Any]] = {
    "default-preemption": Plugin(lambda ctx, a: DefaultPreemption(
        a.max_victims, a.cooldown_s, a.max_candidates, clock=ctx.clock,
        planned_at=ctx.remembered("default-preemption")), DefaultPreemptionArgs),
}

_QUEUE_SORTS: dict[str, Plugin[QueueSort]] = {
    "priority": Plugin(lambda ctx, a: PrioritySort()),
    # FairShareArgs' fields are FairShareOrder's keyword arguments (a new one goes in both)
    "fair-share": Plugin(lambda ctx, a: FairShareOrder(ctx.need_capacity("fair-share"), **msgspec.structs.asdict(a)),
                         FairShareArgs),
}

BUILTIN = PluginSet(
    source="gpuaware.placement",
    plugins={Kind.FILTER: _FILTERS, Kind.SCORE: _SCORES, Kind.GPU: _GPUS, Kind.POST_FILTER: _POST_FILTERS,
             Kind.QUEUE_SORT: _QUEUE_SORTS},
    policies=BUILTIN_POLICIES,
)
"""Everything gpuaware ships."""

REGISTRY: Registry = Registry.of(BUILTIN)
"""The registry every caller uses unless it builds its own (`REGISTRY.with_entry_points()`)."""

POLICIES: Mapping[str, Mapping[str, Any]] = REGISTRY.policies
"""Every built-in policy's profile, read-only (`REGISTRY.policy_config(name)` gives a mutable copy)."""


def canonical_policy(name: str) -> str:
    """The registered spelling of a policy name (case-insensitive); ProfileError listing known ones."""
    return REGISTRY.canonical_policy(name)


def build_scheduler(
    config: Mapping[str, Any] | Profile,
    *,
    typical: TypicalPods | None = None,
    seed: int = 0,
    tie_rank: np.ndarray | None = None,
    name: str | None = None,
    registry: Registry = REGISTRY,
) -> Scheduler:
    """A Scheduler from a profile mapping:
    {"filter": [{"name"}...], "score": [{"name", "weight", "args"}...], "gpu": name, "gpu_args": {...}}."""
    return registry.build(config, typical=typical, seed=seed, tie_rank=tie_rank, name=name)


def policy(
    name: str, *, typical: TypicalPods | None = None, seed: int = 0, tie_rank: np.ndarray | None = None,
    registry: Registry = REGISTRY,
) -> Scheduler:
    """A registered policy by name (case-insensitive)."""
    canonical = registry.canonical_policy(name)
    return registry.build(registry.policies[canonical], typical=typical, seed=seed, tie_rank=tie_rank,
                          name=canonical)
