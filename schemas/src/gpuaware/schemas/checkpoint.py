"""Checkpoint handshake: ask a checkpointable pod to save its state before it is preempted.

The binder publishes ``CheckpointRequested`` (for a planned preemption with ``checkpoint_first``,
or a node drain); the workload's sidecar/operator answers ``CheckpointAcknowledged`` with the same
``request_id``. If no acknowledgement arrives before ``deadline_s`` the binder evicts anyway —
the preemption must not wait forever on a workload that cannot answer — and reports
``checkpointed=False`` on ``binder.pod.preempted.v1``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from msgspec import Meta

from gpuaware.schemas.base import Event, Label, Name, Text, Timestamp

__all__ = [
    "CHECKPOINT_ACKNOWLEDGED",
    "CHECKPOINT_REQUESTED",
    "CheckpointAcknowledged",
    "CheckpointRequested",
    "CheckpointStatus",
]

CHECKPOINT_REQUESTED = "binder.checkpoint.requested.v1"
CHECKPOINT_ACKNOWLEDGED = "binder.checkpoint.acknowledged.v1"


class CheckpointStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"
    """the pod claimed to be checkpointable but cannot do it now"""


class CheckpointRequested(Event, frozen=True, kw_only=True, tag=CHECKPOINT_REQUESTED):
    """Ask a checkpointable pod to save its state before ``deadline_s`` runs out."""

    request_id: Name
    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    reason: Text
    """``preemption``, ``drain``, ``migration``, ``resize`` (an elastic job changes its world size)"""
    deadline_s: Annotated[float, Meta(gt=0)]
    """seconds from ``requested_at`` after which the binder evicts regardless"""
    requested_at: Timestamp
    decision_id: Label | None = None
    world_size: Annotated[int, Meta(ge=1, le=4096)] | None = None
    """``resize``: the job's worker count once it resumes (torchrun's new world size); None otherwise"""


class CheckpointAcknowledged(Event, frozen=True, kw_only=True, tag=CHECKPOINT_ACKNOWLEDGED):
    """The workload's answer to a checkpoint request, by ``request_id``."""

    request_id: Name
    pod_uid: Name
    namespace: Name
    status: CheckpointStatus
    acknowledged_at: Timestamp
    checkpoint_uri: Text | None = None
    """where the state went (object store URL, PVC path) when ``completed``"""
    message: Text = ""


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (CheckpointRequested, CheckpointAcknowledged)
