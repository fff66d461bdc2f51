"""The knobs of one placement instance's planner (the placement service fills them from its settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaware.placement.cache import PickObserver
from gpuaware.placement.extensions import PermitPlugin
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.framework import FilterPlugin

__all__ = ["PlannerConfig"]


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    policy_name: str
    policy_config: Mapping[str, Any]
    typical: TypicalPods | None = None
    """the request mix the fragmentation scores assume; None: `prior`, then learned"""
    prior: Mapping[tuple[int, int, int, str], float] = field(default_factory=dict)
    learn_typical: bool = True
    typical_min_pods: int = 200
    typical_window: int = 5000
    typical_drift: float = 0.15
    seed: int = 0
    max_tombstones: int = 200_000
    preemption: bool = True
    preemption_cooldown_s: float = 30.0
    max_victims: int = 16
    max_refused_nodes: int = 4
    extra_filters: tuple[FilterPlugin, ...] = ()
    """built Filter plugins every profile gets on top of its own (strict partitions from the quota tree)"""
    permits: tuple[PermitPlugin, ...] = ()
    """built Permit plugins every profile gets on top of its own (the service's quota and publish gates)"""
    observers: tuple[PickObserver, ...] = ()
    """shown the score cache's decisions, whatever the profile (the service's forecast-effect counter)"""
    queue_order: str = "priority"
    """the order parked pods are retried in: ``priority`` or ``fair-share`` (queue_order.py)"""
    starved_below: float = 1.0
    """fair-share: a tenant running less than this fraction of its share goes first, and may reclaim"""
    duration_default_s: float = 3600.0
    """fair-share: the runtime of a pod nobody predicted yet"""
    reclaim_min_runtime_s: float = 600.0
    """fair-share: a running pod is not reclaimed before it ran this long (world seconds since its bind)"""
    max_reclaims: int = 4
    """fair-share: reclaims planned per retry pass at most"""
    turn_due: float = 0.0
    """fair-share: turn-taking (queue_order.py; 0: off): a tenant owed this fraction of its share lately
    is starved, and may also reclaim from tenants at or above theirs not owed a turn"""
    turn_lease_s: float = 900.0
    """fair-share: a pod runs at least this long (world seconds since its bind) before a turn takes it"""
    max_reservations: int = 0
    """fair-share: nodes held for starved tenants' wide pods at once (actions/backfill.py); none by default"""
