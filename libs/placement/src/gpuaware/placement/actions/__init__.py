"""The actions a placement cycle runs beyond one session's allocate and preempt (Volcano's actions).

    allocate, preempt   session.py: filter, score, reserve, permit; evict lower priorities
    fair_share          the retry pass in the queue order: starved tenants first, then the rest
    reclaim             starved tenants (and quota's plans) take back borrowed GPUs
    backfill            nodes held for starved wide pods; only pods that end in time may use them

Each action runs over sessions on the planner's view and returns the planner's outcomes; the queue
order it follows is the framework's `queue_sort` (queue_order.py), the victims it may take are the
order's rule, and turn-taking (`gpuaware.quota.turns`) is part of that rule.
"""

from gpuaware.placement.actions.backfill import Backfill
from gpuaware.placement.actions.fair_share import fair_share_pass
from gpuaware.placement.actions.reclaim import reclaim, reclaim_for_starved

__all__ = ["Backfill", "fair_share_pass", "reclaim", "reclaim_for_starved"]
