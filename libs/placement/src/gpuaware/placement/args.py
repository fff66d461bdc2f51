"""The schema of a placement profile and of every plugin's arguments, as msgspec Structs.

Why Structs: a profile arrives as JSON (``GPUAWARE_PLACEMENT_PROFILE``) or as a mapping written in a
benchmark, and a typo in it ("stand" for "strand", a weight of "3") must be refused when the
configuration is read, naming where it is, not when the scheduler is first built or, worse, silently
ignored. ``msgspec.convert`` does that with messages that name the path (``Expected `int`, got `str` -
at `$.score[0].weight```); unknown keys are refused (``forbid_unknown_fields``); constraints
(``Meta(ge=0)``) replace the hand-written checks in the plugins' constructors. Fields only ever gain
defaults, so an older profile keeps decoding.

The registry (``gpuaware.placement.registry``) decodes a profile into `Profile` first (its shape),
then each entry's ``args`` into the argument Struct its plugin declares (its meaning). A sample
profile, every field shown::

    {"name": "mine",
     "filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}],
     "score": [{"name": "waste-gradient", "weight": 1000, "args": {"strand": 2.0, "gap": 4.0}},
               {"name": "health", "weight": 32}],
     "gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient", "tolerance": 25}}

Pure: no I/O, no registry state; only the shapes.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

__all__ = [
    "CpuReserveArgs",
    "DefaultPreemptionArgs",
    "FairShareArgs",
    "FilterEntry",
    "NoArgs",
    "PluginArgs",
    "Profile",
    "ScoreEntry",
    "SignalAwareArgs",
    "ThroughputArgs",
    "WasteGradientArgs",
]


class PluginArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every plugin's arguments: frozen, keyword-only, unknown keys refused (subclasses
    inherit all three). A plugin's arguments must all have defaults, so ``{}`` is always valid."""


class NoArgs(PluginArgs, frozen=True):
    """The arguments of a plugin that takes none: ``{}`` (or no ``args`` at all); any key is refused."""


class WasteGradientArgs(PluginArgs, frozen=True):
    """``waste-gradient`` (WasteGradientScore's keyword arguments, field for field).

    ``{"name": "waste-gradient", "weight": 1000, "args": {"strand": 2.0, "gap": 4.0, "kappa": 30.0}}``
    """

    strand: Annotated[float, Meta(ge=0)] = 2.0
    """weight of GPU stranded by CPU (a node whose CPU runs out before its GPUs)"""
    gap: Annotated[float, Meta(ge=0)] = 4.0
    """weight of unfillable gaps (GPU fractions no typical pod fits)"""
    kappa: Annotated[float, Meta(gt=0)] = 30.0
    """scarcity of small pods when valuing gaps; very large = unlimited small pods"""
    reserve: Annotated[float, Meta(ge=0)] = 2.0
    """share of a GPU model kept for pods restricted to it: reserve x (their demand share + floor)"""
    reserve_floor: Annotated[float, Meta(ge=0)] = 0.02
    """demand share assumed for restricted pods too rare to be typical"""
    reserve_cost: Annotated[float, Meta(ge=0)] = 2.5
    """price per milli-GPU a pod with a choice pays on reserved GPUs"""
    capability: Annotated[float, Meta(ge=0)] = 0.2
    """price per milli-GPU per whole-node pod shape a node could hold (capable nodes used last)"""


class SignalAwareArgs(PluginArgs, frozen=True):
    """``signal-aware`` GPU selector: `inner` picks the GPU unless it is more than `tolerance`
    quality points worse than the node's best fitting GPU.

    ``{"gpu": "signal-aware", "gpu_args": {"inner": "waste-gradient", "tolerance": 25}}``
    """

    inner: str = "best"
    """another GPU selector of the registry (one without arguments; not signal-aware itself)"""
    tolerance: Annotated[float, Meta(ge=0)] = 25.0


class ThroughputArgs(PluginArgs, frozen=True):
    """``throughput`` score: job type -> GPU model -> relative throughput (Gavel's matrix).

    ``{"name": "throughput", "weight": 1000, "args": {"matrix": {"resnet": {"A100": 1.0, "T4": 0.3}}}}``
    """

    matrix: dict[str, dict[str, Annotated[float, Meta(ge=0)]]] = {}


class CpuReserveArgs(PluginArgs, frozen=True):
    """``{"name": "gpu-node-cpu-reserve", "args": {"fraction": 0.25}}``"""

    fraction: Annotated[float, Meta(ge=0, le=1)] = 0.25
    """share of a GPU node's CPU that CPU-only pods must leave free"""


class DefaultPreemptionArgs(PluginArgs, frozen=True):
    """``{"name": "default-preemption", "args": {"max_victims": 16, "cooldown_s": 30}}``"""

    max_victims: Annotated[int, Meta(ge=1)] = 16
    """most pods one plan may evict"""
    cooldown_s: Annotated[float, Meta(ge=0)] = 30.0
    """least time between two plans for the same pod (the caller's clock)"""
    max_candidates: Annotated[int, Meta(ge=1)] = 64
    """most nodes whose victims are weighed per plan"""


class FairShareArgs(PluginArgs, frozen=True):
    """``fair-share`` queue sort (queue_order.py).

    ``{"queue_sort": {"name": "fair-share", "args": {"starved_below": 1.0, "turn_due": 0.1}}}``
    """

    starved_below: Annotated[float, Meta(gt=0, le=1)] = 1.0
    """a tenant running less than this fraction of its fair share is starved (goes first, may reclaim)"""
    default_s: Annotated[float, Meta(gt=0)] = 3600.0
    """the runtime of a pod nobody predicted yet"""
    min_runtime_s: Annotated[float, Meta(ge=0)] = 600.0
    """a running pod is not reclaimed before it ran this long (world seconds since its bind)"""
    turn_due: Annotated[float, Meta(ge=0)] = 0.0
    """turn-taking (0: off): a tenant owed this fraction of its share lately is starved too"""
    turn_lease_s: Annotated[float, Meta(ge=0)] = 900.0
    """turn-taking: a pod runs at least this long (world seconds since its bind) before a turn takes it"""


class FilterEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One plugin of a profile's ``filter`` list (``{"name": "gpu-fit"}``), of its ``permit`` and
    ``post_filter`` lists, or its ``queue_sort``."""

    name: str
    args: dict[str, Any] = {}


class ScoreEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One weighted score of a profile: ``{"name": "bestfit", "weight": 3, "args": {}}``."""

    name: str
    weight: Annotated[int, Meta(ge=1)] = 1
    """a score of 0..100 counts `weight` times in the node's total"""
    args: dict[str, Any] = {}


class Profile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scheduler profile's shape. `filter` absent (None): ResourcesFit + GpuFit, kube-scheduler's
    pair; when given it is the whole list, in order. `seed` overrides the caller's seed. The other
    extension points (extensions.py) take lists of plugins run in order; `post_filter` absent (None)
    lets the caller add the built-in preemption as its settings say, an empty list means none.
    `queue_sort` absent: ``priority``."""

    score: Annotated[tuple[ScoreEntry, ...], Meta(min_length=1)]
    filter: Annotated[tuple[FilterEntry, ...], Meta(min_length=1)] | None = None
    gpu: str = "best"
    gpu_args: dict[str, Any] = {}
    permit: tuple[FilterEntry, ...] = ()
    post_filter: tuple[FilterEntry, ...] | None = None
    queue_sort: FilterEntry | None = None
    name: str | None = None
    seed: int | None = None
