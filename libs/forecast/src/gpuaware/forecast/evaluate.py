"""Rolling-origin evaluation: every model, every horizon, every series, on the held-out range only.

A forecast for target index ``i`` at horizon ``h`` is issued at origin ``i - h``; only targets that
were observed count (a filled gap is not a correct forecast). Metrics:

* RMSE in the series' units;
* sMAPE in percent (both defined in ``accuracy``).

Aggregation over series: RMSE pools the squared errors of every target of every series (so it is
the RMSE of "a forecast, any series"), sMAPE averages every term. ``relative_rmse`` is the other
view: each series' RMSE divided by the best baseline's on that series, geometric mean over series,
so a large VC does not decide alone.

Besides the models it is given, every evaluation runs the ridge and ``served``: per series and horizon
the forecast ``selection.choose`` picks from each model's errors on the validation range and the
ranges of its length before it (``selection_ranges``; each model fitted before each, as for the test
range): persistence where nothing beats it, a clear winner alone, else the mean of the two best.

Every candidate is judged on the same evidence: out-of-sample errors on every one of those ranges. A
model that cannot be refitted before each range (a trained LSTM) has none there of its own: its
checkpoint was picked on the validation range, and its training saw the ranges before it, so its
errors on them are in-sample. It is judged instead through a copy trained the same way (the same
configuration, stopped at the same iteration: ``experiment.fit_evidence``) before the earliest range
(``evidence_split``: fitted before it, its checkpoint picked on the range of the same length just
before it), whose forecasts over every range are its errors (``evidence``). That copy has seen up to
the span of the folds less data than the model served, so the evidence is, if anything, against it. Without a copy such a model is not a candidate where there are folds (near-ties on one day's
evidence let it into the served mix where the other models needed four days); where the training
range is too short for folds every model is judged on the validation range alone, that model with
them.

Every model's forecasts carry a p10 / p90 band calibrated on its own recent errors (``calibration``):
its errors over the selection ranges first (the folds' fits, or the evidence copy's, then its own on
the validation range), so a band starts the test range with days of errors, not one. The error
window grows with the horizon (``band_window``): it holds at least ``BAND_HORIZONS`` horizons of
errors, since errors of forecasts whose horizons overlap are not independent and a window of a few
independent errors gives bands too narrow. Coverage is reported beside RMSE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpuaware.forecast.accuracy import rmse, smape
from gpuaware.forecast.baselines import BASELINES
from gpuaware.forecast.calibration import Band, band, coverage
from gpuaware.forecast.ridge import ridge
from gpuaware.forecast.selection import choose, combine
from gpuaware.forecast.series import Series

__all__ = ["CANDIDATES", "SERVED", "Evaluation", "SeriesResult", "band_window", "evaluate", "evidence_split",
           "selection_ranges"]

CANDIDATES = {**BASELINES, "ridge": ridge}
"""every model an evaluation runs without being asked: the baselines and the ridge on lags and calendar"""
NOT_SERVED = frozenset({"seasonal_naive_1d"})
"""reported, never served: the ridge already weighs the value a day before the target, and yesterday's
value alone, near-tied with the ridge on validation, was 36 % worse three hours ahead on two Helios VCs
once averaged in"""
SERVED = "served"
"""the name of the per-series, per-horizon choice among the models (see the module docstring)"""
SELECTION_FOLDS = 4
"""the served forecast is chosen on the validation range and up to three ranges of its length before it
(each model fitted before each, or judged through its evidence copy). One day of validation let a
random walk's spurious daily pattern pass for a clear winner 6 hours ahead"""
BAND_WINDOW_S = 3 * 86_400.0
"""how far back a band's errors reach at least: three days of targets (one day left the 12-hour bands
too narrow: a day holds two independent 12-hour errors)"""
BAND_HORIZONS = 16
"""a band's window holds at least this many horizons of errors (8 days at 12 hours, 4 at 6; shorter
horizons keep ``BAND_WINDOW_S``): chosen on the data before the test ranges (bench/results/forecast.md)"""


def selection_ranges(train_end: int, valid_end: int) -> list[tuple[int, int]]:
    """The ranges the served forecast is chosen on, oldest first and adjoining: up to
    ``SELECTION_FOLDS - 1`` of the validation range's length before it (each with a range of that
    length before it to pick parameters on, and something before that to fit on), then the validation
    range itself."""
    length = valid_end - train_end
    if length <= 0:
        return []
    earlier = [k for k in range(SELECTION_FOLDS - 1, 0, -1) if train_end - (k + 1) * length >= length]
    return [(train_end - k * length, valid_end - k * length) for k in earlier] + [(train_end, valid_end)]


def evidence_split(train_end: int, valid_end: int) -> tuple[int, int] | None:
    """Where a copy of a model that cannot be refitted per range must stop (train_end, valid_end) to be
    judged out of sample on every selection range: trained before the earliest, its checkpoint picked
    on the range of the same length just before it. None where the validation range is the only one."""
    ranges = selection_ranges(train_end, valid_end)
    if len(ranges) < 2:
        return None
    first = ranges[0][0]
    return first - (valid_end - train_end), first


