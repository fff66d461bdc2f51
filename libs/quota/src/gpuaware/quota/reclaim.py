"""Reclaim in quota: whom to stop so that a queue gets back what it is owed.

Where reclaim lives: quota *plans* it (this module, and turns.py for turn-taking); the placement
service asks quota over ``quota.admit`` and *executes* a plan through its scheduling session
(``gpuaware.placement.actions.reclaim``), which also runs the fair-share order's own reclaim for
starved tenants.

Two plans:

* ``reclaim_plan``: a queue inside its guarantee finds the cluster full. It takes pods of queues
  holding more than their guarantee (borrowers) only, in the order that loses the least work
  (``reclaim_order``): lower priority first, checkpointable before not, least preempted before,
  least progress since the last checkpoint, newest first. Pods inside their lease are kept; their
  reclaim becomes possible when the lease ends, reported as the seconds to wait.
* ``fair_reclaim_plan``: above the guarantees, a queue holding less than its water-filled fair
  share takes pods of queues above theirs, in the same order, while the victim's queue stays at
  least as well served as the asker will be: ``(held_v - pod) / share_v >= (held_q + asked) /
  share_q``. That inequality is what stops two queues trading the same GPUs back and forth.

Two protections for victims, the same in both plans and in turns (``turns.py``), through
``may_take``:

* the *lease*: a pod runs its queue's ``min_runtime_s`` (``QueueTree.min_runtime``: inherited from
  the parent when unset) since it last started before any plan names it (``lease_left``);
* the *cap*: a pod preempted ``max_preemptions_per_pod`` times (the tree's; ``QuotaLedger`` counts
  preemptions per pod across its re-queues) is never named again (``capped``).

Neither yields to a guarantee, and that is deliberate. The lease only delays: a queue inside its
guarantee gets its pods back once the lease ends, and ``reclaim_plan`` says when
(``retry_after_s``), so a guarantee is still honoured within a bounded time -- the longest lease of
the queues that borrow from it, which the tree's owner chose. The cap is absolute: it is a promise to
the job ("stopped at most N times", what its owner budgets checkpoints and restarts for), and a
promise that breaks whenever a guarantee is short is no promise. A guarantee then waits for a capped
borrower to finish, as it would in a cluster that never preempts; ``reclaim_order`` takes the least
preempted pods first, so caps are reached late. An operator who wants guarantees to win sets
``max_preemptions_per_pod: null``.

Pure: a ledger, a demand and a time in, victims out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from gpuaware.quota.demand import GPU_MILLI, Allocation, Demand, guarded
from gpuaware.quota.tree import ANY_TYPE, RESOURCES, QueueTree

__all__ = ["Holdings", "capped", "fair_reclaim_plan", "lease_left", "may_take", "reclaim_order", "reclaim_plan"]


class Holdings(Protocol):
    """What a plan reads of the quota ledger (`QuotaLedger`)."""

    tree: QueueTree
    running: dict[str, Allocation]

    def room(self, d: Demand, freed: np.ndarray | None = None) -> bool: ...

    def used(self, queue: str, gpu_type: str = ANY_TYPE, exclude: Iterable[str] = ()) -> np.ndarray: ...

    def fair_shares(self, demand: dict[str, float], now: float | None = None) -> dict[str, float]: ...


def lease_left(tree: QueueTree, a: Allocation, now: float) -> float:
    """Seconds until pod ``a`` has run its queue's lease since it last started; 0 once it has."""
    return max(0.0, a.started_at + tree.min_runtime(a.queue) - now)


def capped(tree: QueueTree, a: Allocation) -> bool:
    """Was pod ``a`` preempted as often as the tree allows? Then no plan names it again."""
    cap = tree.config.max_preemptions_per_pod
    return cap is not None and a.preemptions >= cap


def may_take(tree: QueueTree, a: Allocation, now: float) -> bool:
    """May a plan name pod ``a`` now: past its lease, below the cap?"""
    return not capped(tree, a) and lease_left(tree, a, now) == 0


