"""The registry of placement plugins and policies: closed and validated before anything runs.

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
start-up instead of failing at the first decision. Plugins that need the workload's typical pods,
randomness or the cluster's GPU count receive them through `PluginContext`, so the same configuration
runs in the evaluator and in the service.

Why closed: what a name means must not depend on which modules a process happened to import. The
built-in plugins and policies are one `PluginSet` (builtin.py, policies in profiles.py) and the
registry every caller uses is built from it by one call (`Registry.of`); it is immutable (frozen
dataclass over read-only mappings). Other packages contribute through the entry-point group
``gpuaware.placement.plugins``, each entry a `PluginSet`, loaded only when someone calls
`load_plugin_sets` / `Registry.with_entry_points` (never at import); a name defined twice is refused,
not overridden.

Kinds: one per extension point, kube-scheduler's meaning (framework.py, extensions.py,
queue_order.py): filter, score, gpu (the GPU selector), permit, post_filter, queue_sort.
`Registry.build` gives the filter/score/select `Scheduler`; `Registry.build_framework` gives it with
the plugins of the other points, as the scheduling session (session.py) runs them; its `queue_sort`
is the profile's order of waiting pods.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from gpuaware.placement.args import FilterEntry, NoArgs, PluginArgs, Profile
from gpuaware.placement.cache import CachedScheduler, PickObserver
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.framework import FilterPlugin, GpuSelector, Scheduler, ScorePlugin, WeightedScore
from gpuaware.placement.queue_order import QueueSort
from gpuaware.placement.session import Framework

__all__ = [
    "ENTRY_POINT_GROUP",
    "Kind",
    "Plugin",
    "PluginContext",
    "PluginSet",
    "ProfileError",
    "Registry",
    "ResolvedProfile",
    "load_plugin_sets",
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
    PERMIT = "permit"
    POST_FILTER = "post_filter"
    QUEUE_SORT = "queue_sort"

    @property
    def noun(self) -> str:
        return {"gpu": "GPU selector", "queue_sort": "queue sort"}.get(
            self.value, f"{self.value.replace('_', '-')} plugin")


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What plugin factories may draw on: the workload's typical pods, a seed for randomness, the
    registry itself (for plugins that wrap another plugin, as signal-aware wraps a GPU selector) and
    the cluster's GPU count (for orders that weigh tenants' shares of it)."""

    typical: TypicalPods | None = None
    seed: int = 0
    registry: Registry | None = None
    clock: Callable[[], float] | None = None
    """the caller's clock (cooldowns); None: plugins that need one do without"""
    memory: dict[str, Any] | None = None
    """the caller's state that outlives one build of a profile (profiles are rebuilt when the node set
    changes): a plugin keeps what it must remember under its own name, e.g. preemption cooldowns"""
    capacity: Callable[[], float] | None = None
    """GPUs in the cluster now (the caller's view)"""

    def remembered(self, plugin: str) -> dict[str, Any]:
        """This plugin's memory (a fresh dict when the caller keeps none)."""
        return {} if self.memory is None else self.memory.setdefault(plugin, {})

    def need_typical(self, plugin: str) -> TypicalPods:
        if self.typical is None:
            raise ValueError(f"plugin {plugin!r} needs typical pods (the workload's request distribution)")
        return self.typical

    def need_capacity(self, plugin: str) -> Callable[[], float]:
        if self.capacity is None:
            raise ValueError(f"plugin {plugin!r} needs the cluster's GPU capacity")
        return self.capacity

    def rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, salt])

    def gpu_selector(self, name: str) -> GpuSelector:
        """Another GPU selector of the registry, with its default arguments."""
        if self.registry is None:
            raise ValueError(f"GPU selector {name!r} is looked up in a registry, and this context has none")
        plugin = self.registry.plugin(Kind.GPU, name)
        selector: GpuSelector = plugin.factory(self, msgspec.convert({}, plugin.args))
        return selector


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
    """permit and post_filter plugins (None: the profile left post_filter out)"""
    queue_sort: Bound[QueueSort] | None = None
    """None: the profile names none (``priority``)"""


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
        config: dict[str, Any] = _thaw(self.policies[self.canonical_policy(name)])
        return config

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
        for kind in (Kind.PERMIT, Kind.POST_FILTER):
            entries = getattr(profile, kind.value)
            others[kind] = None if entries is None else tuple(
                self._bind(kind, e.name, e.args, f"$.{kind.value}[{i}].name", f"$.{kind.value}[{i}].args")
                for i, e in enumerate(entries))
        queue_sort = None if profile.queue_sort is None else self._bind(
            Kind.QUEUE_SORT, profile.queue_sort.name, profile.queue_sort.args, "$.queue_sort.name",
            "$.queue_sort.args")
        return ResolvedProfile(profile, filters, scores, gpu, types.MappingProxyType(others), queue_sort)

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
                 clock: Callable[[], float] | None = None, memory: dict[str, Any] | None = None,
                 capacity: Callable[[], float] | None = None) -> PluginContext:
        """The profile's own seed wins over the caller's."""
        return PluginContext(typical=typical, seed=int(seed if profile.seed is None else profile.seed), registry=self,
                             clock=clock, memory=memory, capacity=capacity)

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
        observers: Sequence[PickObserver] = (),
        capacity: Callable[[], float] | None = None,
    ) -> Framework:
        """The scheduler and the plugins of every other extension point, for a scheduling session.
        `default_post_filter` (an entry such as ``{"name": "default-preemption", "args": {...}}``) is
        used when the profile names no `post_filter` list of its own. `extra_filters` are built
        plugins added after the profile's filters, whatever the profile (e.g. strict partitions fed
        from the quota tree: a constraint of the cluster, not a choice of the profile). `observers`
        are shown the score cache's decisions (`CachedScheduler.observe`). `capacity` (the cluster's
        GPUs now) is what a tenant-aware queue sort weighs shares against; `Framework.queue_sort` is
        None when the profile names no queue sort (priority, then arrival)."""
        resolved = self.resolve(config)
        ctx = self._context(resolved.profile, typical, seed, clock, memory, capacity)
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

        framework = Framework.of(CachedScheduler(scheduler, observers=observers),
                                 permits=built(Kind.PERMIT, resolved.others.get(Kind.PERMIT)),
                                 post_filters=built(Kind.POST_FILTER, post))
        if resolved.queue_sort is not None:
            framework.queue_sort = resolved.queue_sort.build(ctx)
        return framework


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
