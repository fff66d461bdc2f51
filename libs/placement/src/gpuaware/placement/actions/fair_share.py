"""The fair-share retry pass: waiting pods in the queue order, starved tenants first.

With the ``fair-share`` queue order (queue_order.py) a retry pass is four steps over the parked and
queued lone pods (gangs are placed before it):

1. the tenants' demand is measured and folded into their owed service (turn-taking);
2. starved tenants' pods are tried first, most starved first;
3. those that found no room reclaim (reclaim.py), and backfill holds nodes for the wide ones left
   waiting (backfill.py); nodes held earlier stay held through this step;
4. everyone else, shortest predicted runtime first, a held node only for pods that end in time; when
   the host passes `grows` (elastic jobs' waiting workers beyond their minimum), the grows of tenants
   below their share go before the pods of tenants at or above theirs (a GPU goes to the tenant owed it
   before a tenant that has its share starts another job), the other grows last.

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

Grow = Callable[[Sequence[PodEntry], int], tuple[list[Outcome], bool]]
"""the host's grows of elastic jobs for these waiting workers, at most the given number of decisions:
(outcomes, whether some were left untried)"""

Step = Callable[[int], tuple[list[Outcome], bool]]
"""a step of the pass, at most the given number of decisions: (outcomes, whether some were left untried)"""


def fair_share_pass(order: QueueSort, singles: list[PodEntry], limit: int, *, ledger: Ledger,
                    specs: dict[str, NodeSpec], now: Callable[[], float], decide: Decide,
                    reclaim: Callable[[str, list[str]], Decided | None], backfill: Backfill,
                    max_reclaims: int, max_reservations: int, counters: Counters,
                    grows: Sequence[PodEntry] = (), grow: Grow | None = None) -> tuple[list[Outcome], bool]:
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
    if tried < len(starved):
        return got, True
    def owed(e: PodEntry) -> bool:
        return demand.attained(queue_of(e)) < 1.0 - 1e-9

    owed_grows = [e for e in grows if owed(e)] if grow is not None else []
    steps: list[Step] = []
    if owed_grows:
        steps += [_deciding(decide, [e for e in rest if owed(e)]), _growing(grow, owed_grows),
                  _deciding(decide, [e for e in rest if not owed(e)])]
    else:
        steps.append(_deciding(decide, rest))
    if grow is not None:
        steps.append(_growing(grow, [e for e in grows if not owed(e)]))
    for step in steps:
        later, more = step(left)
        got += later
        left = max(0, left - sum(isinstance(o, Decided) for o in later))
        if more:
            return got, True
    return got, False


def _deciding(decide: Decide, entries: list[PodEntry]) -> Step:
    """`decide` over `entries` as one step of the pass: (outcomes, whether some were left untried)."""
    def step(limit: int) -> tuple[list[Outcome], bool]:
        if not entries:
            return [], False
        out, tried = decide(entries, limit)
        return out, tried < len(entries)
    return step


def _growing(grow: Grow | None, entries: list[PodEntry]) -> Step:
    """`grow` over `entries` as one step of the pass."""
    def step(limit: int) -> tuple[list[Outcome], bool]:
        if grow is None or not entries:
            return [], False
        return grow(entries, limit)
    return step
