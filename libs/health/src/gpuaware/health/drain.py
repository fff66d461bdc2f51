"""Drain recommendation: which pods to move off a GPU expected to fail, and in what order (pure).

Order: checkpointable pods first (a checkpoint then a restart elsewhere loses nothing), then the
others by least work lost (a pod that started a minute ago loses a minute; one running for two days
may still finish, or is better moved last once capacity for it is found); ties go to the higher
priority (critical work leaves the failing GPU sooner), then to the uid (deterministic).

When: a quarantined GPU (or one whose risk reached ``risk_quarantine``) drains every pod, urgently;
a degraded GPU keeps work that tolerates failure and drains only the pods that do not (not
checkpointable), not urgently; a healthy GPU drains nothing. The placement side decides *where*
they go; this only says *what* and *in which order*.

Which pods a GPU holds (``PodsOnGpus``): what placement decided, until the binder reports the pod
gone (finished, preempted, or its binding failed). The two arrive on different streams, so a pod
reported gone before its decision is read (a replay after a restart) stays gone: the last
``forget_after`` gone uids are remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpuaware.health.config import HealthConfig
from gpuaware.health.tracker import Assessment
from gpuaware.schemas import HealthState

__all__ = ["DrainPlan", "DrainStep", "PodOnGpu", "PodsOnGpus", "drain_order", "recommend_drain"]


@dataclass(frozen=True, slots=True)
class PodOnGpu:
    uid: str
    checkpointable: bool = False
    priority: int = 0
    running_s: float = 0.0
    """how long the pod has run (the work a non-checkpointable pod loses when moved)"""
    name: str = ""
    namespace: str = ""


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


@dataclass(frozen=True, slots=True)
class _Placed:
    pod: PodOnGpu
    gpus: tuple[str, ...]
    started_at: float


class PodsOnGpus:
    """Which pods hold which GPUs (see the module docstring); ``on(gpu, now)`` for a drain plan."""

    def __init__(self, *, forget_after: int = 100_000) -> None:
        self.forget_after = forget_after
        self._pods: dict[str, _Placed] = {}
        self._by_gpu: dict[str, set[str]] = {}
        self._gone: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pods)

    def place(self, pod: PodOnGpu, gpus: Iterable[str], started_at: float) -> bool:
        """A pod placed on ``gpus`` at ``started_at``; False when it is already gone (nothing kept)."""
        if pod.uid in self._gone:
            return False
        self.remove(pod.uid, remember=False)
        placed = _Placed(pod=pod, gpus=tuple(dict.fromkeys(gpus)), started_at=started_at)
        self._pods[pod.uid] = placed
        for g in placed.gpus:
            self._by_gpu.setdefault(g, set()).add(pod.uid)
        return True

    def remove(self, uid: str, *, remember: bool = True) -> bool:
        """The pod left its GPUs (finished, preempted, binding failed); True when it was held."""
        if remember:
            self._gone[uid] = None
            self._gone.move_to_end(uid)
            while len(self._gone) > self.forget_after:
                self._gone.popitem(last=False)
        placed = self._pods.pop(uid, None)
        if placed is None:
            return False
        for g in placed.gpus:
            uids = self._by_gpu.get(g)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_gpu[g]
        return True

    def on(self, gpu_uuid: str, now: float) -> list[PodOnGpu]:
        """The pods holding ``gpu_uuid``, each with how long it has run by ``now``."""
        out = []
        for uid in sorted(self._by_gpu.get(gpu_uuid, ())):
            p = self._pods[uid]
            out.append(replace(p.pod, running_s=max(0.0, now - p.started_at)))
        return out
