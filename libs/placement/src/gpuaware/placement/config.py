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
    victim_min_run_s: float = 0.0
    """a pod bound less than this long ago is no victim of a preemption or reclaim (a lease; spares excepted)"""
    victim_max_requeues: int | None = None
    """a pod re-queued this many times (its attempt) is no victim any more: a cap on how often one job is
    stopped (spares excepted: a shrink stops nothing); None: no cap"""
    max_refused_nodes: int = 4
    extra_filters: tuple[FilterPlugin, ...] = ()
    """built Filter plugins every profile gets on top of its own (strict partitions from the quota tree)"""
    permits: tuple[PermitPlugin, ...] = ()
    """built Permit plugins every profile gets on top of its own (the service's quota and publish gates)"""
    observers: tuple[PickObserver, ...] = ()
    """shown the score cache's decisions, whatever the profile (the service's forecast-effect counter)"""
    max_reclaims: int = 4
    """fair-share (the profile's ``queue_sort``): reclaims planned per retry pass at most"""
    max_swaps: int = 16
    """elastic jobs: grows of tenants below their share that take a spare of a tenant above its share,
    per retry pass at most (elastic.py; 0: none)"""
    resize_hold_s: float = 300.0
    """elastic jobs: a job shrunk less than this long ago does not grow, and a job grown less than this
    long ago gives no spare to a swap (either reversal costs both restarts and undoes the move it
    follows; a waiting pod's preemption or reclaim may still take the spare). 0: no hold"""
    max_reservations: int = 0
    """fair-share: nodes held for starved tenants' wide pods at once (actions/backfill.py); none by default"""
