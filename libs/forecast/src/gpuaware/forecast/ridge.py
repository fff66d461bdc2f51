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
"""

from __future__ import annotations

import numpy as np

from gpuaware.forecast.series import Series

__all__ = ["PENALTIES", "ridge"]

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


def ridge(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> Forecasts:
    """Forecasts for the targets ``[lo, hi)`` at each horizon (steps); see the module docstring."""
    filled, observed = s.filled(), s.values
    means = [_trailing_means(filled, max(1, round(hours * 3600 / s.step_s))) for hours in MEANS_H]

    def training(end: int, h: int) -> tuple[np.ndarray, np.ndarray]:
        origins = np.arange(0, max(0, end - h))
        origins = origins[np.isfinite(observed[origins + h])]
        return _features(s, filled, means, origins, h), observed[origins + h] - filled[origins]

    out: Forecasts = {}
    for h in horizons:
        penalty = PENALTIES[len(PENALTIES) // 2]
        if 0 < fit_end < lo:
            errors = np.zeros(len(PENALTIES))
            length = lo - fit_end
            for k in range(FOLDS):  # [fit_end, lo) and the blocks of its length before it
                f_lo, f_hi = fit_end - k * length, lo - k * length
                x, y = training(f_lo, h)
                check = np.arange(max(0, f_lo - h), f_hi - h)
                check = check[np.isfinite(observed[check + h])]
                if len(y) <= x.shape[1] or not len(check):
                    break
                xc = _features(s, filled, means, check, h)
                errors += [np.sum((xc @ _fit(x, y, p) - (observed[check + h] - filled[check])) ** 2)
                           for p in PENALTIES]
            if errors.any():
                penalty = PENALTIES[int(np.argmin(errors))]
        x, y = training(lo - h, h)  # every target known at the first origin, lo - h
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