def band_window(horizon_min: float, step_s: float) -> int:
    """How many past targets' errors a band at this horizon draws on (see ``BAND_HORIZONS``)."""
    return max(1, round(max(BAND_WINDOW_S, BAND_HORIZONS * horizon_min * 60.0) / step_s))


@dataclasses.dataclass
class SeriesResult:
    name: str
    test: tuple[int, int]
    forecasts: dict[str, dict[int, np.ndarray]]
    """model -> horizon minutes -> forecasts aligned with ``actual``"""
    actual: np.ndarray
    notes: list[str] = dataclasses.field(default_factory=list)
    bands: dict[str, dict[int, Band]] = dataclasses.field(default_factory=dict)
    """model -> horizon minutes -> its p10 / p90 band over the test targets"""
    validation_rmse: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    """model -> horizon minutes -> RMSE on the validation range"""
    selection_rmse: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    """model -> horizon minutes -> RMSE over every range ``served`` was chosen on (validation and folds)"""
    served: dict[int, str] = dataclasses.field(default_factory=dict)
    """horizon minutes -> the model served (``a+b``: the mean of two)"""

    def metrics(self) -> dict[str, dict[str, dict[str, float | None]]]:
        out: dict[str, dict[str, dict[str, float | None]]] = {}
        for m, by_h in self.forecasts.items():
            cov = {h: coverage(self.actual, self.bands[m][h]) for h in by_h if h in self.bands.get(m, {})}
            out[m] = {"rmse_at": {str(h): rmse(self.actual, f) for h, f in by_h.items()},
                      "smape_at": {str(h): smape(self.actual, f) for h, f in by_h.items()},
                      "n_at": {str(h): int((np.isfinite(self.actual) & np.isfinite(f)).sum()) for h, f in by_h.items()},
                      "coverage_p90_at": {str(h): c["p90"] for h, c in cov.items()},
                      "coverage_p10_p90_at": {str(h): c["p10_p90"] for h, c in cov.items()}}
        return out

    def why_served(self) -> dict[str, dict[str, object]]:
        """Per horizon: the model served, the RMSEs over the ranges it was chosen on, and on the
        validation range alone."""
        def finite(v: float) -> float | None:  # strict JSON: a model without errors to judge has none
            return v if np.isfinite(v) else None

        return {str(h): {"model": m, "selection_rmse": {k: finite(v[h]) for k, v in self.selection_rmse.items()},
                         "validation_rmse": {k: finite(v[h]) for k, v in self.validation_rmse.items()}}
                for h, m in self.served.items()}


@dataclasses.dataclass
class Evaluation:
    results: list[SeriesResult]
    horizons_min: list[int]

    @property
    def models(self) -> list[str]:
        return list(self.results[0].forecasts) if self.results else []

    def aggregate(self) -> dict[str, dict[str, Any]]:
        """Per model: RMSE and sMAPE pooled over every series' targets, and the bands' coverage."""
        out: dict[str, dict[str, Any]] = {}
        actual = np.concatenate([res.actual for res in self.results]) if self.results else np.array([])
        for m in self.models:
            r: dict[str, float] = {}
            s: dict[str, float] = {}
            p90: dict[str, float | None] = {}
            p10_p90: dict[str, float | None] = {}
            for h in self.horizons_min:
                forecast = np.concatenate([res.forecasts[m][h] for res in self.results])
                r[str(h)] = rmse(actual, forecast)
                s[str(h)] = smape(actual, forecast)
                if all(m in res.bands for res in self.results):
                    pooled = Band(np.concatenate([res.bands[m][h].p10 for res in self.results]),
                                  np.concatenate([res.bands[m][h].p90 for res in self.results]))
                    c = coverage(actual, pooled)
                    p90[str(h)], p10_p90[str(h)] = c["p90"], c["p10_p90"]
            out[m] = {"rmse_at": r, "smape_at": s, "coverage_at": {"p90": p90, "p10_p90": p10_p90}}
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
        """The CLI's summary.json shape: {"series": [...], "models": {NAME: {"rmse_at", "smape_at",
        "coverage_at": {"p90": {H: f}, "p10_p90": {H: f}}}}, "served": {SERIES: {H: MODEL}}}."""
        return {"series": [r.name for r in self.results], "models": self.aggregate(),
                "served": {r.name: {str(h): m for h, m in r.served.items()} for r in self.results}}


Predictor = Callable[[Series, int, int, list[int], int], dict[int, np.ndarray]]


