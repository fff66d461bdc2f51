"""The node a scheduler picks: the highest weighted score, ties to the lowest fixed random rank.

One rule for every scheduler (framework.Scheduler, the score cache's CachedScheduler, with or
without excluded nodes), compiled: one pass over the scores instead of max, compare, gather and
arg-min as separate numpy calls on every decision. The rank (a permutation drawn from the profile's
seed) breaks ties the way the FGD simulator does: equal scores do not always favour low node indices.
"""

from __future__ import annotations

import numpy as np

from gpuaware.placement.compiled import kernel

__all__ = ["best_index"]


@kernel
def _best(total: np.ndarray, rank: np.ndarray, ranked: bool) -> tuple[int, float]:
    pick = -1
    best = -np.inf
    best_rank = 0
    for i in range(total.size):
        v = total[i]
        if v > best or (v == best and pick >= 0 and ranked and rank[i] < best_rank):
            pick = i
            best = v
            if ranked:
                best_rank = rank[i]
    return pick, best


_NO_RANK = np.zeros(0, dtype=np.int64)


def best_index(total: np.ndarray, rank: np.ndarray | None) -> tuple[int, float]:
    """(i, total[i]) for the highest total, ties to the lowest rank[i] (to the lowest i without a
    rank); (-1, -inf) when every total is -inf (or there is none)."""
    if rank is None:
        return _best(total, _NO_RANK, False)
    return _best(total, rank, True)
