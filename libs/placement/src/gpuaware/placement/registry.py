"""The one registry of placement plugins and policies, closed and validated before anything runs.

A policy is configuration, not code:

    {"name": "FGD", "score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}

    {"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}],
     "score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}

`filter` is optional (absent: ResourcesFit + GpuFit, kube-scheduler's pair); when given it is the
whole list, in order. The profile's shape and every plugin's arguments are msgspec Structs
(`gpuaware.placement.args`), so a profile is checked completely before a scheduler exists: an unknown
plugin is refused with the list of known ones, a bad or unknown argument with its path
(``Expected `float`, got `str` - at `$.score[0].args.strand```). The placement service does this when
its settings load (`Registry.validate`), so a bad ``GPUAWARE_PLACEMENT_PROFILE`` stops the process at
start-up instead of failing at the first decision. Plugins that need the workload's typical pods or
randomness receive them through `PluginContext`, so the same configuration runs in the evaluator and in
the service. `DEFAULT_PROFILE` (GpuAware) is the profile a deployment should run; `OURS`
(WasteGradient) stays the packing policy the benchmarks compare.

Why closed. The registry used to be module-level dicts that other modules filled by being imported
(``register_policy``), so `KubeDefault` existed only in processes that happened to import
``gpuaware.placement.stock`` (the demo needed a ``--preload`` launcher), and what a name meant depended
on import order. Now every built-in plugin and policy is listed in the tables below, in this one
module, and `REGISTRY` is built from them by one call (`Registry.of`); it is immutable (frozen
dataclass over read-only mappings), so nothing can change it at runtime. Other packages contribute
through the entry-point group ``gpuaware.placement.plugins``, each entry a `PluginSet`, loaded only when
someone calls `load_plugin_sets` / `Registry.with_entry_points` (never at import); a name defined twice
is refused, not overridden.

To add a built-in plugin: write the class (one Protocol per phase, framework.py), an args Struct in
args.py if it takes arguments, and one line in the table of its kind below, e.g.

    _SCORES = {..., "my-score": Plugin(lambda ctx, a: MyScore(a.alpha), MyScoreArgs)}

Kinds: one per extension point, kube-scheduler's meaning (framework.py, extensions.py): filter,
score, gpu (the GPU selector), pre_filter, permit, reserve, post_filter. `Registry.build` gives the
filter/score/select `Scheduler`; `Registry.build_framework` gives it with the plugins of the other
points, as the scheduling session (session.py) runs them.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from gpuaware.placement.args import (
    CpuReserveArgs,
    DefaultPreemptionArgs,
    FilterEntry,
    NoArgs,
    PluginArgs,
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
from gpuaware.placement.session import Framework
from gpuaware.placement.signals import (
    ForecastHeadroomScore,
    HealthScore,
    SignalAwareGpu,
    ThermalPowerScore,
    TopologyScore,
)
from gpuaware.placement.stock import KUBE_DEFAULT, KUBE_DEFAULT_CONFIG, FirstFitScore, WholeGpu
from gpuaware.placement.waste import FgdFloatScore, WasteGradientScore

__all__ = [
    "DEFAULT_PROFILE",
    "ENTRY_POINT_GROUP",
    "OURS",
    "POLICIES",
    "PUBLISHED",
    "REGISTRY",
    "SIGNAL_WEIGHTS",
    "VARIANTS",
    "Kind",
    "Plugin",
    "PluginContext",
    "PluginSet",
    "ProfileError",
    "Registry",
    "ResolvedProfile",
    "build_scheduler",
    "canonical_policy",
    "load_plugin_sets",
    "policy",
]

T = TypeVar("T")

ENTRY_POINT_GROUP = "gpuaware.placement.plugins"
"""Entry-point group of plugin packages: each entry names a `PluginSet` (or a function returning one)."""


class ProfileError(ValueError):
    """A profile or a registry that cannot be used: an unknown name, a bad or unknown argument, a
    name defined twice. Permanent: the configuration must change (the service refuses to start)."""


class Kind(enum.StrEnum):
    """A plugin kind: one extension point of the scheduling cycle, one table of the registry."""

    FILTER = "filter"
    SCORE = "score"
    GPU = "gpu"
    PRE_FILTER = "pre_filter"
    PERMIT = "permit"
    RESERVE = "reserve"
    POST_FILTER = "post_filter"

    @property
    def noun(self) -> str:
        return {"gpu": "GPU selector"}.get(self.value, f"{self.value.replace('_', '-')} plugin")


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What plugin factories may draw on: the workload's typical pods, a seed for randomness, and the
    registry itself (for plugins that wrap another plugin, as signal-aware wraps a GPU selector)."""

    typical: TypicalPods | None = None
    seed: int = 0
    registry: Registry | None = None
    clock: Callable[[], float] | None = None
    """the caller's clock (cooldowns); None: plugins that need one do without"""
    memory: dict[str, Any] | None = None
    """the caller's state that outlives one build of a profile (profiles are rebuilt when the node set
    changes): a plugin keeps what it must remember under its own name, e.g. preemption cooldowns"""

    def remembered(self, plugin: str) -> dict[str, Any]:
        """This plugin's memory (a fresh dict when the caller keeps none)."""
        return {} if self.memory is None else self.memory.setdefault(plugin, {})

    def need_typical(self, plugin: str) -> TypicalPods:
        if self.typical is None:
            raise ValueError(f"plugin {plugin!r} needs typical pods (the workload's request distribution)")
        return self.typical

    def rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, salt])

    def gpu_selector(self, name: str) -> GpuSelector:
        """Another GPU selector of the registry, with its default arguments."""
        registry = self.registry if self.registry is not None else REGISTRY
        plugin = registry.plugin(Kind.GPU, name)
        return plugin.factory(self, msgspec.convert({}, plugin.args))