def evaluate(series: Sequence[tuple[Series, int, int, int]], horizons_min: Sequence[int],
             models: dict[str, Predictor] | None = None, evidence: dict[str, Predictor] | None = None) -> Evaluation:
    """``series``: (series, train_end, valid_end, test_end); the test range is [valid_end, test_end).

    ``models`` maps a name to ``f(series, lo, hi, horizons_steps, fit_end) -> {h_steps: forecasts}``;
    the baselines and the ridge are always included, and ``served`` is added. Baselines fit on the
    training range and may use validation to pick a parameter (EWMA's alpha); they see the test range
    only as the past of later origins. ``evidence`` maps a name in ``models`` to the forecasts of its
    copy stopped at ``evidence_split`` (see the module docstring); only ``CANDIDATES`` are refitted per
    range.
    """
    every = {**CANDIDATES, **(models or {})}
    evidence = evidence or {}
    unknown = set(evidence) - set(models or {})
    if unknown:
        raise ValueError(f"evidence for models not evaluated: {sorted(unknown)}")
    results = []
    for s, train_end, valid_end, test_end in series:
        steps = [s.steps(h) for h in horizons_min]
        res = SeriesResult(s.name, (valid_end, test_end), {}, s.values[valid_end:test_end].copy(), list(s.notes))
        # the validation range is forecast as the test range is: fitted before it, parameters picked on
        # as long a range just before it
        inner = max(1, train_end - (valid_end - train_end))
        valid_actual = s.values[train_end:valid_end]
        length = valid_end - train_end
        ranges = selection_ranges(train_end, valid_end)
        first = ranges[0][0] if ranges else train_end
        judged_actual = s.values[first:valid_end]  # the ranges adjoin: folds, then validation
        valid: dict[str, dict[int, np.ndarray]] = {}
        judged: dict[str, dict[int, np.ndarray]] = {}  # out-of-sample forecasts over every selection range
        history: dict[str, dict[int, np.ndarray]] = {}  # the forecasts over the same targets a band starts from
        for name, fn in every.items():
            preds = fn(s, valid_end, test_end, steps, train_end)
            res.forecasts[name] = {h: preds[st] for h, st in zip(horizons_min, steps, strict=True)}
            vpreds = fn(s, train_end, valid_end, steps, inner) if length > 0 else {}
            valid[name] = {h: vpreds.get(st, np.full(length, np.nan)) for h, st in zip(horizons_min, steps, strict=True)}
            res.validation_rmse[name] = {h: rmse(valid_actual, valid[name][h]) for h in horizons_min}
            if name in CANDIDATES:  # refitted before each range; the last range is the validation range
                fits = [fn(s, lo, hi, steps, lo - length) for lo, hi in ranges[:-1]] + [vpreds]
                judged[name] = {h: np.concatenate([f[st] for f in fits]) if ranges else np.zeros(0)
                                for h, st in zip(horizons_min, steps, strict=True)}
            elif name in evidence:
                copy = evidence[name](s, first, valid_end, steps, 0)
                judged[name] = {h: copy[st] for h, st in zip(horizons_min, steps, strict=True)}
            elif len(ranges) <= 1:  # no folds: every model is judged on the validation range alone
                judged[name] = valid[name]
            own = np.full(len(judged_actual) - length, np.nan)  # no out-of-sample forecasts on the folds
            history[name] = {h: np.concatenate([judged[name][h][:len(own)] if name in judged else own, valid[name][h]])
                             for h in horizons_min}
        errors = {m: {h: judged_actual - f[h] for h in horizons_min} for m, f in judged.items()}
        res.selection_rmse = {m: {h: rmse(judged_actual, judged[m][h]) if m in judged else float("nan")
                                  for h in horizons_min} for m in every}
        for h, st in zip(horizons_min, steps, strict=True):
            res.served[h] = choose({m: e[h] for m, e in errors.items() if m not in NOT_SERVED}, st)
        res.forecasts[SERVED] = {h: combine(res.served[h], {m: f[h] for m, f in res.forecasts.items()})
                                 for h in horizons_min}
        history[SERVED] = {h: combine(res.served[h], {m: f[h] for m, f in history.items()}) for h in horizons_min}
        both = np.concatenate([judged_actual, res.actual])
        for name, by_h in res.forecasts.items():
            res.bands[name] = {h: band(both, np.concatenate([history[name][h], f]), st, band_window(h, s.step_s),
                                       before=len(judged_actual))
                               for (h, f), st in zip(by_h.items(), steps, strict=True)}
        results.append(res)
    return Evaluation(results, list(horizons_min))


def served(model, quantile: float = 0.5) -> Predictor:
    """The forecasts the service would publish from ``model`` (a ``runtime.StreamingModel``): every
    series stepped through ``runtime.Streams`` (fallback rows included), the ``quantile`` column."""
    from gpuaware.forecast.runtime import replay

    q = model.quantiles.index(quantile)
    last: list = []  # (series, steps replayed, forecasts): the replay is causal, so a longer one serves a shorter range

    def predict(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> dict[int, np.ndarray]:
        del fit_end
        if not last or last[0] is not s or last[1] < hi:
            last[:] = [s, hi, replay(model, [s], [hi])[0][0]]
        values = last[2]
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
