"""Subject -> type, in one place: what the bus, the dead-letter tooling and the generator look up.

``MESSAGES`` maps every event subject to its Struct and ``REQUESTS`` every request/reply endpoint
to its (request, reply) pair. Because an event's tag *is* its subject, ``subject_of(event)``
needs no table and ``decode_event`` decodes any event without knowing the subject first (a
tagged union: msgspec reads ``kind`` and dispatches). Tests check the two agree.

Subjects may carry routing suffixes after the version (``telemetry.gpu.sampled.v1.default.node-a``);
``struct_for`` strips them.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import msgspec

from gpuaware.schemas.alerts import ALERT_RAISED, ALERT_RESOLVED, AlertRaised, AlertResolved
from gpuaware.schemas.base import EVENT_SUBJECT_RE, Event, Reply, Request
from gpuaware.schemas.binder import (
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PREEMPTED,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPreempted,
)
from gpuaware.schemas.checkpoint import (
    CHECKPOINT_ACKNOWLEDGED,
    CHECKPOINT_REQUESTED,
    CheckpointAcknowledged,
    CheckpointRequested,
)
from gpuaware.schemas.forecast import (
    DEMAND_PREDICTED,
    FORECAST_DURATION,
    GPU_UTIL_PREDICTED,
    DemandPredicted,
    DurationReply,
    DurationRequest,
    GpuUtilPredicted,
)
from gpuaware.schemas.health import (
    DRAIN_RECOMMENDED,
    GPU_SCORED,
    GPU_STATE_CHANGED,
    HEALTH_CORDON,
    CordonReply,
    CordonRequest,
    DrainRecommended,
    GpuScored,
    GpuStateChanged,
)
from gpuaware.schemas.inventory import NODE_INVENTORY, NodeInventory
from gpuaware.schemas.placement import (
    PLACEMENT_DECIDED,
    PLACEMENT_EXPLAIN,
    PLACEMENT_EXPLAINED,
    POD_UNSCHEDULABLE,
    ExplainReply,
    ExplainRequest,
    PlacementDecided,
    PlacementExplained,
    PodUnschedulable,
)
from gpuaware.schemas.pods import POD_PENDING, PodPending
from gpuaware.schemas.quota import (
    QUOTA_ADMIT,
    QUOTA_USAGE_REPORTED,
    AdmitReply,
    AdmitRequest,
    QuotaUsageReported,
)
from gpuaware.schemas.telemetry import GPU_ROLLED_UP, GPU_SAMPLED, GpuRolledUp, GpuSampled
from gpuaware.schemas.usage import POD_USAGE_REPORTED, PodUsageReported
from gpuaware.schemas.world import WORLD_SNAPSHOT, WorldSnapshotReply, WorldSnapshotRequest

__all__ = [
    "MESSAGES",
    "REQUESTS",
    "AnyEvent",
    "base_subject",
    "decode_event",
    "endpoint_for",
    "struct_for",
    "subject_of",
]

MESSAGES: dict[str, type[Event]] = {
    NODE_INVENTORY: NodeInventory,
    GPU_SAMPLED: GpuSampled,
    GPU_ROLLED_UP: GpuRolledUp,
    POD_USAGE_REPORTED: PodUsageReported,
    DEMAND_PREDICTED: DemandPredicted,
    GPU_UTIL_PREDICTED: GpuUtilPredicted,
    GPU_SCORED: GpuScored,
    GPU_STATE_CHANGED: GpuStateChanged,
    DRAIN_RECOMMENDED: DrainRecommended,
    ALERT_RAISED: AlertRaised,
    ALERT_RESOLVED: AlertResolved,
    POD_PENDING: PodPending,
    PLACEMENT_DECIDED: PlacementDecided,
    POD_UNSCHEDULABLE: PodUnschedulable,
    PLACEMENT_EXPLAINED: PlacementExplained,
    POD_BOUND: PodBound,
    POD_BIND_FAILED: PodBindFailed,
    POD_PREEMPTED: PodPreempted,
    POD_FINISHED: PodFinished,
    CHECKPOINT_REQUESTED: CheckpointRequested,
    CHECKPOINT_ACKNOWLEDGED: CheckpointAcknowledged,
    QUOTA_USAGE_REPORTED: QuotaUsageReported,
}

REQUESTS: dict[str, tuple[type[Request], type[Reply]]] = {
    QUOTA_ADMIT: (AdmitRequest, AdmitReply),
    PLACEMENT_EXPLAIN: (ExplainRequest, ExplainReply),
    WORLD_SNAPSHOT: (WorldSnapshotRequest, WorldSnapshotReply),
    HEALTH_CORDON: (CordonRequest, CordonReply),
    FORECAST_DURATION: (DurationRequest, DurationReply),
}

#: every event type, as one tagged union (decode with ``msgspec.json.decode(data, type=AnyEvent)``)
AnyEvent: Any = functools.reduce(operator.or_, MESSAGES.values())

_event_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(AnyEvent)


def decode_event(data: bytes) -> Event:
    """Decode any event by its ``kind`` tag; raises ``msgspec.ValidationError`` when invalid."""
    return _event_decoder.decode(data)


def subject_of(event: Event) -> str:
    """The subject an event is published on (without routing suffixes): its tag."""
    return type(event).__struct_config__.tag  # type: ignore[return-value]  # every event Struct's tag is its subject, a str


def base_subject(subject: str) -> str:
    """``telemetry.gpu.sampled.v1.default.node-a`` -> ``telemetry.gpu.sampled.v1``."""
    head = ".".join(subject.split(".")[:4])
    return head if EVENT_SUBJECT_RE.match(head) else subject


def struct_for(subject: str) -> type[Event]:
    """The event Struct published on ``subject`` (routing suffixes allowed); KeyError if unknown."""
    try:
        return MESSAGES[base_subject(subject)]
    except KeyError:
        raise KeyError(f"no event is registered for subject {subject!r}") from None


def endpoint_for(subject: str) -> tuple[type[Request], type[Reply]]:
    """The (request, reply) types of a request/reply endpoint; KeyError if unknown."""
    try:
        return REQUESTS[subject]
    except KeyError:
        raise KeyError(f"no request/reply endpoint is registered at {subject!r}") from None
