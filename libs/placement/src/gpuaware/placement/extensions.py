"""The extension points a scheduling session calls around filter and score, with kube-scheduler's meaning.

    Filter      framework.FilterPlugin: a mask over nodes
    Score       framework.ScorePlugin (+ NormalizePlugin): 0..100 per feasible node
    Permit      after a node and GPUs are chosen: allow, deny with a reason, allow with a reclaim
                plan (pods to evict so the owner of borrowed capacity gets it back), or wait: the
                answer comes from outside the session (session.WaitingPod)
    PostFilter  when no node fits: find a way to make one fit (preemption)

kube-scheduler's PreFilter and Reserve points are left out: no plugin of ours needs them (quota is a
Permit, health a Filter and a Score), and a point without a production plugin is code nobody
exercises.

Every plugin works on the session's snapshot and never does I/O: a permit that must ask another
service (quota over NATS) answers *wait*, and the caller asks; its answer allows or rejects the
waiting pod, which commits or discards the statement the session left open.

A plugin is a small class with a `name` and one method per point it implements; the registry
(registry.py) builds them from a profile, e.g. ``{"post_filter": [{"name": "default-preemption",
"args": {"max_victims": 16}}]}``. `DefaultPreemption` below is the built-in PostFilter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import CycleState, Decision, Scheduler
from gpuaware.placement.model import PodRequest
from gpuaware.placement.preempt import PreemptionPlan, Victim, plan_preemption

__all__ = [
    "ALLOW",
    "WAIT",
    "DefaultPreemption",
    "PermitGate",
    "PermitPlugin",
    "PermitVerdict",
    "PostFilterPlugin",
]


@dataclass(frozen=True, slots=True)
class PermitVerdict:
    """A Permit plugin's answer. `reclaim` names running pods (uids) to evict first when allowed;
    `wait` holds the pod staged until the caller allows or rejects it (`session.WaitingPod`)."""

    allowed: bool
    reason: str = ""
    retry_after_s: float | None = None
    reclaim: tuple[str, ...] = ()
    wait: bool = False


ALLOW = PermitVerdict(True)
WAIT = PermitVerdict(True, wait=True)


@runtime_checkable
class PermitPlugin(Protocol):
    name: ClassVar[str]

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        ...


@runtime_checkable
class PermitGate(Protocol):
    """A Permit plugin that can tell, before a pod's scheduling cycle, that it would refuse it whatever
    node and GPUs the cycle chose (kube-scheduler's queueing hints serve the same end): the retry pass
    leaves such a pod parked instead of filtering, scoring and staging it only to be refused. It must
    never answer True for a pod the plugin could allow."""

    def certainly_denied(self, pod: PodRequest, snap: Snapshot) -> bool:
        ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: ClassVar[str]

    def post_filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, scheduler: Scheduler,
                    running: Iterable[Victim], exclude: np.ndarray | None) -> PreemptionPlan | None:
        """A plan that makes the pod fit (victims to evict, node and GPUs), or None."""
        ...


class DefaultPreemption:
    """kube-scheduler's DefaultPreemption plus the cost of lost GPU work (preempt.py has the rules).

    A pod of priority <= 0 never stops anyone, but takes back spares (elastic jobs' workers beyond their
    minimum: a shrink) of no higher priority than its own; a pod is planned for at most once per
    `cooldown_s` of the caller's clock (a pod no plan can help then costs nothing on every retry pass).

    ``{"post_filter": [{"name": "default-preemption", "args": {"max_victims": 16, "cooldown_s": 30}}]}``
    """

    name: ClassVar[str] = "default-preemption"

    def __init__(self, max_victims: int = 16, cooldown_s: float = 30.0, max_candidates: int = 64,
                 clock: Callable[[], float] | None = None, max_remembered: int = 100_000,
                 planned_at: dict[str, float] | None = None) -> None:
        self.max_victims = max_victims
        self.cooldown_s = cooldown_s
        self.max_candidates = max_candidates
        self.clock = clock
        self.max_remembered = max_remembered
        self._planned_at = {} if planned_at is None else planned_at
        """pod -> when it was last planned for (the caller's, so it outlives a rebuilt profile)"""

    def forget(self, pod: str) -> None:
        """The pod left: its cooldown goes with it."""
        self._planned_at.pop(pod, None)

    def post_filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, scheduler: Scheduler,
                    running: Iterable[Victim], exclude: np.ndarray | None) -> PreemptionPlan | None:
        running = [v for v in running if v.priority < pod.priority or (v.spare and v.priority <= pod.priority)]
        if not running:
            return None
        if self.clock is not None and self.cooldown_s > 0:
            now = self.clock()
            if now - self._planned_at.get(pod.name, -1e18) < self.cooldown_s:
                return None
            self._planned_at[pod.name] = now
            if len(self._planned_at) > self.max_remembered:
                self._planned_at.pop(next(iter(self._planned_at)))
        return plan_preemption(pod, snap, scheduler, running, max_victims=self.max_victims,
                               max_candidates=self.max_candidates, exclude=exclude)
