"""gpuaware.placement: the scheduling engine (cluster model, filter/score plugins, policies). No I/O.

Public API re-exported here; modules are internal.
"""

from gpuaware.placement.cluster import (
    DEGRADED,
    HEALTHY,
    QUARANTINED,
    Allocation,
    Cluster,
    ReserveError,
    Snapshot,
)
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
from gpuaware.placement.registry import (
    POLICIES,
    PUBLISHED,
    build_scheduler,
    canonical_policy,
    policy,
    register_policy,
)

__all__ = [
    "DEGRADED",
    "GPU_CATALOG",
    "HEALTHY",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "POLICIES",
    "PUBLISHED",
    "QUARANTINED",
    "Allocation",
    "BestFitGpu",
    "Cluster",
    "Code",
    "CycleState",
    "Decision",
    "FilterPlugin",
    "FragModel",
    "FragState",
    "GpuFit",
    "GpuModel",
    "GpuSelector",
    "NodeSpec",
    "PodRequest",
    "RandomGpu",
    "RequestError",
    "ReserveError",
    "ResourcesFit",
    "Scheduler",
    "ScorePlugin",
    "Snapshot",
    "Status",
    "TypicalPods",
    "WeightedScore",
    "build_scheduler",
    "canonical_policy",
    "policy",
    "register_policy",
]
