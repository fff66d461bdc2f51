"""Drain recommendation: which pods to move off a GPU expected to fail, and in what order (pure).

Order: checkpointable pods first (a checkpoint then a restart elsewhere loses nothing), then the
others by least work lost (a pod that started a minute ago loses a minute; one running for two days
may still finish, or is better moved last once capacity for it is found); ties go to the higher
priority (critical work leaves the failing GPU sooner), then to the uid (deterministic).

When: a quarantined GPU (or one whose risk reached ``risk_quarantine``) drains every pod, urgently;
a degraded GPU keeps work that tolerates failure and drains only the pods that do not (not
checkpointable), not urgently; a healthy GPU drains nothing. The placement side decides *where*
they go; this only says *what* and *in which order*.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuaware.health.config import HealthConfig
from gpuaware.health.tracker import Assessment
from gpuaware.schemas import HealthState

__all__ = ["DrainPlan", "DrainStep", "PodOnGpu", "drain_order", "recommend_drain"]


@dataclass(frozen=True, slots=True)
class PodOnGpu:
    uid: str
    checkpointable: bool = False
    priority: int = 0
    running_s: float = 0.0
    """how long the pod has run (the work a non-checkpointable pod loses when moved)"""


@dataclass(frozen=True, slots=True)
class DrainStep:
    pod: PodOnGpu
    order: int
    """0 = move first"""
    work_lost_s: float
    """0 for a checkpointable pod, else its running time"""


@dataclass(frozen=True, slots=True)
class DrainPlan:
    gpu_uuid: str
    urgent: bool
    """quarantined or predicted to fail within the horizon: move everything now"""
    reason: str
    steps: tuple[DrainStep, ...]

    @property
    def uids(self) -> list[str]:
        return [s.pod.uid for s in self.steps]


def drain_order(pods: Iterable[PodOnGpu]) -> list[DrainStep]:
    """Every pod, in the order to move them (see the module docstring)."""

    def lost(p: PodOnGpu) -> float:
        return 0.0 if p.checkpointable else max(0.0, p.running_s)

    ordered = sorted(pods, key=lambda p: (not p.checkpointable, lost(p), -p.priority, p.uid))
    return [DrainStep(pod=p, order=i, work_lost_s=lost(p)) for i, p in enumerate(ordered)]


def recommend_drain(a: Assessment, pods: Iterable[PodOnGpu],
                    config: HealthConfig | None = None) -> DrainPlan | None:
    """The plan for the GPU of ``a``, or None when nothing needs to move."""
    cfg = config or HealthConfig()
    pods = list(pods)
    failing = a.state is HealthState.QUARANTINED or a.risk >= cfg.states.risk_quarantine
    if failing:
        chosen = pods
        why = "quarantined" if a.state is HealthState.QUARANTINED else f"failure risk {a.risk:.0%}"
    elif a.state is HealthState.DEGRADED:
        chosen = [p for p in pods if not p.checkpointable]
        why = "degraded: only work that tolerates failure stays"
    else:
        return None
    if not chosen:
        return None
    detail = ", ".join(r for r in a.reasons if r not in ("recovering", "manual_cordon"))
    return DrainPlan(gpu_uuid=a.gpu_uuid, urgent=failing, reason=f"{why} ({detail})" if detail else why,
                     steps=tuple(drain_order(chosen)))