@dataclass(frozen=True, slots=True)
class Plugin(Generic[T]):
    """One named plugin: `factory(ctx, args)` builds it from its typed `args` (an instance of the
    `args` Struct). `check(args, registry)`, when given, validates what a Struct cannot see alone
    (a name referring to another plugin) and raises ValueError."""

    factory: Callable[[PluginContext, Any], T]
    args: type[PluginArgs] = NoArgs
    check: Callable[[Any, Registry], None] | None = None


@dataclass(frozen=True, slots=True)
class PluginSet:
    """What one source contributes: plugins per kind and named policies (profiles as mappings).
    The built-ins are one; a plugin package's entry point names another."""

    source: str
    plugins: Mapping[Kind, Mapping[str, Plugin[Any]]] = field(default_factory=dict)
    policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Bound(Generic[T]):
    """A plugin with its validated arguments, ready to build once the context is known."""

    name: str
    plugin: Plugin[T]
    args: PluginArgs

    def build(self, ctx: PluginContext) -> T:
        return self.plugin.factory(ctx, self.args)


@dataclass(frozen=True, slots=True)
class ResolvedProfile:
    """A validated profile: every name found, every argument typed. Building it cannot fail on the
    configuration any more, only on the context (a fragmentation score without typical pods)."""

    profile: Profile
    filters: tuple[Bound[FilterPlugin], ...] | None
    scores: tuple[tuple[Bound[ScorePlugin], int], ...]
    gpu: Bound[GpuSelector]
    others: Mapping[Kind, tuple[Bound[Any], ...] | None] = field(default_factory=dict)
    """pre_filter, permit, reserve, post_filter plugins (None: the profile left post_filter out)"""


def _freeze(value: Any) -> Any:
    """A read-only deep copy: mappings -> MappingProxyType, lists -> tuples."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    """A plain, mutable deep copy (dicts and lists), as JSON would give."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def _at(message: str, path: str) -> str:
    """A msgspec message re-rooted at `path` (it was decoded from a part of the profile)."""
    if " - at `$" in message:
        return message.replace(" - at `$", f" - at `{path}", 1)
    return f"{message} - at `{path}`"


