"""Demand hours ahead (3, 6 and 12 h by default), per demand series, chosen on the series' own recent
errors and calibrated on them: pure code the forecasting service runs beside its minute path.

Why a second path: the minute forecaster (the LSTM, or persistence) looks 10 to 60 minutes ahead. Hours
ahead the day's rhythm is known at the origin and persistence ignores it; the benchmark
(bench/results/forecast.md) found a ridge on lags and the hour of day 10-16 % better than the best
baseline at 6-12 h on busy series, and worse on small or rhythmless ones. So nothing is served
because it won somewhere else: each series and horizon is served what beats persistence on that
series' recent data, and persistence where nothing does.

History: per series, its value at each 10-minute boundary of the series' own time (the demand of the
minute ending there, the quantity the stored actuals are), the last ``history_days`` (14: 2,016 points)
kept; a boundary that never closed is a gap.

Candidates at every horizon, from every origin:

* ``persistence``: the value at the origin (a gap: the last one observed);
* ``seasonal_naive``: the value one day before the target (reported on in the benchmark as never
  better than the ridge, which weighs that value already; here it must beat persistence on the
  series' own errors to be served, so it can only help where the ridge has no fit yet);
* ``ridge`` (``ridge.fit_weights`` / ``ridge.forecast_at``: the benchmark's features, penalty chosen on
  the last day and the blocks before it), refitted at most once per ``refit_s`` of series time and only
  with ``min_fit_days`` (3) of history.

Choosing (the rule of ``selection.choose`` against persistence): every forecast is scored when its
target arrives, and each candidate's errors over the last ``score_days`` (4) are compared with
persistence's on the same targets. The candidate with the lowest RMSE ratio to persistence is served
when it has at least ``min_scored`` scored targets (288: two days of origins), its RMSE is more than
``selection.NEAR`` (2 %) under persistence's and the difference passes the Diebold-Mariano test
(``selection.better``, lags up to the horizon: errors of overlapping horizons are correlated). Two days,
not less: 12-hour errors over half a day are one independent sample, and with 72 or 144 scored origins
a third to half of twelve random walks had the ridge served at some hour horizon on days 3-6 (none
with 288); a series with a daily cycle gets the ridge about 5.5 days after it starts (3 days of
history, the horizon, two days of scores). Otherwise persistence is served, with
its reason: ``too little history: N h`` (no ridge yet), ``too few scored ridge forecasts: k of m``, or
``<candidate> not better than persistence on recent errors (RMSE a vs b)``.

Bands: p10 / p90 are the served p50 plus those quantiles of the series' own recent errors of the
served p50 at that horizon (``calibration.Bands``, ``band_days`` = 3 days of them: a day holds only
two independent 12-hour errors, and one day's bands came out too narrow in the benchmark); until a
series has ``band_min_errors`` of them at a horizon, its p10 and p90 equal the median.

Publishing (``events``): ``DemandPredicted``, one per (model, version) group, each series labelled as
the minute path labels it plus ``{"horizon": "hours"}`` so that no consumer takes it for the minute
path. The path is hourly (``step_s`` an hour on the issuer's clock: ``3600 / time_scale``, as
``serving`` scales its 10-minute path), ``max(horizons)`` steps (1..12 h). Only the horizons'
points are forecasts: the points between them are linearly interpolated, and those before the first
horizon (1 and 2 h) are interpolated from the origin's value (the value at 0 h) to the first horizon's.
``points`` stores the horizons' points in ``forecast_points`` under the minute path's series names
(``demand/<cluster>/<queue>``), each with the model that served it.

Memory: per series ``history_days`` of float64 (16 KB for 14 days), ``score_days`` of 4-byte errors per
horizon and candidate (21 KB) and ``band_days`` per horizon (5 KB); at most ``max_series`` series
(later ones are counted in ``dropped``, not kept).
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from gpuaware.forecast.calibration import Bands
from gpuaware.forecast.ridge import fit_weights, forecast_at
from gpuaware.forecast.selection import NEAR, PERSISTENCE, better
from gpuaware.forecast.series import Series
from gpuaware.forecast.serving import Point, demand_key, demand_labels, series_name
from gpuaware.schemas import DemandPredicted, DemandSeries

__all__ = ["CANDIDATES", "HORIZON_LABEL", "RIDGE", "SEASONAL", "HoursAhead", "HoursStep"]

DAY_S = 86_400.0
HOUR_S = 3_600.0
SEASONAL = "seasonal_naive"
RIDGE = "ridge"
CANDIDATES = (PERSISTENCE, SEASONAL, RIDGE)
"""the forecasts made from every origin (index 0, persistence, is the bar)"""
HORIZON_LABEL = ("horizon", "hours")
"""the label every hours-ahead series carries besides its usual ones"""


@dataclasses.dataclass(frozen=True)
class HoursStep:
    """One origin's forecasts: ``values[i, j, q]`` of series row ``i`` (``keys[i]``) at horizon ``j``,
    quantile ``q``; ``models[i][j]`` who served it; ``reasons[i][j]`` why persistence did (None where a
    model did); ``origin[i]`` the series' value at the origin (the path's 0 h)."""

    t: float
    """the origin, on the series' clock"""
    keys: tuple[str, ...]
    values: np.ndarray
    origin: np.ndarray
    models: tuple[tuple[str, ...], ...]
    reasons: tuple[tuple[str | None, ...], ...]


