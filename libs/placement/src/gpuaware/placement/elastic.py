"""Elastic jobs: gangs that run with any number of workers between their minimum and their maximum.

An elastic job (torchrun's ``--nnodes=MIN:MAX``, KAI's pods above ``minMember``) is a gang whose pods
are its workers: its controller creates ``gang_max_members`` of them. Placement treats the two parts
of such a gang differently:

* the **core** -- ``gang_min_members`` workers -- is placed all or none, like any gang (one worker for
  a minimum of 1: then a lone pod, which may preempt and reclaim like one);
* every worker beyond the core is a **grow**: never placed by preempting or reclaiming (only a swap: a
  grow of a tenant below its share may take a spare of a tenant that keeps its share), and tried after
  the other waiting pods of a retry pass -- except those of tenants at or above their fair share, which
  a grow of a tenant below its share goes before (a GPU goes to the tenant owed it rather than to
  another job of a tenant that has its share);
* a running worker beyond the core is a **spare**: the first a preemption, a reclaim or a turn takes
  (a **shrink**: the job keeps running on its core, paying a restart at its new world size rather
  than a stop), and it is exempt from the preemption cap and the lease that protect stopped jobs.

Which running workers are spares is computed, not remembered: of a gang's workers holding GPUs, the
newest beyond the minimum (so a shrink undoes the latest grow first). Which waiting worker is a grow
likewise: its gang already holds its minimum.

The planner holds a job still after a move (`resize_hold_s`): a job shrunk moments ago does not grow
back, and a job grown moments ago gives no spare to a swap -- either reversal would cost two restarts
and undo the move before it.

The grow order (`grow_order`): GPUs go where they are worth most -- by default the narrowest job
first (a concave speedup gives its next worker the largest gain); a host that knows each job's
measured throughput passes `gain(uid, width)` (the marginal throughput of one more worker) and
tenants below their fair share come first either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gpuaware.placement.entries import HOLDING, PodEntry

__all__ = ["GainFn", "grow_order", "holding_by_gang", "is_elastic", "spares", "spares_of"]

GainFn = Callable[[str, int], float]
"""(worker uid, its job's width now) -> what one more worker adds (higher first; 0 or less: not worth the
restart a resize costs, the worker does not grow now)"""


def is_elastic(entry: PodEntry) -> bool:
    return entry.request is not None and entry.request.elastic


def _core(entry: PodEntry) -> int:
    assert entry.request is not None
    return max(1, entry.request.gang_min_members)


def holding_by_gang(entries: Iterable[PodEntry]) -> dict[str, list[PodEntry]]:
    """Elastic gangs' workers that hold GPUs (decided or bound, not leaving), oldest first."""
    out: dict[str, list[PodEntry]] = {}
    for e in entries:
        if e.phase in HOLDING and not e.evicting and is_elastic(e):
            assert e.request is not None
            out.setdefault(e.request.gang_id, []).append(e)
    for members in out.values():
        members.sort(key=lambda e: (e.since, e.seq, e.uid))
    return out


def spares(entries: Iterable[PodEntry]) -> set[str]:
    """The running workers beyond their gang's minimum, newest first taken: a shrink evicts these."""
    return spares_of(holding_by_gang(entries))


def spares_of(holding: dict[str, list[PodEntry]]) -> set[str]:
    """`spares` of gangs already grouped by `holding_by_gang`."""
    out: set[str] = set()
    for members in holding.values():
        extra = len(members) - _core(members[0])
        if extra > 0:
            out.update(e.uid for e in members[-extra:])
    return out


def grow_order(grows: Sequence[PodEntry], width: dict[str, int], *, below_share: Callable[[PodEntry], bool],
               gain: GainFn | None = None) -> list[PodEntry]:
    """Waiting workers of running elastic jobs in the order they get idle GPUs: tenants at or below their
    fair share first, then the largest marginal gain (`gain`, or the narrowest job), then arrival. A
    job's k-th waiting worker is valued at the width it would add to (its width now + k - 1), so one
    pass spreads idle GPUs across jobs as far as their gains say. With `gain`, a worker whose gain is not
    positive is left out (a resize would cost its job more than it adds)."""
    seen: dict[str, int] = {}
    keyed = []
    for e in sorted(grows, key=lambda e: e.seq):
        assert e.request is not None
        gang = e.request.gang_id
        rank = seen[gang] = seen.get(gang, -1) + 1
        now = width.get(gang, 0) + rank
        value = gain(e.uid, now) if gain is not None else -float(now)
        if gain is not None and value <= 0:
            continue
        keyed.append(((not below_share(e), -value, e.seq), e))
    keyed.sort(key=lambda kv: kv[0])
    return [e for _, e in keyed]
