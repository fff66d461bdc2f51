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

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["QUANTILES", "Band", "band", "coverage", "coverage_counts"]

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
