"""Bookkeeping of the per-node, per-version score caches (policies._SpecCache, cache.CachedScheduler),
compiled: which nodes changed since their value was computed, and storing new values.

Why compiled: each is three or four numpy calls (gather, gather, compare, select) on a handful of
rows, made for every score of every decision; one loop costs a fraction of their fixed overhead.
"""

from __future__ import annotations

import numpy as np

from gpuaware.placement.compiled import kernel

__all__ = ["changed_rows", "stale_rows", "store_rows", "store_values", "store_verdicts"]


@kernel
def changed_rows(computed_at: np.ndarray, version: np.ndarray) -> np.ndarray:
    """Every node whose value was computed at another version than the node's now."""
    out = np.empty(version.size, np.int64)
    k = 0
    for n in range(version.size):
        if computed_at[n] != version[n]:
            out[k] = n
            k += 1
    return out[:k]


@kernel
def stale_rows(nodes: np.ndarray, computed_at: np.ndarray, version: np.ndarray) -> np.ndarray:
    """The members of `nodes` whose value was computed at another version than the node's now."""
    out = np.empty(nodes.size, np.int64)
    k = 0
    for n in nodes:
        if computed_at[n] != version[n]:
            out[k] = n
            k += 1
    return out[:k]


@kernel
def store_values(rows: np.ndarray, value: np.ndarray, computed_at: np.ndarray, values: np.ndarray,
                 version: np.ndarray) -> None:
    """values[rows] = value, stamped with the nodes' versions now."""
    for k in range(rows.size):
        n = rows[k]
        values[n] = value[k]
        computed_at[n] = version[n]


@kernel
def store_rows(rows: np.ndarray, value: np.ndarray, gpu: np.ndarray, computed_at: np.ndarray,
               values: np.ndarray, gpus: np.ndarray, version: np.ndarray) -> None:
    """`store_values`, and gpus[rows] = gpu."""
    store_values(rows, value, computed_at, values, version)
    for k in range(rows.size):
        gpus[rows[k]] = gpu[k]


@kernel
def store_verdicts(rows: np.ndarray, fits: np.ndarray, fit_rows: np.ndarray, total: np.ndarray,
                   feasible: np.ndarray, totals: np.ndarray, computed_at: np.ndarray, version: np.ndarray) -> None:
    """The score cache's verdicts on `rows` (cache.py): feasible[rows] = fits, totals = -inf there but
    on `fit_rows` (the rows that fit, in order) = total, stamped with the nodes' versions now."""
    for k in range(rows.size):
        n = rows[k]
        feasible[n] = fits[k]
        totals[n] = -np.inf
        computed_at[n] = version[n]
    for k in range(fit_rows.size):
        totals[fit_rows[k]] = total[k]
