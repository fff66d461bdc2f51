"""The subjects placement reads and writes, typed (one `bus.Channel` each), and the dedupe id of each
message it publishes: a redelivered pending pod decided again yields the same id, so JetStream stores
the decision once."""

from __future__ import annotations

from gpuaware import bus
from gpuaware.schemas import (
    GPU_ROLLED_UP,
    GPU_SCORED,
    GPU_STATE_CHANGED,
    GPU_UTIL_PREDICTED,
    NODE_INVENTORY,
    PLACEMENT_DECIDED,
    PLACEMENT_EXPLAINED,
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PENDING,
    POD_PREEMPTED,
    POD_UNSCHEDULABLE,
    GpuRolledUp,
    GpuScored,
    GpuStateChanged,
    GpuUtilPredicted,
    NodeInventory,
    PlacementDecided,
    PlacementExplained,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
)

PENDING = bus.Channel(POD_PENDING, PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")
DECIDED = bus.Channel(PLACEMENT_DECIDED, PlacementDecided, id_of=lambda d: d.decision_id)
UNSCHEDULABLE = bus.Channel(POD_UNSCHEDULABLE, PodUnschedulable,
                            id_of=lambda u: f"{u.pod_uid}/{u.attempt}/{u.reason}")
EXPLAINED = bus.Channel(PLACEMENT_EXPLAINED, PlacementExplained)
INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)
HEALTH = bus.Channel(GPU_STATE_CHANGED, GpuStateChanged)
SCORED = bus.Channel(GPU_SCORED, GpuScored)
ROLLUPS = bus.Channel(GPU_ROLLED_UP, GpuRolledUp)
FORECASTS = bus.Channel(GPU_UTIL_PREDICTED, GpuUtilPredicted)
BOUND = bus.Channel(POD_BOUND, PodBound)
BIND_FAILED = bus.Channel(POD_BIND_FAILED, PodBindFailed)
PREEMPTED = bus.Channel(POD_PREEMPTED, PodPreempted)
FINISHED = bus.Channel(POD_FINISHED, PodFinished)
