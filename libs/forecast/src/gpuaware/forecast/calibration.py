"""Calibrated quantiles: p10 / p90 around any point forecast, from its own recent errors.

A point forecast alone does not say how much head-room a consumer must keep. The band here is split
conformal prediction run as time goes on: the p10 (p90) forecast for a target is the point forecast
plus the 10th (90th) percentile of the model's errors (actual minus forecast) over the last
``window`` targets whose values were known at the forecast's origin -- one horizon earlier, so no
error the origin could not have seen is used. The errors start from the range before the evaluated
one (the validation range), so the first forecasts have a full window.

Why this and not the LSTM's own quantile outputs: the band must hold for whichever model is served
(persistence included), and the errors of the last day describe the regime the series is in now (a
busy week, a quiet weekend), which a model's quantiles fitted months ago do not. The caller picks
the window (the evaluation: three days). Coverage is
measured, not assumed (``coverage``): the share of observed targets at or under p90, and between p10
and p90.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["QUANTILES", "Band", "Bands", "band", "coverage", "coverage_counts"]

QUANTILES = (0.1, 0.9)


@dataclass(frozen=True, slots=True)
class Band:
    """The p10 and p90 forecasts aligned with the point forecast's targets."""

    p10: np.ndarray
    p90: np.ndarray


def band(actual: np.ndarray, forecast: np.ndarray, h: int, window: int, *, before: int,
         min_errors: int = 30) -> Band:
    """p10 / p90 for the targets ``[before, len(actual))``.

    ``actual`` and ``forecast`` run over the calibration range followed by the evaluated range (the
    first ``before`` entries calibrate only); ``h`` is the horizon in steps; ``window`` how many past
    targets' errors count. A target with fewer than ``min_errors`` known errors gets no band (NaN)."""
    errors = pd.Series(np.asarray(actual, dtype=np.float64) - np.asarray(forecast, dtype=np.float64))
    rolling = errors.rolling(window, min_periods=min_errors)
    lo_q = rolling.quantile(QUANTILES[0]).to_numpy()
    hi_q = rolling.quantile(QUANTILES[1]).to_numpy()
    idx = np.arange(before, len(errors)) - h  # the newest target known at each forecast's origin
    p10 = np.full(len(idx), np.nan)
    p90 = np.full(len(idx), np.nan)
    ok = idx >= 0
    point = np.asarray(forecast, dtype=np.float64)[before:]
    p10[ok] = point[ok] + lo_q[idx[ok]]
    p90[ok] = point[ok] + hi_q[idx[ok]]
    return Band(np.minimum(p10, point), np.maximum(p90, point))


def coverage_counts(actual: np.ndarray, b: Band) -> dict[str, int]:
    """How many observed targets have a band (``n``), and how many of them lie at or under p90 and
    within [p10, p90]: counts add up across series, shares do not."""
    ok = np.isfinite(actual) & np.isfinite(b.p10) & np.isfinite(b.p90)
    a = actual[ok]
    return {"n": int(ok.sum()), "p90": int((a <= b.p90[ok]).sum()),
            "p10_p90": int(((a >= b.p10[ok]) & (a <= b.p90[ok])).sum())}


def coverage(actual: np.ndarray, b: Band) -> dict[str, float | None]:
    """Share of observed targets with a band that lie at or under p90, and within [p10, p90]; None
    where no target counts."""
    c = coverage_counts(actual, b)
    if not c["n"]:
        return {"p90": None, "p10_p90": None}
    return {"p90": c["p90"] / c["n"], "p10_p90": c["p10_p90"] / c["n"]}


class Bands:
    """``band`` as a service runs it: every series' last ``window`` errors per horizon, as they become
    known, and the quantiles a step publishes put around its point forecast.

    ``add(j, errors)`` takes one target's errors (actual minus the p50 that was published for it, one
    per series; NaN where unknown) at horizon index ``j``; ``apply`` replaces every quantile but the
    median by the median plus that quantile of the series' recent errors, once a series has
    ``min_errors`` of them at that horizon (until then the forecaster's own quantiles stand). Memory:
    ``window`` 4-byte floats per series and horizon (a day of minutes at three horizons: 17 KB a series). The error quantiles are recomputed every ``every`` steps
    (a sort of the window per series): a band follows the regime, not each minute."""

    def __init__(self, horizons: int, window: int = 1440, min_errors: int = 30, every: int = 10) -> None:
        if window < 1 or min_errors < 1 or every < 1:
            raise ValueError("window, min_errors and every must be at least 1")
        self.window, self.min_errors, self.every = window, min_errors, every
        self.errors = [np.full((0, window), np.nan, dtype=np.float32) for _ in range(horizons)]
        self.at = [0] * horizons
        self._offsets: dict[float, list[np.ndarray]] = {}
        self._age = every

    def _grow(self, j: int, n: int) -> np.ndarray:
        e = self.errors[j]
        if len(e) < n:
            e = self.errors[j] = np.vstack([e, np.full((n - len(e), self.window), np.nan, dtype=np.float32)])
        return e

    def add(self, j: int, errors: np.ndarray) -> None:
        e = self._grow(j, len(errors))
        e[:, self.at[j]] = np.nan
        e[:len(errors), self.at[j]] = np.where(np.isfinite(errors), errors, np.nan)  # an infinite one: unknown
        self.at[j] = (self.at[j] + 1) % self.window

    def known(self, j: int) -> np.ndarray:
        """Errors each series has at horizon index ``j``."""
        return np.isfinite(self.errors[j]).sum(axis=1)

    def _offset(self, q: float, n: int) -> list[np.ndarray]:
        out = []
        for e in self.errors:
            off = np.full(n, np.nan)
            rows = e[:n]
            enough = np.isfinite(rows).sum(axis=1) >= self.min_errors
            if enough.any():
                off[:len(rows)][enough] = np.nanquantile(rows[enough], q, axis=1)
            out.append(off)
        return out

    def apply(self, values: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
        """``values`` (n, H, Q) with the median among ``quantiles`` -> calibrated copy (each quantile
        below the median at most the median, above it at least)."""
        if 0.5 not in quantiles:
            return values
        n = values.shape[0]
        self._age += 1
        if self._age >= self.every or any(len(o[0]) < n for o in self._offsets.values()) \
                or any(q != 0.5 and q not in self._offsets for q in quantiles):  # another set (a reload's)
            self._offsets = {q: self._offset(q, n) for q in quantiles if q != 0.5}
            self._age = 0
        out = values.copy()
        median = values[:, :, list(quantiles).index(0.5)]
        for k, q in enumerate(quantiles):
            if q == 0.5:
                continue
            for j, off in enumerate(self._offsets[q]):
                o = off[:n]
                ok = np.isfinite(o)
                bound = median[ok, j] + o[ok]
                out[ok, j, k] = np.minimum(bound, median[ok, j]) if q < 0.5 else np.maximum(bound, median[ok, j])
        return out
