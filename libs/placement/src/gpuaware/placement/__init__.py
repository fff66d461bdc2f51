"""gpuaware.placement: the scheduling engine (cluster model, filter/score plugins, policies). No I/O.

Public API re-exported here; modules are internal.
"""

from gpuaware.placement.args import Profile
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
from gpuaware.placement.explain import PodExplanation, node_reasons
from gpuaware.placement.extensions import WAIT, PermitGate, PermitVerdict
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
from gpuaware.placement.gang import Gang
from gpuaware.placement.headroom import ForecastHeadroom
from gpuaware.placement.ledger import HOLDING, Ledger, Phase, PodEntry
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
from gpuaware.placement.outcomes import Counters, Decided, Parked, decision_id
from gpuaware.placement.partitions import StrictPartitions
from gpuaware.placement.planner import Planner, PlannerConfig
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
from gpuaware.placement.session import Framework, Placed, Session
from gpuaware.placement.stock import KUBE_DEFAULT
from gpuaware.placement.warmup import warm_up

__all__ = [
    "BUILTIN",
    "DEFAULT_PROFILE",
    "DEGRADED",
    "GPU_CATALOG",
    "HEALTHY",
    "HOLDING",
    "KUBE_DEFAULT",
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
    "WAIT",
    "Allocation",
    "BestFitGpu",
    "CachedScheduler",
    "Cluster",
    "Code",
    "Counters",
    "CycleState",
    "Decided",
    "Decision",
    "FairShareOrder",
    "FilterPlugin",
    "ForecastHeadroom",
    "FragModel",
    "FragState",
    "Framework",
    "Gang",
    "GpuFit",
    "GpuModel",
    "GpuSelector",
    "Kind",
    "Ledger",
    "NodeSpec",
    "Parked",
    "PermitGate",
    "PermitVerdict",
    "Phase",
    "Pick",
    "PickObserver",
    "Placed",
    "Planner",
    "PlannerConfig",
    "Plugin",
    "PluginContext",
    "PluginSet",
    "PodEntry",
    "PodExplanation",
    "PodRequest",
    "PrioritySort",
    "Profile",
    "ProfileError",
    "QueueSort",
    "RandomGpu",
    "Registry",
    "RequestError",
    "ReserveError",
    "ResourcesFit",
    "Scheduler",
    "ScorePlugin",
    "Session",
    "SignalEffect",
    "Snapshot",
    "Status",
    "StrictPartitions",
    "TypicalPods",
    "WeightedScore",
    "WholeGpuOnly",
    "build_scheduler",
    "canonical_policy",
    "decision_id",
    "node_reasons",
    "policy",
    "warm_up",
]
