"""The node choice: highest score, ties to the lowest rank, against the numpy statement of the rule."""

from __future__ import annotations

import numpy as np

from gpuaware.placement.choose import best_index


def numpy_rule(total: np.ndarray, rank: np.ndarray | None) -> tuple[int, float]:
    best = total.max()
    if best == -np.inf:
        return -1, -np.inf
    ties = np.flatnonzero(total == best)
    return (int(ties[0]) if rank is None else int(ties[np.argmin(rank[ties])])), float(best)


def test_best_index_is_the_rule_with_ties_ranks_and_infeasible_nodes() -> None:
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        total = rng.choice([-np.inf, 10.0, 50.0, 50.0, 99.0], size=n)
        rank = rng.permutation(n) if trial % 3 else rng.integers(0, 5, size=n)  # duplicate ranks too
        for r in (None, rank):
            assert best_index(total, r) == numpy_rule(total, r), (trial, r is None)


def test_nothing_feasible_or_nothing_at_all() -> None:
    assert best_index(np.full(4, -np.inf), None) == (-1, -np.inf)
    assert best_index(np.zeros(0), np.zeros(0, dtype=np.int64)) == (-1, -np.inf)
