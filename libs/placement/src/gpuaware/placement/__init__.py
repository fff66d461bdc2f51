"""gpuaware.placement: the scheduling engine (cluster model, filter/score plugins, policies). No I/O.

Public API re-exported here; modules are internal.
"""

from gpuaware.placement.builtin import BUILTIN, POLICIES, REGISTRY, build_scheduler, canonical_policy, policy
from gpuaware.placement.cache import CachedScheduler, Pick, PickObserver
from gpuaware.placement.cluster import (
    DEGRADED,
    HEALTHY,
    QUARANTINED,
    Allocation,
    Cluster,
    ReserveError,
    Snapshot,
)
from gpuaware.placement.effects import SignalEffect
from gpuaware.placement.frag import FragModel, FragState, TypicalPods
from gpuaware.placement.framework import (
    BestFitGpu,
    Code,
    CycleState,
    Decision,
    FilterPlugin,
    GpuFit,
    GpuSelector,
    RandomGpu,
    ResourcesFit,
    Scheduler,
    ScorePlugin,
    Status,
    WeightedScore,
    WholeGpuOnly,
)
from gpuaware.placement.model import (
    GPU_CATALOG,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    MILLI,
    GpuModel,
    NodeSpec,
    PodRequest,
    RequestError,
)
from gpuaware.placement.profiles import DEFAULT_PROFILE, OURS, PUBLISHED, SIGNAL_WEIGHTS, VARIANTS
from gpuaware.placement.queue_order import FairShareOrder, PrioritySort, QueueSort
from gpuaware.placement.registry import (
    Kind,
    Plugin,
    PluginContext,
    PluginSet,
    ProfileError,
    Registry,
)

__all__ = [
    "BUILTIN",
    "DEFAULT_PROFILE",
    "DEGRADED",
    "GPU_CATALOG",
    "HEALTHY",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "OURS",
    "POLICIES",
    "PUBLISHED",
    "QUARANTINED",
    "REGISTRY",
    "SIGNAL_WEIGHTS",
    "VARIANTS",
    "Allocation",
    "BestFitGpu",
    "CachedScheduler",
    "Cluster",
    "Code",
    "CycleState",
    "Decision",
    "FairShareOrder",
    "FilterPlugin",
    "FragModel",
    "FragState",
    "GpuFit",
    "GpuModel",
    "GpuSelector",
    "Kind",
    "NodeSpec",
    "Pick",
    "PickObserver",
    "Plugin",
    "PluginContext",
    "PluginSet",
    "PodRequest",
    "PrioritySort",
    "ProfileError",
    "QueueSort",
    "RandomGpu",
    "Registry",
    "RequestError",
    "ReserveError",
    "ResourcesFit",
    "Scheduler",
    "ScorePlugin",
    "SignalEffect",
    "Snapshot",
    "Status",
    "TypicalPods",
    "WeightedScore",
    "WholeGpuOnly",
    "build_scheduler",
    "canonical_policy",
    "policy",
]
