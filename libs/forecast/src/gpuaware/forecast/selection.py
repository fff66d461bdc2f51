"""Which forecast to serve for one series at one horizon, from each model's errors on recent data.

The rule, on each model's errors over the validation range and the ranges before it (every model
fitted before each; ``evaluate`` gathers them). The errors must be the same evidence for every model:
out of sample, over the same targets. ``choose`` compares what it is given, so the caller leaves out a
model that has no such errors: a trained LSTM's errors on ranges it was trained on, or on the range its
checkpoint was picked on, are in-sample and would let it win near-ties it has not earned; ``evaluate``
judges it through a copy trained before those ranges instead, and leaves it out where it has none.

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

__all__ = ["NEAR", "PERSISTENCE", "Choice", "Z", "better", "choose", "combine", "parts"]

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


class Choice:
    """The model or persistence, per series and horizon, as a service runs: exponentially weighted
    squared errors of each (half-life ``halflife`` scored targets), the model set aside where its
    recent RMSE exceeds persistence's once ``min_points`` targets were scored there. The online form of
    rule 1 above for a model that cannot be refitted on a service's recent data (the LSTM): a series
    where the model does worse than the last value is served the last value."""

    def __init__(self, horizons: int, halflife: float = 240.0, min_points: int = 60) -> None:
        self.decay = 0.5 ** (1.0 / halflife)
        self.min_points = min_points
        self.sq = np.zeros((0, horizons, 2))
        """(series, horizon, [model, persistence]) weighted sums of squared errors"""
        self.weight = np.zeros((0, horizons))
        self.points = np.zeros((0, horizons), dtype=np.int64)

    def _grow(self, n: int) -> None:
        if len(self.weight) < n:
            extra = n - len(self.weight)
            h = self.weight.shape[1]
            self.sq = np.concatenate([self.sq, np.zeros((extra, h, 2))])
            self.weight = np.concatenate([self.weight, np.zeros((extra, h))])
            self.points = np.concatenate([self.points, np.zeros((extra, h), dtype=np.int64)])

    def add(self, j: int, model_errors: np.ndarray, persistence_errors: np.ndarray) -> None:
        """One target's errors at horizon index ``j`` (NaN: not scored, e.g. the model did not serve)."""
        n = len(model_errors)
        self._grow(n)
        ok = np.isfinite(model_errors) & np.isfinite(persistence_errors)
        rows = np.flatnonzero(ok)
        if not len(rows):
            return
        self.sq[rows, j] = self.sq[rows, j] * self.decay + np.stack(
            [model_errors[rows] ** 2, persistence_errors[rows] ** 2], axis=1)
        self.weight[rows, j] = self.weight[rows, j] * self.decay + 1.0
        self.points[rows, j] += 1

    def rmse(self, i: int, j: int) -> tuple[float, float]:
        """Recent RMSE of (the model, persistence) of series ``i`` at horizon index ``j``."""
        if i >= len(self.weight) or self.weight[i, j] == 0:
            return float("nan"), float("nan")
        m, b = np.sqrt(self.sq[i, j] / self.weight[i, j])
        return float(m), float(b)

    def worse(self, n: int) -> np.ndarray:
        """(n, H) True where the model's recent RMSE exceeds persistence's with enough points."""
        self._grow(n)
        enough = self.points[:n] >= self.min_points
        return enough & (self.sq[:n, :, 0] > self.sq[:n, :, 1])
