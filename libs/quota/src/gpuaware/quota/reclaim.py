"""Reclaim in quota: whom to stop so that a queue gets back what it is owed.

Where reclaim lives: quota *plans* it (this module, and turns.py for turn-taking); the placement
service asks quota over ``quota.admit`` and *executes* a plan through its scheduling session
(``gpuaware.placement.actions.reclaim``), which also runs the fair-share order's own reclaim for
starved tenants.

Two plans:

* ``reclaim_plan``: a queue inside its guarantee finds the cluster full. It takes pods of queues
  holding more than their guarantee (borrowers) only, in the order that loses the least work
  (``reclaim_order``): lower priority first, checkpointable before not, least progress since the
  last checkpoint, newest first. Pods younger than their queue's ``min_runtime_s`` are kept; their
  reclaim becomes possible at ``started + min_runtime``, reported as the seconds to wait.
* ``fair_reclaim_plan``: above the guarantees, a queue holding less than its water-filled fair
  share takes pods of queues above theirs, in the same order, while the victim's queue stays at
  least as well served as the asker will be: ``(held_v - pod) / share_v >= (held_q + asked) /
  share_q``. That inequality is what stops two queues trading the same GPUs back and forth.

Pure: a ledger, a demand and a time in, victims out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from gpuaware.quota.demand import GPU_MILLI, Allocation, Demand, guarded
from gpuaware.quota.tree import ANY_TYPE, RESOURCES, QueueTree

__all__ = ["Holdings", "fair_reclaim_plan", "reclaim_order", "reclaim_plan"]


class Holdings(Protocol):
    """What a plan reads of the quota ledger (`QuotaLedger`)."""

    tree: QueueTree
    running: dict[str, Allocation]

    def room(self, d: Demand, freed: np.ndarray | None = None) -> bool: ...

    def used(self, queue: str, gpu_type: str = ANY_TYPE, exclude: Iterable[str] = ()) -> np.ndarray: ...

    def fair_shares(self, demand: dict[str, float], now: float | None = None) -> dict[str, float]: ...


def reclaim_order(candidates: Iterable[Allocation], now: float) -> list[Allocation]:
    """Least lost work first: priority, checkpointable first, progress at risk, newest first."""
    return sorted(candidates, key=lambda a: (a.priority, not a.checkpointable, a.progress_at_risk(now),
                                             -a.started_at, a.uid))


def reclaim_plan(ledger: Holdings, queue: str, d: Demand, now: float,
                 exclude: set[str] | None = None) -> tuple[list[Allocation] | None, float | None]:
    """Borrowers' pods to stop so that ``d`` fits: (victims, None) or (None, seconds until a plan
    may exist because of minimum runtimes, or None when none ever will)."""
    exclude = exclude or set()
    cands, waits = [], []
    for a in ledger.running.values():
        if a.uid in exclude or a.queue == queue:
            continue  # a queue does not reclaim from itself
        if d.gpu_type != ANY_TYPE and a.demand.gpu_type != d.gpu_type:
            continue
        min_rt = ledger.tree.specs[a.queue].min_runtime_s
        if now - a.started_at < min_rt:
            waits.append(a.started_at + min_rt - now)
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
             and now - a.started_at >= ledger.tree.specs[a.queue].min_runtime_s
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
