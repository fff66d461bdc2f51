"""Which forecast to serve for one series at one horizon, from each model's errors on recent data.

The rule, on each model's errors over the validation range and the ranges before it (every model
fitted before each; ``evaluate`` gathers them):

1. persistence scores best (ties go to it): persistence is served. A series where nothing beats the
   last value gets the last value.
2. the best model beats the runner-up by more than ``NEAR`` (2 %) in RMSE, and beats both the
   runner-up and persistence beyond chance (``better``: a Diebold-Mariano test, ``Z`` standard errors):
   the best is served alone.
3. otherwise the two best are averaged. The data cannot tell them apart, and the mean of two
   forecasts that err differently is steadier than either (the forecast-combination result): on the
   Philly node sequence, where a model that edges the others in November loses clearly in December,
   the mean of the two best stays within 1.3 % of the best baseline at every horizon, where choosing
   one alone was up to 10 % worse (measurements in bench/results/forecast.md).

A served model's name is its parts joined by ``+`` (``ewma+ridge``: their mean).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["NEAR", "PERSISTENCE", "Z", "better", "choose", "combine", "parts"]

Z = 2.0
"""how many standard errors a clear winner's lower loss must stand (one-sided, about 98 %)"""
NEAR = 0.02
"""a best model within this fraction of the runner-up's RMSE is not a clear winner"""
PERSISTENCE = "persistence"


def better(a: np.ndarray, b: np.ndarray, h: int, z: float = Z) -> bool:
    """Are the squared errors ``a`` smaller than ``b`` beyond chance? The Diebold-Mariano statistic:
    the mean loss difference over its standard error, the variance summed over ``h - 1`` lags
    (Newey-West weights), since errors of forecasts whose horizons overlap are correlated."""
    ok = np.isfinite(a) & np.isfinite(b)
    d = (b - a)[ok]
    n = len(d)
    if n < 2:
        return False
    centred = d - d.mean()
    var = float(centred @ centred) / n
    for lag in range(1, min(h, n - 1)):
        var += 2.0 * (1.0 - lag / h) * float(centred[lag:] @ centred[:-lag]) / n
    if var <= 0:
        return bool(d.mean() > 0)
    return bool(d.mean() / np.sqrt(var / n) > z)


def choose(errors: Mapping[str, np.ndarray], h: int, near: float = NEAR) -> str:
    """The served model's name from each model's validation errors (actual minus forecast) at a
    horizon of ``h`` steps (see the module docstring); persistence when nothing was measured."""
    sq = {m: np.asarray(e, dtype=np.float64) ** 2 for m, e in errors.items()}
    scores = {m: float(np.sqrt(np.nanmean(v))) for m, v in sq.items() if np.isfinite(v).any()}
    if not scores:
        return PERSISTENCE
    ranked = sorted(scores, key=lambda m: (scores[m], m != PERSISTENCE, m))
    best = ranked[0]
    if best == PERSISTENCE or len(ranked) == 1:
        return best
    runner_up = ranked[1]
    if scores[best] < (1.0 - near) * scores[runner_up] and better(sq[best], sq[runner_up], h) \
            and (PERSISTENCE not in sq or better(sq[best], sq[PERSISTENCE], h)):
        return best
    return "+".join(sorted((best, runner_up)))


def parts(name: str) -> list[str]:
    """The models a served name averages (one for a single model)."""
    return name.split("+")


def combine(name: str, forecasts: Mapping[str, np.ndarray]) -> np.ndarray:
    """The served forecast named ``name`` from the forecasts of its parts."""
    return np.mean([forecasts[m] for m in parts(name)], axis=0)