def reclaim_order(candidates: Iterable[Allocation], now: float) -> list[Allocation]:
    """Least lost work first: priority, checkpointable first, least preempted, progress at risk,
    newest first."""
    return sorted(candidates, key=lambda a: (a.priority, not a.checkpointable, a.preemptions,
                                             a.progress_at_risk(now), -a.started_at, a.uid))


def reclaim_plan(ledger: Holdings, queue: str, d: Demand, now: float,
                 exclude: set[str] | None = None) -> tuple[list[Allocation] | None, float | None]:
    """Borrowers' pods to stop so that ``d`` fits: (victims, None) or (None, seconds until a plan
    may exist because of leases, or None when none will as things stand)."""
    exclude = exclude or set()
    cands, waits = [], []
    for a in ledger.running.values():
        if a.uid in exclude or a.queue == queue:
            continue  # a queue does not reclaim from itself
        if d.gpu_type != ANY_TYPE and a.demand.gpu_type != d.gpu_type:
            continue
        if capped(ledger.tree, a):
            continue
        if (wait := lease_left(ledger.tree, a, now)) > 0:
            waits.append(wait)
            continue
        cands.append(a)
    victims: list[Allocation] = []
    freed = np.zeros(len(RESOURCES), dtype=np.int64)
    taken: set[str] = set()
    for a in reclaim_order(cands, now):
        if ledger.room(d, freed):
            break
        if not borrowing(ledger, a.queue, taken, now):
            continue
        victims.append(a)
        taken.add(a.uid)
        freed += a.demand.vector
    if ledger.room(d, freed):
        return victims, None
    return None, (min(waits) if waits else None)


def borrowing(ledger: Holdings, queue: str, taken: set[str], now: float) -> bool:
    """Does ``queue`` (after the pods already taken) hold more than its guarantee somewhere up its
    chain below the root? Only such pods are reclaimable."""
    chain = ledger.tree.ancestors(queue)
    chain = chain[:-1] if len(chain) > 1 else chain
    for q in chain:
        if not ledger.tree.has_guarantee(q, now):
            continue
        used = ledger.used(q, exclude=taken)
        g = ledger.tree.guaranteed(q, ANY_TYPE, now)
        if np.any((used > g) & guarded(g)):
            return True
    return False


def fair_reclaim_plan(ledger: Holdings, queue: str, d: Demand, demand: Mapping[str, float], now: float,
                      exclude: set[str] | None = None) -> list[Allocation] | None:
    """Pods of queues above their fair share (``ledger.fair_shares(demand)``, GPU milli) that make room
    for ``d`` of a queue below its own, as the module docstring says. None when no such plan frees
    enough room."""
    exclude = exclude or set()
    fs = ledger.fair_shares(dict(demand), now)
    mine = fs.get(queue, 0.0)
    held = float(ledger.used(queue)[GPU_MILLI])
    asked = float(d.vector[GPU_MILLI])
    if mine <= 0 or held >= mine:
        return None
    after_q = (held + asked) / mine
    taken: dict[str, float] = {}
    victims: list[Allocation] = []
    freed = np.zeros(len(RESOURCES), dtype=np.int64)
    cands = [a for a in ledger.running.values() if a.uid not in exclude and a.queue != queue
             and may_take(ledger.tree, a, now)
             and (d.gpu_type == ANY_TYPE or a.demand.gpu_type == d.gpu_type)]
    used_by = {q: float(ledger.used(q)[GPU_MILLI]) for q in {a.queue for a in cands}}
    for a in reclaim_order(cands, now):
        if ledger.room(d, freed):
            break
        share = fs.get(a.queue, 0.0)
        left = used_by[a.queue] - taken.get(a.queue, 0.0) - float(a.demand.vector[GPU_MILLI])
        if share > 0 and left / share < after_q:
            continue
        victims.append(a)
        taken[a.queue] = taken.get(a.queue, 0.0) + float(a.demand.vector[GPU_MILLI])
        freed += a.demand.vector
    return victims if ledger.room(d, freed) else None
