"""GPU health: a score per GPU per rollup window, and the state placement acts on.

The score (0..100) is a continuous signal placement can weigh; the state is the discrete decision
with hysteresis, owned by health-scoring: ``healthy`` GPUs take any work, ``degraded`` GPUs take
only work that tolerates failure (checkpointable, best-effort), ``quarantined`` GPUs take none
and their pods are candidates for migration. ``GpuStateChanged`` is published only on a
transition, so consumers that care about state alone never read the scores.

``reasons`` are short machine-readable codes (``xid_79``, ``ecc_uncorrected``, ``thermal_throttle``,
``row_remap_pending``, ``stale_telemetry`` ...), an open set: a new code must not break readers, so it
is a string, not an enum. ``components`` breaks the score into its named parts for dashboards.

``DrainRecommended`` says which pods to move off a GPU that became degraded or quarantined, in what
order (checkpointable first, then least work lost): ``urgent`` when the GPU is quarantined or its
failure risk reached the quarantine level (move everything now); otherwise only the pods that do not
tolerate failure are listed. It is advice for an operator or a tool (placement never sends new work
there already); the pods a GPU holds are what placement decided and the binder has not reported gone.

``health.cordon`` (request/reply, served by health-scoring) is the manual override: an operator pins
a GPU's state (``cordon``: quarantined, or degraded) or gives it back to the evidence (``uncordon``,
with ``clear`` after a repair), always with a reason; the service records who, when and why, and
the resulting ``GpuStateChanged`` carries ``manual_cordon`` plus ``cordon_by:<who>`` and
``cordon_reason:<why>`` in its reasons, so a reader of the stream alone sees the audit too.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import (
    Event,
    GpuIndex,
    Label,
    Name,
    NonNegInt,
    Reply,
    Request,
    Score,
    Seconds,
    Text,
    Timestamp,
)

__all__ = [
    "DRAIN_RECOMMENDED",
    "GPU_SCORED",
    "GPU_STATE_CHANGED",
    "HEALTH_CORDON",
    "CordonAction",
    "CordonReply",
    "CordonRequest",
    "DrainPod",
    "DrainRecommended",
    "GpuScored",
    "GpuStateChanged",
    "HealthState",
]

GPU_SCORED = "health.gpu.scored.v1"
GPU_STATE_CHANGED = "health.gpu.state_changed.v1"
HEALTH_CORDON = "health.cordon"
DRAIN_RECOMMENDED = "health.gpu.drain_recommended.v1"


class HealthState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    QUARANTINED = "quarantined"


class GpuScored(Event, frozen=True, kw_only=True, tag=GPU_SCORED):
    """The health score and state of one GPU after a rollup window."""

    node: Name
    gpu_uuid: Name
    gpu_index: GpuIndex
    score: Score
    state: HealthState
    scored_at: Timestamp
    reasons: tuple[Label, ...] = ()
    components: dict[Label, Score] = msgspec.field(default_factory=dict)
    """e.g. ``{"thermal": 92, "memory_errors": 100, "xid": 40}``"""
    model_version: Label = "rules-v1"


class GpuStateChanged(Event, frozen=True, kw_only=True, tag=GPU_STATE_CHANGED):
    """A GPU's health state changed (published on transitions only)."""

    node: Name
    gpu_uuid: Name
    gpu_index: GpuIndex
    current: HealthState
    score: Score
    changed_at: Timestamp
    previous: HealthState | None = None
    """None: the first state of a GPU never seen before"""
    reasons: tuple[Label, ...] = ()

    def __post_init__(self) -> None:
        if self.previous == self.current:
            raise ValueError(f"`previous` and `current` are both {self.current.value!r}: not a change")


class DrainPod(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod to move, at its place in the order."""

    pod_uid: Name
    order: NonNegInt
    """0 = move first"""
    pod_name: Label = ""
    namespace: Label = ""
    checkpointable: bool = False
    priority: int = 0
    running_s: Seconds = 0.0
    work_lost_s: Seconds = 0.0
    """what moving it costs: 0 for a checkpointable pod, else how long it has run"""


class DrainRecommended(Event, frozen=True, kw_only=True, tag=DRAIN_RECOMMENDED):
    """Pods to move off one GPU, in order (published with the state change that calls for it)."""

    node: Name
    gpu_uuid: Name
    gpu_index: GpuIndex
    state: HealthState
    risk: Annotated[float, Meta(ge=0.0, le=1.0)]
    """the failure risk within the health model's horizon when it was recommended"""
    urgent: bool
    """quarantined or predicted to fail: every pod listed, move now; else only the pods that do not
    tolerate failure"""
    reason: Text
    recommended_at: Timestamp
    pods: tuple[DrainPod, ...]


class CordonAction(StrEnum):
    CORDON = "cordon"
    """pin the GPU's state (quarantined by default) whatever the evidence says"""
    UNCORDON = "uncordon"
    """remove the pin: the state follows the evidence again"""


Reason = Annotated[str, Meta(min_length=1, max_length=1024, description="why, in words (kept for the audit)")]


class CordonRequest(Request, frozen=True, kw_only=True, tag="health.cordon.request"):
    """Cordon or uncordon one GPU by hand (``gpuaware health cordon|uncordon GPU --reason ...``)."""

    gpu_uuid: Name
    reason: Reason
    action: CordonAction = CordonAction.CORDON
    by: Label = ""
    """who asks (a person, a ticket bot); empty = the request's ``source``"""
    state: HealthState = HealthState.QUARANTINED
    """cordon: the state pinned, ``quarantined`` (no work) or ``degraded`` (failure-tolerant work only)"""
    clear: bool = False
    """uncordon: the GPU was repaired or replaced, so its automatic state returns to healthy and its error
    history is forgotten (without it, the evidence of the last days still decides)"""

    def __post_init__(self) -> None:
        if self.action is CordonAction.CORDON and self.state is HealthState.HEALTHY:
            raise ValueError("a cordon pins `degraded` or `quarantined`; uncordon returns to the evidence")
        if self.clear and self.action is not CordonAction.UNCORDON:
            raise ValueError("`clear` belongs to an uncordon")


class CordonReply(Reply, frozen=True, kw_only=True, tag="health.cordon.reply"):
    """What the override did: the effective state before and after, and the audit record's fields."""

    gpu_uuid: Name
    action: CordonAction
    previous: HealthState
    current: HealthState
    at: Timestamp
    """when the service applied it (its clock)"""
    by: Label
    reason: Text
    node: Label = ""
    changed: bool = False
    """the effective state changed (a ``GpuStateChanged`` was published)"""
    cleared: bool = False


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (GpuScored, GpuStateChanged, DrainRecommended)

#: the request/reply endpoints this module defines
ENDPOINTS: dict[str, tuple[type[Request], type[Reply]]] = {HEALTH_CORDON: (CordonRequest, CordonReply)}
