"""What the binder reports back after acting on a decision: the cluster's truth, as events.

The binder is the only writer to Kubernetes (or the digital twin); these events are how placement's
allocation ledger and quota's usage learn what really happened. Every event names the
``decision_id`` it executes, when there is one, so consumers correlate and dedupe.

``PodBindFailed.transient`` says what happens next (house style): ``True`` — the pod is re-queued
and placement will decide again (node gone, conflict, API timeout); ``False`` — permanent (the pod was
deleted, the request is invalid for every node): drop it and release the reservation.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from gpuaware.schemas.base import Event, Label, Name, NonNegInt, Text, Timestamp
from gpuaware.schemas.placement import GpuSlice

__all__ = [
    "NODE_POWER_CHANGED",
    "POD_BIND_FAILED",
    "POD_BOUND",
    "POD_FINISHED",
    "POD_PREEMPTED",
    "NodePowerChanged",
    "PodBindFailed",
    "PodBound",
    "PodFinished",
    "PodOutcome",
    "PodPreempted",
]

POD_BOUND = "binder.pod.bound.v1"
POD_BIND_FAILED = "binder.pod.bind_failed.v1"
POD_PREEMPTED = "binder.pod.preempted.v1"
POD_FINISHED = "binder.pod.finished.v1"
NODE_POWER_CHANGED = "binder.node.power_changed.v1"


class PodOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"
    """deleted by its owner before finishing"""
    EVICTED = "evicted"
    """evicted by something other than our preemption (node drain, kubelet pressure)"""


class PodBound(Event, frozen=True, kw_only=True, tag=POD_BOUND):
    """A pod is bound to its node and GPU slices: the allocation is real."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    slices: tuple[GpuSlice, ...]
    bound_at: Timestamp
    decision_id: Label | None = None
    """None when the binding was observed, not made (kube-scheduler extender mode, restart resync)"""
    queue: Name = "default"


class PodBindFailed(Event, frozen=True, kw_only=True, tag=POD_BIND_FAILED):
    """The binder could not bind a decision; ``transient`` says what happens next."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    decision_id: Name
    reason: Text
    transient: bool
    """True: re-queued, placement decides again; False: dropped (see module docstring)"""
    failed_at: Timestamp
    attempt: NonNegInt = 0


class PodPreempted(Event, frozen=True, kw_only=True, tag=POD_PREEMPTED):
    """A pod was evicted to make room, as a decision planned."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    reason: Text
    """as planned: ``priority``, ``reclaim``, ``defragment``, ``gang``"""
    preempted_at: Timestamp
    decision_id: Label | None = None
    """the decision that planned this preemption"""
    preemptor_pod_uid: Label | None = None
    checkpointed: bool = False
    requeued: bool = False
    """True when the pod was checkpointable and goes back to pending"""
    slices: tuple[GpuSlice, ...] = ()
    """what it released"""


class PodFinished(Event, frozen=True, kw_only=True, tag=POD_FINISHED):
    """A pod left the cluster (succeeded, failed, deleted, evicted) and released its slices."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    outcome: PodOutcome
    finished_at: Timestamp
    node: Label | None = None
    """None when it never ran (deleted while pending)"""
    started_at: Timestamp | None = None
    exit_code: int | None = None
    message: Text = ""
    slices: tuple[GpuSlice, ...] = ()
    """what it released"""

    def __post_init__(self) -> None:
        if self.started_at is not None and self.finished_at < self.started_at:
            raise ValueError("`finished_at` is before `started_at`")


class NodePowerChanged(Event, frozen=True, kw_only=True, tag=NODE_POWER_CHANGED):
    """A node's power as the binder left it after a power recommendation (``placement.node.
    power_recommended.v1``): the answer to every recommendation, carried out or refused.

    ``state`` is what the world holds now: ``off`` (the twin switched it off; in Kubernetes it is
    cordoned and annotated for the autoscaler or BMC tool that switches it off), ``booting`` (it takes
    pods from ``ready_at``), ``on``. A refused recommendation (pods were bound there meanwhile) says
    ``on`` with the reason, so placement takes the node back at once.
    """

    node: Name
    state: Literal["off", "booting", "on"]
    ready_at: Timestamp | None = None
    """when a booting node takes pods (the world's clock); None when off, or on already"""
    changed_at: Timestamp
    recommendation_id: Label = ""
    """the recommendation this answers ("" when the world changed it by itself)"""
    reason: Text = ""
    """why, for a refusal (``node_busy: ...``); empty when carried out"""


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (PodBound, PodBindFailed, PodPreempted, PodFinished, NodePowerChanged)
