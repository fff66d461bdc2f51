"""Fair share over time: decayed usage, weighted dominant shares, water-filled entitlements, Jain.

Why it looks like this:

* Dominant resource fairness (Ghodsi et al., NSDI'11) compares tenants by the largest fraction of
  any one resource they hold. Here the holdings are *history*: each queue's usage vector is
  integrated over time with exponential decay (``half_life_s``), like Slurm's fair-share factor,
  so a tenant that just ran a large burst waits behind a steady small one until its history fades.
  The order key is ``dominant(decayed usage + current use) / weight``; smaller goes first.
* Entitlements (what "fair" means at one instant) are weighted max-min: water-filling of capacity
  over tenants capped at their demand, guarantees first. Jain's index is then taken over
  ``min(1, got / entitled)`` of tenants with demand, so a tenant that asks for little is not
  counted as starved (the usual normalisation; raw allocations would punish small tenants).
* Everything is numpy and pure: times come in, nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["DecayedUsage", "dominant_share", "jain_index", "normalised_shares", "water_fill"]


def jain_index(x: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 = equal, 1/n = one takes all; 1 for n = 0."""
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0 or not np.any(a):
        return 1.0
    return float(a.sum() ** 2 / (a.size * np.square(a).sum()))


def dominant_share(usage: np.ndarray, capacity: np.ndarray) -> float:
    """Largest fraction of any resource the usage holds (resources the cluster lacks are skipped)."""
    cap = np.asarray(capacity, dtype=np.float64)
    mask = cap > 0
    if not mask.any():
        return 0.0
    return float(np.max(np.asarray(usage, dtype=np.float64)[mask] / cap[mask]))


def water_fill(capacity: float, demand: Mapping[str, float], weight: Mapping[str, float],
               guaranteed: Mapping[str, float] | None = None) -> dict[str, float]:
    """Weighted max-min shares of ``capacity``: each tenant first gets min(demand, guarantee), the
    rest is poured by weight, nobody above its demand.

    capacity 10, demand a 8 / b 2, equal weights -> b 2, a 8;  demand a 8 / b 8 -> 5 / 5.
    """
    guaranteed = guaranteed or {}
    share = {k: min(float(d), float(guaranteed.get(k, 0.0))) for k, d in demand.items()}
    left = max(0.0, capacity - sum(share.values()))
    active = {k for k, d in demand.items() if d - share[k] > 1e-12}
    while left > 1e-9 and active:
        wsum = sum(weight.get(k, 1.0) for k in active)
        step = {k: left * weight.get(k, 1.0) / wsum for k in active}
        done = set()
        for k in active:
            give = min(step[k], demand[k] - share[k])
            share[k] += give
            if demand[k] - share[k] <= 1e-12:
                done.add(k)
        left = max(0.0, capacity - sum(share.values()))
        if not done:
            break
        active -= done
    return share


def normalised_shares(got: Mapping[str, float], entitled: Mapping[str, float]) -> np.ndarray:
    """min(1, got / entitled) over tenants entitled to something: the input to Jain's index."""
    keys = [k for k, e in entitled.items() if e > 1e-12]
    return np.array([min(1.0, got.get(k, 0.0) / entitled[k]) for k in keys], dtype=np.float64)


class DecayedUsage:
    """Per-queue usage integrated over time with exponential decay.

    After holding ``u`` for ``dt`` seconds, history h becomes ``h * d + u * tau * (1 - d)`` where
    ``d = 2 ** (-dt / half_life)`` and ``tau = half_life / ln 2``: the exact integral of a constant
    use under decay, so the value does not depend on how often ``advance`` is called. A queue that
    held ``u`` forever tends to ``u * tau``; divided by ``tau`` that is its mean recent use.
    """

    def __init__(self, half_life_s: float, width: int) -> None:
        if half_life_s <= 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        self.half_life_s = half_life_s
        self.tau = half_life_s / math.log(2)
        self.width = width
        self.history: dict[str, np.ndarray] = {}
        self.t: float | None = None

    def advance(self, t: float, using: Mapping[str, np.ndarray]) -> None:
        """Integrate ``using`` (held since the last call) up to time ``t``."""
        if self.t is None or t <= self.t:
            self.t = t if self.t is None else max(self.t, t)
            for k in using:
                self.history.setdefault(k, np.zeros(self.width))
            return
        d = 2.0 ** (-(t - self.t) / self.half_life_s)
        for k in set(self.history) | set(using):
            h = self.history.get(k, np.zeros(self.width))
            u = np.asarray(using.get(k, 0.0), dtype=np.float64)
            self.history[k] = h * d + u * self.tau * (1.0 - d)
        self.t = t

    def mean_recent(self, queue: str) -> np.ndarray:
        """Decayed average use of ``queue`` (same units as the usage vectors)."""
        return self.history.get(queue, np.zeros(self.width)) / self.tau

    def priority_key(self, queue: str, current: np.ndarray, capacity: np.ndarray, weight: float) -> float:
        """Smaller runs first: dominant share of (recent history + what it holds now) / weight."""
        return dominant_share(self.mean_recent(queue) + np.asarray(current, dtype=np.float64), capacity) / weight