@dataclass(frozen=True, slots=True)
class Registry:
    """Plugins per kind and named policies, read-only. Build with `Registry.of(*plugin_sets)`."""

    plugins: Mapping[Kind, Mapping[str, Plugin[Any]]]
    policies: Mapping[str, Mapping[str, Any]]
    """profiles as deep read-only mappings, in registration order"""
    sources: tuple[str, ...] = ()

    @classmethod
    def of(cls, *sets: PluginSet) -> Registry:
        """Merge plugin sets (a name defined twice is refused) and validate every policy."""
        plugins: dict[Kind, dict[str, Plugin[Any]]] = {kind: {} for kind in Kind}
        origin: dict[tuple[Kind, str], str] = {}
        policies: dict[str, Mapping[str, Any]] = {}
        policy_origin: dict[str, tuple[str, str]] = {}
        for s in sets:
            for kind, table in s.plugins.items():
                kind = Kind(kind)
                for name, plugin in table.items():
                    if name in plugins[kind]:
                        raise ProfileError(f"{kind.noun} {name!r} is defined by both {origin[kind, name]} and "
                                           f"{s.source}")
                    if not isinstance(plugin, Plugin):
                        raise ProfileError(f"{kind.noun} {name!r} of {s.source} is not a Plugin: {plugin!r}")
                    plugins[kind][name] = plugin
                    origin[kind, name] = s.source
            for name, config in s.policies.items():
                key = name.lower()
                if key in policy_origin:
                    other, source = policy_origin[key]
                    raise ProfileError(f"policy {name!r} of {s.source} clashes with {other!r} of {source}")
                policies[name] = _freeze(config)
                policy_origin[key] = (name, s.source)
        registry = cls(
            plugins=types.MappingProxyType({k: types.MappingProxyType(v) for k, v in plugins.items()}),
            policies=types.MappingProxyType(policies),
            sources=tuple(s.source for s in sets),
        )
        for name, config in policies.items():
            try:
                registry.resolve(config)
            except ProfileError as exc:
                raise ProfileError(f"policy {name!r} ({policy_origin[name.lower()][1]}): {exc}") from None
        return registry

    def extend(self, *sets: PluginSet) -> Registry:
        """A new registry with more plugin sets (this one is unchanged)."""
        own = PluginSet("+".join(self.sources) or "registry", self.plugins, self.policies)
        return Registry.of(own, *sets)

    def with_entry_points(self, group: str = ENTRY_POINT_GROUP) -> Registry:
        """This registry plus the plugin sets installed packages declare under `group`."""
        return self.extend(*load_plugin_sets(group))

    # -- lookups ----------------------------------------------------------------------------------

    def names(self, kind: Kind) -> tuple[str, ...]:
        return tuple(sorted(self.plugins[kind]))

    def plugin(self, kind: Kind, name: str) -> Plugin[Any]:
        table = self.plugins[kind]
        if not isinstance(name, str) or name not in table:
            raise ProfileError(f"unknown {kind.noun} {name!r}; known: {', '.join(sorted(table))}")
        return table[name]

    def canonical_policy(self, name: str) -> str:
        """The registered spelling of a policy name (case-insensitive); ProfileError listing known ones."""
        for known in self.policies:
            if known.lower() == name.strip().lower():
                return known
        raise ProfileError(f"unknown policy {name!r}; known: {', '.join(self.policies)}")

    def policy_config(self, name: str) -> dict[str, Any]:
        """A policy's profile as a plain, mutable copy (dicts and lists)."""
        return _thaw(self.policies[self.canonical_policy(name)])

    # -- validation -------------------------------------------------------------------------------

    def validate(self, config: Mapping[str, Any] | Profile) -> Profile:
        """The profile, checked completely (shape, names, arguments); ProfileError naming the field."""
        return self.resolve(config).profile

    def resolve(self, config: Mapping[str, Any] | Profile) -> ResolvedProfile:
        """The profile with every plugin found and every argument typed; ProfileError naming the field."""
        if isinstance(config, Profile):
            profile = config
        else:
            try:
                profile = msgspec.convert(_thaw(config) if isinstance(config, Mapping) else config, Profile)
            except msgspec.ValidationError as exc:
                raise ProfileError(f"bad profile: {exc}") from None
        filters = None if profile.filter is None else tuple(
            self._bind(Kind.FILTER, e.name, e.args, f"$.filter[{i}].name", f"$.filter[{i}].args")
            for i, e in enumerate(profile.filter))
        scores = tuple(
            (self._bind(Kind.SCORE, e.name, e.args, f"$.score[{i}].name", f"$.score[{i}].args"), e.weight)
            for i, e in enumerate(profile.score))
        gpu = self._bind(Kind.GPU, profile.gpu, profile.gpu_args, "$.gpu", "$.gpu_args")
        others: dict[Kind, tuple[Bound[Any], ...] | None] = {}
        for kind in (Kind.PRE_FILTER, Kind.PERMIT, Kind.RESERVE, Kind.POST_FILTER):
            entries = getattr(profile, kind.value)
            others[kind] = None if entries is None else tuple(
                self._bind(kind, e.name, e.args, f"$.{kind.value}[{i}].name", f"$.{kind.value}[{i}].args")
                for i, e in enumerate(entries))
        return ResolvedProfile(profile, filters, scores, gpu, types.MappingProxyType(others))

    def _bind(self, kind: Kind, name: str, raw: Mapping[str, Any], name_at: str, args_at: str) -> Bound[Any]:
        try:
            plugin = self.plugin(kind, name)
        except ProfileError as exc:
            raise ProfileError(_at(str(exc), name_at)) from None
        try:
            args = msgspec.convert(raw, plugin.args)
        except msgspec.ValidationError as exc:
            raise ProfileError(f"{kind.noun} {name!r}: {_at(str(exc), args_at)}") from None
        if plugin.check is not None:
            try:
                plugin.check(args, self)
            except ValueError as exc:
                raise ProfileError(f"{kind.noun} {name!r}: {_at(str(exc), args_at)}") from None
        return Bound(name, plugin, args)

    # -- building ---------------------------------------------------------------------------------

    def build(
        self,
        config: Mapping[str, Any] | Profile,
        *,
        typical: TypicalPods | None = None,
        seed: int = 0,
        tie_rank: np.ndarray | None = None,
        name: str | None = None,
    ) -> Scheduler:
        """A Scheduler from a profile (validated first: see `resolve`)."""
        resolved = self.resolve(config)
        return self._scheduler(resolved, self._context(resolved.profile, typical, seed), tie_rank, name)

    def _context(self, profile: Profile, typical: TypicalPods | None, seed: int,
                 clock: Callable[[], float] | None = None, memory: dict[str, Any] | None = None) -> PluginContext:
        """The profile's own seed wins over the caller's."""
        return PluginContext(typical=typical, seed=int(seed if profile.seed is None else profile.seed), registry=self,
                             clock=clock, memory=memory)

    def _scheduler(self, resolved: ResolvedProfile, ctx: PluginContext, tie_rank: np.ndarray | None,
                   name: str | None) -> Scheduler:
        profile = resolved.profile
        scores = [WeightedScore(bound.build(ctx), weight) for bound, weight in resolved.scores]
        selector = resolved.gpu.build(ctx)
        extra: dict[str, Any] = {}
        if resolved.filters is not None:
            extra["filters"] = [bound.build(ctx) for bound in resolved.filters]
        return Scheduler(name or profile.name or "custom", scores, selector, tie_rank=tie_rank, **extra)

    def build_framework(
        self,
        config: Mapping[str, Any] | Profile,
        *,
        typical: TypicalPods | None = None,
        seed: int = 0,
        tie_rank: np.ndarray | None = None,
        name: str | None = None,
        clock: Callable[[], float] | None = None,
        memory: dict[str, Any] | None = None,
        default_post_filter: Mapping[str, Any] | None = None,
        extra_filters: Sequence[FilterPlugin] = (),
    ) -> Framework:
        """The scheduler and the plugins of every other extension point, for a scheduling session.
        `default_post_filter` (an entry such as ``{"name": "default-preemption", "args": {...}}``) is
        used when the profile names no `post_filter` list of its own. `extra_filters` are built
        plugins added after the profile's filters, whatever the profile (e.g. strict partitions fed
        from the quota tree: a constraint of the cluster, not a choice of the profile)."""
        resolved = self.resolve(config)
        ctx = self._context(resolved.profile, typical, seed, clock, memory)
        scheduler = self._scheduler(resolved, ctx, tie_rank, name)
        if extra_filters:
            scheduler.filters = (*scheduler.filters, *extra_filters)
        post = resolved.others.get(Kind.POST_FILTER)
        if post is None and default_post_filter is not None:
            entry = msgspec.convert(_thaw(default_post_filter), FilterEntry)
            post = (self._bind(Kind.POST_FILTER, entry.name, entry.args, "default_post_filter.name",
                               "default_post_filter.args"),)

        def built(kind: Kind, bounds: tuple[Bound[Any], ...] | None) -> tuple[Any, ...]:
            return tuple(b.build(ctx) for b in bounds or ())

        return Framework.of(scheduler, pre_filters=built(Kind.PRE_FILTER, resolved.others.get(Kind.PRE_FILTER)),
                            permits=built(Kind.PERMIT, resolved.others.get(Kind.PERMIT)),
                            reservers=built(Kind.RESERVE, resolved.others.get(Kind.RESERVE)),
                            post_filters=built(Kind.POST_FILTER, post))


