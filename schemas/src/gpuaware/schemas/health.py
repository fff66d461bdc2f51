"""GPU health: a score per GPU per rollup window, and the state placement acts on.

The score (0..100) is a continuous signal placement can weigh; the state is the discrete decision
with hysteresis, owned by health-scoring: ``healthy`` GPUs take any work, ``degraded`` GPUs take
only work that tolerates failure (checkpointable, best-effort), ``quarantined`` GPUs take none
and their pods are candidates for migration. ``GpuStateChanged`` is published only on a
transition, so consumers that care about state alone never read the scores.

``reasons`` are short machine-readable codes (``xid_79``, ``ecc_uncorrected``, ``thermal_throttle``,
``row_remap_pending``, ``stale_telemetry`` ...), an open set: a new code must not break readers, so it
is a string, not an enum. ``components`` breaks the score into its named parts for dashboards.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from gpuaware.schemas.base import Event, GpuIndex, Name, Score, Timestamp

__all__ = ["GPU_SCORED", "GPU_STATE_CHANGED", "GpuScored", "GpuStateChanged", "HealthState"]

GPU_SCORED = "health.gpu.scored.v1"
GPU_STATE_CHANGED = "health.gpu.state_changed.v1"


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
    reasons: tuple[str, ...] = ()
    components: dict[str, Score] = msgspec.field(default_factory=dict)
    """e.g. ``{"thermal": 92, "memory_errors": 100, "xid": 40}``"""
    model_version: str = "rules-v1"


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
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.previous == self.current:
            raise ValueError(f"`previous` and `current` are both {self.current.value!r}: not a change")