def _filled(values: np.ndarray) -> np.ndarray:
    """``Series.filled`` without pandas (every step of every series calls it): gaps hold the last
    observation, leading gaps take the first, 0 where nothing was observed."""
    ok = np.isfinite(values)
    if not ok.any():
        return np.zeros(len(values))
    idx = np.where(ok, np.arange(len(values)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = values[idx]
    out[:np.argmax(ok)] = values[np.argmax(ok)]
    return out


@dataclasses.dataclass
class _History:
    start: float
    values: np.ndarray
    weights: dict[int, np.ndarray] | None = None
    fitted_at: float | None = None

    def series(self, name: str, step_s: float) -> Series:
        return Series(name, self.start, step_s, self.values)


class HoursAhead:
    def __init__(self, horizons_h: Sequence[int] = (3, 6, 12), *, step_s: float = 600.0,
                 history_days: float = 14.0, min_fit_days: float = 3.0, refit_s: float = DAY_S,
                 quantiles: tuple[float, ...] = (0.1, 0.5, 0.9), time_scale: float = 1.0,
                 score_days: float = 4.0, min_scored: int = 288, band_days: float = 3.0,
                 band_min_errors: int = 30, max_series: int = 512) -> None:
        """``horizons_h``: whole hours, increasing, at most a day (seasonal naive looks a day back from
        the target). Times given to ``observe`` are on the series' clock; ``time_scale`` (its seconds per
        second of the issuer's clock) scales what is published and stored, as ``serving.Server`` does."""
        horizons = [int(h) for h in horizons_h]
        if not horizons or horizons != sorted(set(horizons)) or horizons[0] < 1 or horizons[-1] > 24 \
                or any(h != x for h, x in zip(horizons, horizons_h, strict=True)):
            raise ValueError(f"hours-ahead horizons must be increasing whole hours from 1 to 24, got {list(horizons_h)}")
        if not step_s > 0 or HOUR_S % step_s or not time_scale > 0 or 0.5 not in quantiles:
            raise ValueError("the step must divide an hour, the time scale be positive, and 0.5 be a quantile")
        self.horizons_h = tuple(horizons)
        self.step_s = step_s
        self.steps = [round(h * HOUR_S / step_s) for h in horizons]
        self.day = round(DAY_S / step_s)
        self.capacity = max(round(history_days * DAY_S / step_s), self.day + self.steps[-1])
        self.min_fit = round(min_fit_days * DAY_S / step_s)
        self.refit_s = refit_s
        self.quantiles = tuple(quantiles)
        self.time_scale = time_scale
        self.window = max(1, round(score_days * DAY_S / step_s))
        self.min_scored = min_scored
        self.max_series = max_series
        self.bands = Bands(len(horizons), max(1, round(band_days * DAY_S / step_s)), band_min_errors,
                           every=max(1, round(HOUR_S / step_s)))  # the error quantiles: once an hour
        self.index: dict[str, int] = {}
        """series key (a queue, ``class:<group>``, ``demand.TOTAL``) -> row"""
        self.history: list[_History] = []
        self.errors = np.full((0, len(horizons), len(CANDIDATES), self.window), np.nan, dtype=np.float32)
        """(row, horizon, candidate, the last ``window`` scored targets): actual minus forecast"""
        self.at = [0] * len(horizons)
        self._issued: OrderedDict[float, np.ndarray] = OrderedDict()
        """origin -> every candidate's forecast (rows, horizons, candidates)"""
        self._served: OrderedDict[float, np.ndarray] = OrderedDict()
        """origin -> the p50 published (rows, horizons): what the bands are calibrated on"""
        self.last: float | None = None
        self.dropped = 0
        """series not kept (``max_series`` reached)"""

    # -- the series -------------------------------------------------------------------------------

    def on_grid(self, t: float) -> bool:
        """Is ``t`` (series clock) a boundary of the 10-minute grid?"""
        if not math.isfinite(t):
            return False
        k = t / self.step_s
        return abs(k - round(k)) < 1e-6

    def _row(self, key: str, t: float) -> int | None:
        i = self.index.get(key)
        if i is None:
            if len(self.index) >= self.max_series:
                self.dropped += 1
                return None
            i = self.index[key] = len(self.index)
            self.history.append(_History(t, np.zeros(0)))
            extra = np.full((1, *self.errors.shape[1:]), np.nan, dtype=np.float32)
            self.errors = np.concatenate([self.errors, extra])
        return i

    def _append(self, h: _History, t: float, value: float) -> None:
        at = round((t - h.start) / self.step_s)
        n = len(h.values)
        if at >= n + self.capacity or n == 0:  # a gap longer than the history kept: start again
            h.start, h.values, h.weights, h.fitted_at = t, np.array([value]), None, None
            return
        if at < n:
            return
        h.values = np.concatenate([h.values, np.full(at - n, np.nan), [value]])
        if len(h.values) > self.capacity:
            drop = len(h.values) - self.capacity
            h.values = h.values[drop:]
            h.start += drop * self.step_s

    # -- a step -----------------------------------------------------------------------------------

    def observe(self, t: float, values: Mapping[str, float]) -> HoursStep | None:
        """The demand per series at ``t`` (series clock: a closed minute's end). Off the 10-minute grid,
        or not after the last boundary stepped: nothing (None). On it: every series one point, the
        forecasts whose target this is scored, and this origin's forecasts."""
        if not self.on_grid(t) or (self.last is not None and t <= self.last):
            return None
        self.last = t
        for key in values:
            self._row(key, t)
        n = len(self.index)
        actual = np.full(n, np.nan)
        for key, i in self.index.items():  # a series known but not given: a gap
            v = values.get(key)
            x = float(v) if isinstance(v, int | float) and math.isfinite(v) else float("nan")
            self._append(self.history[i], t, x)
            actual[i] = self.history[i].values[-1]
        self._score(t, actual)
        forecasts = np.full((n, len(self.steps), len(CANDIDATES)), np.nan)
        origin = np.zeros(n)
        models: list[tuple[str, ...]] = []
        reasons: list[tuple[str | None, ...]] = []
        served = np.zeros((n, len(self.steps)))
        keys = sorted(self.index, key=self.index.__getitem__)
        for i, key in enumerate(keys):
            forecasts[i], origin[i] = self._candidates(key, self.history[i], t)
            row_models, row_reasons = [], []
            for j in range(len(self.steps)):
                c, why = self._choose(i, j)
                served[i, j] = forecasts[i, j, c] if np.isfinite(forecasts[i, j, c]) else origin[i]  # never NaN
                row_models.append(CANDIDATES[c])
                row_reasons.append(why)
            models.append(tuple(row_models))
            reasons.append(tuple(row_reasons))
        raw = np.repeat(served[:, :, None], len(self.quantiles), axis=2)
        calibrated = self.bands.apply(raw, self.quantiles)
        for q, quantile in enumerate(self.quantiles):  # demand is never negative
            if quantile < 0.5:
                calibrated[:, :, q] = np.maximum(calibrated[:, :, q], 0.0)
        self._issued[t] = forecasts
        self._served[t] = served
        oldest = t - self.steps[-1] * self.step_s
        for book in (self._issued, self._served):
            while book and next(iter(book)) < oldest:
                book.popitem(last=False)
        return HoursStep(t, tuple(keys), calibrated, origin, tuple(models), tuple(reasons))

    def _candidates(self, key: str, h: _History, t: float) -> tuple[np.ndarray, float]:
        """(horizons, candidates) forecasts from origin ``t`` and the origin's value."""
        out = np.full((len(self.steps), len(CANDIDATES)), np.nan)
        s = h.series(key, self.step_s)
        filled = _filled(h.values)
        now = float(filled[-1])
        n = len(filled)
        if n >= self.min_fit and (h.fitted_at is None or t - h.fitted_at >= self.refit_s):
            h.fitted_at = t
            try:
                h.weights = {k: w for k in self.steps if (w := fit_weights(s, k, validate=self.day)) is not None}
            except (np.linalg.LinAlgError, ValueError, FloatingPointError):
                h.weights = None
        ridge = forecast_at(s, h.weights) if h.weights else {}
        for j, k in enumerate(self.steps):
            out[j, 0] = now
            back = n - 1 + k - self.day
            if back >= 0:
                out[j, 1] = filled[back]
            out[j, 2] = ridge.get(k, np.nan)
        return out, now

    def _score(self, t: float, actual: np.ndarray) -> None:
        """Every forecast whose target is ``t``: each candidate's error (the choice), the served p50's (the bands)."""
        for j, k in enumerate(self.steps):
            origin = t - k * self.step_s
            served = self._served.get(origin)
            if served is not None:
                self.bands.add(j, actual[:len(served)] - served[:, j])
            issued = self._issued.get(origin)
            if issued is None:
                continue
            m = len(issued)
            self.errors[:, j, :, self.at[j]] = np.nan
            self.errors[:m, j, :, self.at[j]] = actual[:m, None] - issued[:, j, :]
            self.at[j] = (self.at[j] + 1) % self.window

    def _choose(self, i: int, j: int) -> tuple[int, str | None]:
        """The candidate served for row ``i`` at horizon ``j`` (its index) and why persistence is, if it is."""
        e = np.roll(self.errors[i, j], -self.at[j], axis=1).astype(np.float64)  # oldest first: the test's lags
        base = e[0]
        winner, ratio, scored, best_not = 0, math.inf, {}, None
        for c in range(1, len(CANDIDATES)):
            ok = np.isfinite(base) & np.isfinite(e[c])
            scored[c] = int(ok.sum())
            if scored[c] < self.min_scored:
                continue
            sq_c, sq_p = e[c][ok] ** 2, base[ok] ** 2
            rc, rp = math.sqrt(float(sq_c.mean())), math.sqrt(float(sq_p.mean()))
            r = rc / rp if rp > 0 else (1.0 if rc == 0 else math.inf)
            if rc < (1.0 - NEAR) * rp and better(sq_c, sq_p, self.steps[j]) and r < ratio:
                winner, ratio = c, r
            if best_not is None or r < best_not[0]:
                best_not = (r, c, rc, rp)
        if winner:
            return winner, None
        ridge = CANDIDATES.index(RIDGE)
        h = self.history[i]
        if scored[ridge] < self.min_scored:
            if h.weights is None:
                hist_h = len(h.values) * self.step_s / HOUR_S
                return 0, f"too little history: {hist_h:.0f} h (the ridge needs {self.min_fit * self.step_s / HOUR_S:.0f})"
            return 0, f"too few scored ridge forecasts: {scored[ridge]} of {self.min_scored}"
        assert best_not is not None
        _, c, rc, rp = best_not
        return 0, f"{CANDIDATES[c]} not better than persistence on recent errors (RMSE {rc:.3g} vs {rp:.3g})"

    # -- what is published and stored --------------------------------------------------------------

    @property
    def path_steps(self) -> int:
        return self.horizons_h[-1]

    def path(self, step: HoursStep, i: int) -> tuple[tuple[float, ...], ...]:
        """Row ``i``'s (Q, ``path_steps``) hourly path: the horizons' forecasts, the hours between them
        interpolated, the hours before the first from the origin's value (0 h)."""
        xp = [0.0, *map(float, self.horizons_h)]
        grid = np.arange(1, self.path_steps + 1, dtype=np.float64)
        return tuple(tuple(float(x) for x in np.interp(grid, xp, [step.origin[i], *step.values[i, :, q]]))
                     for q in range(len(self.quantiles)))

    def who(self, step: HoursStep, i: int) -> tuple[str, str]:
        """(model, model_version) of row ``i``'s message: persistence with the longest horizon's reason
        where it serves every horizon, else the model of the longest horizon a model serves, the version
        naming who serves which horizon (``hours: ridge at 360, 720 min; persistence at 180 min``: the
        minute path's convention, persistence last)."""
        models, reasons = step.models[i], step.reasons[i]
        if all(m == PERSISTENCE for m in models):
            return PERSISTENCE, f"baseline: {reasons[-1]}"[:253]
        at: dict[str, list[str]] = {}
        for m, h in zip(models, self.horizons_h, strict=True):
            at.setdefault(m, []).append(f"{h * 60:g}")
        parts = [f"{m} at {', '.join(v)} min" for m, v in at.items() if m != PERSISTENCE]
        if PERSISTENCE in at:
            parts.append(f"{PERSISTENCE} at {', '.join(at[PERSISTENCE])} min")
        model = next(m for m in reversed(models) if m != PERSISTENCE)
        return model, f"hours: {'; '.join(parts)}"[:253]

    @staticmethod
    def labels(cluster: str, key: str) -> dict[str, str]:
        """The minute path's labels of a demand series (queue, class, neither for the total) and ``horizon``."""
        return {**demand_labels(cluster, demand_key(cluster, key)[2]), HORIZON_LABEL[0]: HORIZON_LABEL[1]}

    def events(self, step: HoursStep, cluster: str, issued_at: float, emitted_at: float,
               source: str) -> list[DemandPredicted]:
        """One ``DemandPredicted`` per (model, version), metric ``gpus_requested``, ``issued_at`` on the
        issuer's clock, an hourly path (``step_s`` ``3600 / time_scale``)."""
        groups: dict[tuple[str, str], list[DemandSeries]] = {}
        for i, key in enumerate(step.keys):
            groups.setdefault(self.who(step, i), []).append(
                DemandSeries(metric="gpus_requested", labels=self.labels(cluster, key), values=self.path(step, i)))
        hour = HOUR_S / self.time_scale
        return [DemandPredicted(source=source, emitted_at=emitted_at, cluster=cluster, model=model,
                                model_version=version, issued_at=issued_at, start=issued_at + hour, step_s=hour,
                                horizon_steps=self.path_steps, quantiles=self.quantiles, series=tuple(series))
                for (model, version), series in sorted(groups.items())]

    def points(self, step: HoursStep, cluster: str, issued_at: float) -> list[Point]:
        """``forecast_points`` rows: p10 / p50 / p90 of every series at each horizon (horizon seconds on
        the issuer's clock), each with the model that served that point (persistence: its reason)."""
        q10, q50, q90 = (self.quantiles.index(q) if q in self.quantiles else -1 for q in (0.1, 0.5, 0.9))
        out = []
        for i, key in enumerate(step.keys):
            name = series_name(demand_key(cluster, key))
            for j, h in enumerate(self.horizons_h):
                v = step.values[i, j]
                m, why = step.models[i][j], step.reasons[i][j]
                version = f"baseline: {why}"[:253] if m == PERSISTENCE else f"hours: {m}"
                out.append(Point(name, issued_at, h * HOUR_S / self.time_scale, float(v[q50]),
                                 float(v[q90]) if q90 >= 0 else float("nan"), m, version, why or "",
                                 float(v[q10]) if q10 >= 0 else float("nan")))
        return out
