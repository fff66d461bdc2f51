"""Reclaim: a pod takes back GPUs that others borrowed, by evicting pods it is allowed to name.

Where reclaim lives -- who names the victims, and this module, which executes every plan:

* quota plans it for a queue owed its guarantee or its fair share (``gpuaware.quota.reclaim``) and
  for a queue owed a turn (``gpuaware.quota.turns``); the placement service asks over
  ``quota.admit`` (services/placement quota_permit.py) and hands the plan to `Planner.reclaim`;
* the fair-share queue order names what a starved tenant may take (`QueueSort.reclaim_victims`,
  queue_order.py); `reclaim_for_starved` below runs it in the fair-share pass.

Either way the session evicts the fewest named pods on one node that make room, chosen by the same
cost as a preemption (preempt.py), never a gang member and never a pod another plan of the same
session already evicts. The victims leave with reason ``reclaim`` (checkpointed first when they can).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from gpuaware.placement.ledger import RETRIED, Ledger, Phase, PodEntry
from gpuaware.placement.model import PodRequest
from gpuaware.placement.preempt import plan_preemption
from gpuaware.placement.queue_order import QueueSort, queue_of
from gpuaware.placement.session import Placed, Session, Statement

__all__ = ["reclaim", "reclaim_for_starved"]

T = TypeVar("T")


def reclaim(session: Session, pod: PodRequest, named: Iterable[str], max_victims: int = 16,
            statement: Statement | None = None) -> Placed | None:
    """Place `pod` by evicting only pods of `named` (whatever their priority): the fewest on one node.
    None when they cannot make room."""
    if session.running is None:
        return None
    wanted = set(named)
    candidates = [v for v in session.candidates() if v.uid in wanted]
    if not candidates:
        return None
    plan = plan_preemption(pod, session.snapshot, session.framework.scheduler.inner, candidates,
                           max_victims=max_victims, exclude=session.excluded(pod), eligible=lambda v: not v.gang)
    return None if plan is None else session.stage(pod, plan, statement)


def reclaim_for_starved(order: QueueSort, ledger: Ledger, tried: Sequence[PodEntry], now: float,
                        max_reclaims: int, place: Callable[[str, list[str]], T | None]) -> list[T]:
    """Starved tenants' pods the pass could not place evict what the order allows: at most
    `max_reclaims` per pass and four times as many tries (each plans a preemption), the tenants'
    demand recomputed after each reclaim; a tenant and priority with no victims is not asked again.
    `place(uid, victims)` executes one (`Planner.reclaim`); its non-None results are returned."""
    out: list[T] = []
    tries = 0
    nothing: set[tuple[str, int]] = set()
    demand = order.demand(ledger)
    holding = [e for e in ledger if e.phase == Phase.BOUND]
    for entry in tried:
        if len(out) >= max_reclaims or tries >= 4 * max_reclaims:
            break
        req = entry.request
        if entry.phase not in RETRIED or req is None or (queue_of(entry), req.priority) in nothing:
            continue
        victims = order.reclaim_victims(entry, holding, demand, now)
        if not victims:
            nothing.add((queue_of(entry), req.priority))
            continue
        tries += 1
        placed = place(entry.uid, victims)
        if placed is not None:
            out.append(placed)
            demand = order.demand(ledger)
            holding = [e for e in ledger if e.phase == Phase.BOUND]
    return out
