"""What the planner hands its caller for each pod: a decision to publish, or a verdict to park it.

The reason codes are `gpuaware.schemas.placement.UnschedulableReason` values; the planner's counters
say how many of each it produced (the service exports them as metrics).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaware.placement.explain import PodExplanation
from gpuaware.placement.ledger import PodEntry
from gpuaware.placement.session import WaitingPod

__all__ = ["Counters", "Decided", "Outcome", "Parked", "decision_id"]

GANG_INCOMPLETE = "gang_incomplete"
ELASTIC_GROW = "elastic_grow"
INSUFFICIENT_GPU = "insufficient_gpu"
NO_MATCHING_GPU_TYPE = "no_matching_gpu_type"
REFUSED_BY_BINDER = "refused_by_binder"
QUOTA_EXCEEDED = "quota_exceeded"


def decision_id(uid: str, attempt: int) -> str:
    """Deterministic: a redelivered pending pod yields the same id, so JetStream stores it once."""
    return f"{uid}/{attempt}"


@dataclass(frozen=True, slots=True)
class Decided:
    """`entry` is reserved on `node`/`gpus` (GPU slots); `victims` are evicted for it.

    `permit` is set while a Permit plugin makes the decision wait (quota, answered over the bus):
    the session's statement is still open, and the planner's `allow` / `reject` close it."""

    entry: PodEntry
    decision_id: str
    node: str
    gpus: tuple[int, ...]
    score: float
    """the weighted score mapped onto 0..100"""
    gpu_mem: int = 0
    """GPU memory the pod holds on each GPU, MiB"""
    victims: tuple[PodEntry, ...] = ()
    preemption_reason: str = "priority"
    """why the victims go: ``priority`` (a preemption plan) or ``reclaim`` (quota's reclaim plan)"""
    permit: WaitingPod | None = None


@dataclass(frozen=True, slots=True)
class Parked:
    """`entry` waits: `reason` is a code (`UnschedulableReason` values), `message` says more."""

    entry: PodEntry
    reason: str
    message: str
    explanation: PodExplanation | None = None
    unresolvable: bool = False
    retry_after_s: float | None = None


Outcome = Decided | Parked


@dataclass(slots=True)
class Counters:
    pending_seen: int = 0
    duplicates: int = 0
    decided: int = 0
    unschedulable: int = 0
    unresolvable: int = 0
    rejected: int = 0
    retried_decided: int = 0
    gangs_placed: int = 0
    cluster_rebuilds: int = 0
    scheduler_rebuilds: int = 0
    other_cluster: int = 0
    preemptions_planned: int = 0
    victims_planned: int = 0
    fair_reclaims: int = 0
    reservations: int = 0
    elastic_grows: int = 0
    """extra workers of running elastic jobs placed on idle GPUs"""
    elastic_shrinks: int = 0
    """workers beyond their elastic job's minimum named as victims (the job keeps running)"""