def load_plugin_sets(group: str = ENTRY_POINT_GROUP) -> tuple[PluginSet, ...]:
    """The plugin sets installed packages declare under the entry-point `group`, e.g. in a plugin
    package's pyproject.toml:

        [project.entry-points."gpuaware.placement.plugins"]
        mine = "my_package.placement:PLUGINS"     # a PluginSet, or a function returning one

    Reads installed packages' metadata, so it runs only when called (never at import)."""
    from importlib.metadata import entry_points

    out = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        value = ep.load()
        if not isinstance(value, PluginSet) and callable(value):
            value = value()
        if not isinstance(value, PluginSet):
            raise ProfileError(f"entry point {ep.name!r} ({ep.value}) of {group!r} is not a PluginSet")
        out.append(value)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------
# The built-in tables: every plugin and policy gpuaware ships, in one place.
# ---------------------------------------------------------------------------------------------------

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

_PUBLISHED: dict[str, dict[str, Any]] = {
    "Random": {"score": [{"name": "random", "weight": 1000}], "gpu": "random"},
    "DotProd": {"score": [{"name": "dotprod", "weight": 1000}], "gpu": "best"},
    "GpuClustering": {"score": [{"name": "gpuclustering", "weight": 1000}], "gpu": "best"},
    "GpuPacking": {"score": [{"name": "gpupacking", "weight": 1000}], "gpu": "best"},
    "BestFit": {"score": [{"name": "bestfit", "weight": 1000}], "gpu": "best"},
    "FGD": {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"},
}
"""The six published policies, in the paper's order."""

PUBLISHED = tuple(_PUBLISHED)

OURS = "WasteGradient"
"""Our policy: FGD's gradient on expected *waste* = fragmentation + GPU stranded by CPU + unfillable gaps."""


def _waste(strand: float, gap: float, kappa: float = 30.0) -> dict[str, Any]:
    return {"score": [{"name": "waste-gradient", "weight": 1000,
                       "args": {"strand": strand, "gap": gap, "kappa": kappa}}], "gpu": "waste-gradient"}


_OURS_AND_VARIANTS: dict[str, dict[str, Any]] = {
    OURS: _waste(2.0, 4.0, 30.0),
    # the variants tried on the way, kept so the comparison stays honest (see bench/results/placement.json)
    "WasteGradient-StrandOnly": _waste(2.0, 0.0),
    "WasteGradient-GapOnly": _waste(0.0, 4.0, 30.0),
    "WasteGradient-RandomFill": _waste(2.0, 4.0, 1e6),  # gaps valued with unlimited small pods (no scarcity)
    "FGD-Float": {"score": [{"name": "fgd-float", "weight": 1}], "gpu": "fgd-float"},
}
VARIANTS = tuple(p for p in _OURS_AND_VARIANTS if p != OURS)

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

SIGNAL_WEIGHTS: Mapping[str, int] = types.MappingProxyType(
    {"health": 32, "thermal-power": 18, "forecast-headroom": 12, "topology": 11})

_DEFAULT: dict[str, Any] = {
    "score": [*_OURS_AND_VARIANTS[OURS]["score"], *({"name": k, "weight": w} for k, w in SIGNAL_WEIGHTS.items())],
    "gpu": "signal-aware",
    "gpu_args": {"inner": _OURS_AND_VARIANTS[OURS]["gpu"], "tolerance": 25},
}

BUILTIN = PluginSet(
    source="gpuaware.placement",
    plugins={Kind.FILTER: _FILTERS, Kind.SCORE: _SCORES, Kind.GPU: _GPUS, Kind.POST_FILTER: _POST_FILTERS},
    policies={**_PUBLISHED, **_OURS_AND_VARIANTS, DEFAULT_PROFILE: _DEFAULT, KUBE_DEFAULT: KUBE_DEFAULT_CONFIG},
)
"""Everything gpuaware ships."""

REGISTRY: Registry = Registry.of(BUILTIN)
"""The registry every caller uses unless it builds its own (`REGISTRY.with_entry_points()`)."""

POLICIES: Mapping[str, Mapping[str, Any]] = REGISTRY.policies
"""Every built-in policy's profile, read-only (`REGISTRY.policy_config(name)` gives a mutable copy)."""


def canonical_policy(name: str) -> str:
    """The registered spelling of a policy name (case-insensitive); ValueError listing known ones."""
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
