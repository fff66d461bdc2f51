"""Rolling-origin evaluation: every model, every horizon, every series, on the held-out range only.

A forecast for target index ``i`` at horizon ``h`` is issued at origin ``i - h``; only targets that
were observed count (a filled gap is not a correct forecast). Metrics:

* RMSE in the series' units;
* sMAPE in percent (both defined in ``accuracy``).

Aggregation over series: RMSE pools the squared errors of every target of every series (so it is
the RMSE of "a forecast, any series"), sMAPE averages every term. ``relative_rmse`` is the other
view: each series' RMSE divided by the best baseline's on that series, geometric mean over series,
so a large VC does not decide alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from gpuaware.forecast.accuracy import rmse, smape
from gpuaware.forecast.baselines import BASELINES
from gpuaware.forecast.series import Series

__all__ = ["Evaluation", "SeriesResult", "evaluate"]


@dataclasses.dataclass
class SeriesResult:
    name: str
    test: tuple[int, int]
    forecasts: dict[str, dict[int, np.ndarray]]
    """model -> horizon minutes -> forecasts aligned with ``actual``"""
    actual: np.ndarray
    notes: list[str] = dataclasses.field(default_factory=list)

    def metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        return {m: {"rmse_at": {str(h): rmse(self.actual, f) for h, f in by_h.items()},
                    "smape_at": {str(h): smape(self.actual, f) for h, f in by_h.items()},
                    "n_at": {str(h): int((np.isfinite(self.actual) & np.isfinite(f)).sum()) for h, f in by_h.items()}}
                for m, by_h in self.forecasts.items()}


@dataclasses.dataclass
class Evaluation:
    results: list[SeriesResult]
    horizons_min: list[int]

    @property
    def models(self) -> list[str]:
        return list(self.results[0].forecasts) if self.results else []

    def aggregate(self) -> dict[str, dict[str, dict[str, float]]]:
        out = {}
        for m in self.models:
            r, s = {}, {}
            for h in self.horizons_min:
                actual = np.concatenate([res.actual for res in self.results])
                forecast = np.concatenate([res.forecasts[m][h] for res in self.results])
                r[str(h)] = rmse(actual, forecast)
                s[str(h)] = smape(actual, forecast)
            out[m] = {"rmse_at": r, "smape_at": s}
        return out

    def best_baseline(self, h: int, per_series: SeriesResult | None = None) -> str:
        names = [m for m in self.models if m in BASELINES]
        if per_series is None:
            agg = self.aggregate()
            return min(names, key=lambda m: agg[m]["rmse_at"][str(h)])
        return min(names, key=lambda m: rmse(per_series.actual, per_series.forecasts[m][h]))

    def relative_rmse(self, model: str) -> dict[str, float]:
        """Geometric mean over series of RMSE(model) / RMSE(best baseline on that series)."""
        out = {}
        for h in self.horizons_min:
            ratios = []
            for res in self.results:
                base = rmse(res.actual, res.forecasts[self.best_baseline(h, res)][h])
                mine = rmse(res.actual, res.forecasts[model][h])
                if base > 0 and np.isfinite(mine):
                    ratios.append(mine / base)
            out[str(h)] = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
        return out

    def summary(self) -> dict:
        """The CLI's summary.json shape: {"series": [...], "models": {NAME: {"rmse_at", "smape_at"}}}."""
        return {"series": [r.name for r in self.results], "models": self.aggregate()}


Predictor = Callable[[Series, int, int, list[int], int], dict[int, np.ndarray]]


def evaluate(series: Sequence[tuple[Series, int, int, int]], horizons_min: Sequence[int],
             models: dict[str, Predictor] | None = None) -> Evaluation:
    """``series``: (series, train_end, valid_end, test_end); the test range is [valid_end, test_end).

    ``models`` maps a name to ``f(series, lo, hi, horizons_steps, fit_end) -> {h_steps: forecasts}``;
    the baselines are always included. Baselines fit on the training range and may use validation to
    pick a parameter (EWMA's alpha); they see the test range only as the past of later origins.
    """
    every = {**BASELINES, **(models or {})}
    results = []
    for s, train_end, valid_end, test_end in series:
        steps = [s.steps(h) for h in horizons_min]
        res = SeriesResult(s.name, (valid_end, test_end), {}, s.values[valid_end:test_end].copy(), list(s.notes))
        for name, fn in every.items():
            preds = fn(s, valid_end, test_end, steps, train_end)
            res.forecasts[name] = {h: preds[st] for h, st in zip(horizons_min, steps, strict=True)}
        results.append(res)
    return Evaluation(results, list(horizons_min))


def served(model, quantile: float = 0.5) -> Predictor:
    """The forecasts the service would publish from ``model`` (a ``runtime.StreamingModel``): every
    series stepped through ``runtime.Streams`` (fallback rows included), the ``quantile`` column."""
    from gpuaware.forecast.runtime import replay

    q = model.quantiles.index(quantile)

    def predict(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> dict[int, np.ndarray]:
        del fit_end
        values, _ = replay(model, [s], [hi])[0]
        out = {}
        for h in horizons:
            if h not in model.horizons:
                raise ValueError(f"the model forecasts {model.horizons} steps ahead, not {h}")
            j = model.horizons.index(h)
            idx = np.arange(lo, hi) - h
            pred = np.full(hi - lo, np.nan)
            pred[idx >= 0] = values[idx[idx >= 0], j, q]
            out[h] = pred
        return out

    return predict
