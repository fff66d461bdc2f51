"""The baselines every learned model is measured against, as rolling-origin forecasts.

All four answer the same question the LSTM does: standing at origin ``o`` (having seen values up to
and including ``o``), what is the value at ``o + h``? Each returns, per horizon ``h`` (in steps), an
array aligned with the targets ``[lo, hi)``, so ``pred[h][k]`` forecasts ``values[lo + k]`` from
origin ``lo + k - h``. Only the past of each origin is used; gaps are held (last observation).

* ``persistence``: the last observation. The bar on minute-level demand, where most of the series
  is flat between job arrivals.
* ``seasonal_naive``: the value one day before the target (``h <= period`` so it is known at the
  origin).
* ``ewma``: exponentially weighted mean of the past; ``alpha`` picked per horizon on the validation
  range from a fixed grid (pandas' ``ewm`` skips NaNs).
* ``ets``: Holt's damped-trend exponential smoothing, statsmodels' state-space form
  (``statsmodels.tsa.statespace.exponential_smoothing``), fitted by maximum likelihood on the
  training range, then run (parameters fixed, no refit) through the validation and test ranges; the
  ``h``-step forecast from each origin is ``Z T^(h-1) a(o+1|o)`` from the Kalman filter's predicted
  states, i.e. exactly what ``results.forecast(h)`` gives at that origin (tested), for every origin
  at once. Missing values are handled by the filter itself. Seasonality is left out: a daily season
  of 1,440 minute states is not a "well-kept" model any more.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from gpuaware.forecast.series import Series

__all__ = ["BASELINES", "ets", "ewma", "persistence", "seasonal_naive"]

Forecasts = dict[int, np.ndarray]


def _at_origins(level: np.ndarray, lo: int, hi: int, horizons: list[int]) -> Forecasts:
    """``level[o]`` is the forecast from origin ``o`` for any horizon: shift it per horizon."""
    out = {}
    for h in horizons:
        idx = np.arange(lo, hi) - h
        pred = np.full(hi - lo, np.nan)
        ok = idx >= 0
        pred[ok] = level[idx[ok]]
        out[h] = pred
    return out


def persistence(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> Forecasts:
    del fit_end  # nothing to fit
    return _at_origins(s.filled(), lo, hi, horizons)


def seasonal_naive(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0,
                   period_s: float = 86_400.0) -> Forecasts:
    del fit_end
    period = round(period_s / s.step_s)
    f = s.filled()
    out = {}
    for h in horizons:
        idx = np.arange(lo, hi) - max(period, h)  # one period back, never past the origin
        pred = np.full(hi - lo, np.nan)
        ok = idx >= 0
        pred[ok] = f[idx[ok]]
        out[h] = pred
    return out


EWMA_ALPHAS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def _ewma_level(s: Series, alpha: float) -> np.ndarray:
    level = pd.Series(s.values).ewm(alpha=alpha, ignore_na=True).mean().ffill().bfill()
    return np.nan_to_num(level.to_numpy(dtype=np.float64), nan=0.0)


def ewma(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> Forecasts:
    """Per horizon, the ``alpha`` with the lowest squared error over [fit_end, lo) at that horizon (the
    first tried wins ties); with no such range, 0.3."""
    levels = {a: _ewma_level(s, a) for a in EWMA_ALPHAS}
    out = {}
    for h in horizons:
        alpha = 0.3
        if 0 < fit_end < lo:
            target = s.values[fit_end:lo]
            best = np.inf
            for a in EWMA_ALPHAS:
                err = np.nanmean((_at_origins(levels[a], fit_end, lo, [h])[h] - target) ** 2)
                if err < best:
                    best, alpha = err, a
        out[h] = _at_origins(levels[alpha], lo, hi, [h])[h]  # 0.3, the default, is on the grid
    return out


def ets(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0, max_fit: int = 20_160) -> Forecasts:
    """Damped-trend ETS fitted on the last ``max_fit`` steps before ``fit_end`` (or ``lo``)."""
    from statsmodels.tsa.statespace.exponential_smoothing import ExponentialSmoothing

    end = fit_end if fit_end > 0 else lo
    begin = max(0, end - max_fit)
    fit_values = s.values[begin:end]
    if np.isfinite(fit_values).sum() < 10 or np.nanstd(fit_values) == 0:
        return persistence(s, lo, hi, horizons)  # nothing for a likelihood to fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter; the fit is judged by its test error
        res = ExponentialSmoothing(fit_values, trend=True, damped_trend=True).fit(disp=False)
        run = res.apply(s.values[begin:hi])
    states = run.filter_results.predicted_state  # a(t+1|t) at column t+1
    design = run.model.ssm["design"][:, :, 0] if run.model.ssm["design"].ndim == 3 else run.model.ssm["design"]
    trans = run.model.ssm["transition"]
    trans = trans[:, :, 0] if trans.ndim == 3 else trans
    out = {}
    for h in horizons:
        proj = design @ np.linalg.matrix_power(trans, h - 1)  # (1, k)
        origins = np.arange(lo, hi) - h - begin
        pred = np.full(hi - lo, np.nan)
        ok = origins >= 0
        pred[ok] = (proj @ states[:, origins[ok] + 1])[0]
        out[h] = pred
    return out


BASELINES = {"persistence": persistence, "seasonal_naive_1d": seasonal_naive, "ewma": ewma, "ets": ets}
