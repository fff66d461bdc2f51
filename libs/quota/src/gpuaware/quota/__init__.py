"""gpuaware.quota: hierarchical queues, admission, fair share over time, reclaim, chargeback (pure).

    tree = validate(load_config(path))           # QuotaConfigError lists every reason; old tree stays
    ledger = QuotaLedger(tree)                   # one per cluster (the service, a bench, the twin)
    ledger.bind(Allocation(...)); ledger.release(uid, now)
    ledger.preempted(uid, at); ledger.finished(uid, now)  # preemptions per pod, across its re-queues
    a = ledger.admit(queue, demand_of(...), now, node=...)   # Admission: admitted, reason, reclaim
    ledger.order_key(queue, now)                 # decayed weighted DRF: who is served next
    ledger.jain(demand_by_queue, now)            # Jain's index of held vs entitled
    reclaim_plan(ledger, queue, demand, now)     # borrowers' pods to stop for a guaranteed queue
    turns.plan(ledger, queue, demand, shares, now)  # a turn for a queue kept below its share
    may_take(tree, allocation, now)              # past its queue's lease, below the cap on preemptions
    charge(intervals, since, until, by="tenant") # GPU-seconds, GPU-memory-seconds

Modules: ``tree`` (the declarative file, the GPUQueue spec, the validator, time windows),
``fairshare`` (decay, dominant shares, water-filling, Jain), ``demand`` (what a pod asks and holds),
``ledger`` (admission, borrowing, partitions, preemption counts), ``reclaim`` (reclaim plans:
guarantees and fair share; victims' lease and cap),
``turns`` (turn-taking for queues kept below their share), ``backfill`` (EASY backfilling),
``accounting`` (chargeback arithmetic).
"""

from gpuaware.quota.accounting import Interval, charge, rows_to_csv
from gpuaware.quota.backfill import Running, Waiting, easy_backfill, shadow
from gpuaware.quota.demand import Allocation, Demand, demand_of
from gpuaware.quota.fairshare import DecayedUsage, dominant_share, jain_index, normalised_shares, water_fill
from gpuaware.quota.ledger import Admission, QuotaLedger
from gpuaware.quota.reclaim import (
    capped,
    fair_reclaim_plan,
    lease_left,
    may_take,
    reclaim_order,
    reclaim_plan,
)
from gpuaware.quota.tree import (
    ANY_TYPE,
    RESOURCES,
    Amounts,
    Partition,
    QueueSpec,
    QueueTree,
    QuotaConfig,
    QuotaConfigError,
    TimeWindow,
    load_config,
    validate,
)
from gpuaware.quota.turns import OwedService, TurnTaking

__all__ = [
    "ANY_TYPE",
    "RESOURCES",
    "Admission",
    "Allocation",
    "Amounts",
    "DecayedUsage",
    "Demand",
    "Interval",
    "OwedService",
    "Partition",
    "QueueSpec",
    "QueueTree",
    "QuotaConfig",
    "QuotaConfigError",
    "QuotaLedger",
    "Running",
    "TimeWindow",
    "TurnTaking",
    "Waiting",
    "capped",
    "charge",
    "demand_of",
    "dominant_share",
    "easy_backfill",
    "fair_reclaim_plan",
    "jain_index",
    "lease_left",
    "load_config",
    "may_take",
    "normalised_shares",
    "reclaim_order",
    "reclaim_plan",
    "rows_to_csv",
    "shadow",
    "validate",
    "water_fill",
]
