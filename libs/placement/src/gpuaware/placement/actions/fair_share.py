"""The fair-share retry pass: waiting pods in the queue order, starved tenants first.

With the ``fair-share`` queue order (queue_order.py) a retry pass is four steps over the parked and
queued lone pods (gangs are placed before it):

1. the tenants' demand is measured and folded into their owed service (turn-taking);
2. starved tenants' pods are tried first, most starved first;
3. those that found no room reclaim (reclaim.py), and backfill holds nodes for the wide ones left
   waiting (backfill.py); nodes held earlier stay held through this step;
4. everyone else, shortest predicted runtime first, a held node only for pods that end in time.

The pass stops at `limit` decisions; the pods not reached wait for the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuaware.placement.actions.backfill import Backfill
from gpuaware.placement.actions.reclaim import reclaim_for_starved
from gpuaware.placement.ledger import Ledger, PodEntry
from gpuaware.placement.model import NodeSpec
from gpuaware.placement.outcomes import Counters, Decided, Outcome
from gpuaware.placement.queue_order import QueueSort, queue_of

__all__ = ["fair_share_pass"]

Decide = Callable[[Sequence[PodEntry], int], tuple[list[Outcome], int]]
"""one session over the pods, at most the given number of decisions: (outcomes, pods tried)"""


def fair_share_pass(order: QueueSort, singles: list[PodEntry], limit: int, *, ledger: Ledger,
                    specs: dict[str, NodeSpec], now: Callable[[], float], decide: Decide,
                    reclaim: Callable[[str, list[str]], Decided | None], backfill: Backfill,
                    max_reclaims: int, max_reservations: int, counters: Counters) -> tuple[list[Outcome], bool]:
    """The pass (see the module docstring); (outcomes, whether pods were left untried). `now` is the
    world's clock (`Planner.world_now`), read where each step needs it."""
    demand = order.demand(ledger)
    order.observe(demand, now())
    ordered = order.sort(singles, demand)
    # the order puts priority first, so a starved tenant's pod need not lead: split by tenant, not by position
    starving = {t for t in {queue_of(e) for e in ordered} if order.starved(t, demand)}
    starved = [e for e in ordered if queue_of(e) in starving]
    rest = [e for e in ordered if queue_of(e) not in starving]
    got, tried = decide(starved, limit)
    reclaimed = reclaim_for_starved(order, ledger, starved[:tried], now(), max_reclaims, reclaim)
    counters.fair_reclaims += len(reclaimed)
    got += reclaimed
    counters.reservations += backfill.renew(order, ledger, specs, starved[:tried], now, max_reservations)
    left = max(0, limit - sum(isinstance(o, Decided) for o in got))
    if tried < len(starved) or not rest:
        return got, tried < len(starved) or bool(rest)
    later, n = decide(rest, left)
    return got + later, n < len(rest)
