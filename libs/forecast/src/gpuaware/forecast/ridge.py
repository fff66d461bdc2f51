"""Ridge regression on lags and the calendar: the forecaster for hours ahead.

At minutes ahead, demand is what it is now (persistence is the bar, and arrivals are too bursty for any
model to beat it by much). Hours ahead, two things are known at the origin that persistence ignores:
the day's rhythm (queues fill in working hours and drain at night) and how far the present sits from
its recent averages (a burst above the day's mean tends to drain). This model writes the change from
now to the target as a linear function of:

* the gaps between the last 30 min, 1 h, 3 h, 12 h and 24 h means and the present value;
* the gap between the value one day before the target (one week where a day is not yet known at
  the origin) and the present value;
* the target's hour of day (24 indicators) and whether it falls on a weekend.

One set of weights per series and horizon, fitted by ridge regression (closed form) on the series'
own past. The penalty is picked from a fixed grid on the range ``[fit_end, lo)`` after fitting on the
targets before ``fit_end``; the weights are then fitted again on every target observed at least one
horizon before the first origin of ``[lo, hi)``, so no forecast uses a value after its origin. The
change is predicted, not the level: with a large penalty the model becomes persistence, which is
where it should fall back to on a series without a rhythm. Forecasts are clipped at zero (demand).

A service that keeps a series' recent past refits now and then (``fit_weights``: the same features,
penalty choice and fit on everything it has) and forecasts from each new origin with those weights
(``forecast_at``); ``hours`` refits once a day of series time.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuaware.forecast.series import Series

__all__ = ["PENALTIES", "fit_weights", "forecast_at", "ridge"]

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
MEANS_H = (0.5, 1.0, 3.0, 12.0, 24.0)
FOLDS = 4
"""blocks the penalty is judged on: the range before ``lo`` and the three of its length before that"""
PENALTIES = (1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0)
"""the ridge penalties tried (the features are in the series' units: demand in GPUs, nodes)"""

Forecasts = dict[int, np.ndarray]


def _trailing_means(values: np.ndarray, steps: int) -> np.ndarray:
    """``out[i]``: the mean of ``values[max(0, i - steps + 1) .. i]``."""
    c = np.concatenate(([0.0], np.cumsum(values)))
    i = np.arange(len(values))
    lo = np.maximum(0, i - steps + 1)
    return (c[i + 1] - c[lo]) / (i + 1 - lo)


def _features(s: Series, filled: np.ndarray, means: list[np.ndarray], origins: np.ndarray, h: int) -> np.ndarray:
    now = filled[origins]
    cols = [np.ones(len(origins))]
    cols += [m[origins] - now for m in means]
    day, week = round(DAY_S / s.step_s), round(WEEK_S / s.step_s)
    back = origins + h - (day if h <= day else week)  # a day before the target, or a week when that is ahead
    back = np.where(back > origins, back - week, back)
    cols.append(np.where(back >= 0, filled[np.clip(back, 0, None)], now) - now)
    t = s.start + (origins + h) * s.step_s
    hour = ((t % DAY_S) // 3600).astype(np.int64)
    cols += [(hour == k).astype(np.float64) for k in range(24)]
    weekday = (t // DAY_S + 3) % 7  # 1970-01-01 was a Thursday: 0 is Monday
    cols.append((weekday >= 5).astype(np.float64))
    return np.column_stack(cols)


def _fit(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    a = x.T @ x + penalty * np.eye(x.shape[1])
    a[0, 0] -= penalty  # the intercept is not shrunk
    return np.linalg.solve(a, x.T @ y)


def _means(s: Series, filled: np.ndarray) -> list[np.ndarray]:
    return [_trailing_means(filled, max(1, round(hours * 3600 / s.step_s))) for hours in MEANS_H]


def _training(s: Series, filled: np.ndarray, means: list[np.ndarray], end: int, h: int,
              first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features and changes of every target before ``end`` that was observed, from origins ``first`` on."""
    observed = s.values
    origins = np.arange(first, max(first, end - h))
    origins = origins[np.isfinite(observed[origins + h])]
    return _features(s, filled, means, origins, h), observed[origins + h] - filled[origins]


def _penalty(s: Series, filled: np.ndarray, means: list[np.ndarray], h: int, fit_end: int, lo: int,
             first: int = 0) -> float:
    """The grid's penalty with the least squared error over ``[fit_end, lo)`` and the blocks of its length
    before it (each fitted on what precedes it); the grid's middle without such a range."""
    observed = s.values
    penalty = PENALTIES[len(PENALTIES) // 2]
    if 0 < fit_end < lo:
        errors = np.zeros(len(PENALTIES))
        length = lo - fit_end
        for k in range(FOLDS):  # [fit_end, lo) and the blocks of its length before it
            f_lo, f_hi = fit_end - k * length, lo - k * length
            x, y = _training(s, filled, means, f_lo, h, first)
            check = np.arange(max(0, f_lo - h), f_hi - h)
            check = check[np.isfinite(observed[check + h])]
            if len(y) <= x.shape[1] or not len(check):
                break
            xc = _features(s, filled, means, check, h)
            errors += [np.sum((xc @ _fit(x, y, p) - (observed[check + h] - filled[check])) ** 2)
                       for p in PENALTIES]
        if errors.any():
            penalty = PENALTIES[int(np.argmin(errors))]
    return penalty


def ridge(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> Forecasts:
    """Forecasts for the targets ``[lo, hi)`` at each horizon (steps); see the module docstring."""
    filled = s.filled()
    means = _means(s, filled)
    out: Forecasts = {}
    for h in horizons:
        penalty = _penalty(s, filled, means, h, fit_end, lo)
        x, y = _training(s, filled, means, lo - h, h)  # every target known at the first origin, lo - h
        origins = np.arange(lo, hi) - h
        pred = np.full(hi - lo, np.nan)
        if len(y) <= x.shape[1]:
            ok = origins >= 0
            pred[ok] = filled[origins[ok]]  # too little history for the regression: persistence
            out[h] = pred
            continue
        w = _fit(x, y, penalty)
        ok = origins >= 0
        pred[ok] = np.maximum(0.0, filled[origins[ok]] + _features(s, filled, means, origins[ok], h) @ w)
        out[h] = pred
    return out


def fit_weights(s: Series, h: int, validate: int = 0) -> np.ndarray | None:
    """``ridge``'s weights for horizon ``h`` (steps) fitted once on the whole of ``s`` (every target
    observed so far), for a service that refits now and then and forecasts from each new origin with
    ``forecast_at``. The penalty is picked on the last ``validate`` steps and the blocks of that length
    before them, as ``ridge`` picks it (0: the grid's middle). None where there are too few targets.

    Only origins from a day on are fitted: before, the value a day before the target and the 24-hour
    mean are not known yet, and with days (not the benchmark's weeks) of history those rows are a large
    share and bias the fit (on a daily cycle with noise, by half the noise at 12 h with three days)."""
    filled = s.filled()
    means = _means(s, filled)
    n = len(s)
    first = min(round(DAY_S / s.step_s), n)
    penalty = _penalty(s, filled, means, h, n - validate if 0 < validate < n else 0, n, first)
    x, y = _training(s, filled, means, n, h, first)
    if len(y) <= x.shape[1]:
        return None
    return _fit(x, y, penalty)


def forecast_at(s: Series, weights: Mapping[int, np.ndarray]) -> dict[int, float]:
    """The forecasts from the last point of ``s``, per horizon (steps) with its weights from
    ``fit_weights`` (clipped at zero, as ``ridge``'s)."""
    filled = s.filled()
    means = _means(s, filled)
    origin = np.array([len(s) - 1])
    return {h: float(max(0.0, filled[-1] + (_features(s, filled, means, origin, h) @ w)[0]))
            for h, w in weights.items()}
