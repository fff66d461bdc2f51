"""What the policies see of the future: forecasts issued at each step for the steps after it.

A policy deciding at the end of step ``o`` reads row ``o`` of an ``Outlook``: ``point[o, j]`` (the
forecast) and ``upper[o, j]`` (its p90) for step ``o + 1 + j``, issued with the demand up to step ``o``
known. NaN where nothing was forecast (past the end of the range forecast, as the published CES
simulation's forecast window shortens at the end of its range).

Two sources:

* ``persistence_outlook``: every step ahead is the step just observed (no band: upper = point);
* ``served_outlook``: gpuaware's served forecast for the Philly node sequence, from
  ``gpuaware.forecast``'s own recipe (``prepare`` / ``run``, what ``gpuaware forecast evaluate`` runs):
  the file loaded as the forecasting library loads it (10-minute max), the published split (fit on
  October, the served model chosen per horizon on November, forecast over December 1-14), per horizon
  the forecast ``selection.choose`` serves among the baselines and the ridge on lags and calendar, and
  its p10 / p90 band calibrated on its recent errors. That API speaks minutes and forecasts targets:
  ``forecasts[h][k]`` is target ``k`` of the test range from origin ``k - h``. Here it is turned round
  to origins, at whole steps (10, 20, ... minutes), without changing the library.
  ``window="validate"`` runs the same recipe one month earlier (fit on Oct 3-16, choose on Oct 17-31,
  forecast November), so a policy's settings can be judged on November without touching December.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

__all__ = ["MONTH_BEFORE", "Outlook", "persistence_outlook", "served_outlook"]

MONTH_BEFORE = ("2017-10-17", "2017-11-01", "2017-12-01")
"""the published split moved one month earlier, for November: fit before, choose up to, forecast up to"""


@dataclasses.dataclass(frozen=True)
class Outlook:
    """Forecasts by origin: ``point[o, j]`` and ``upper[o, j]`` are for step ``o + 1 + j``."""

    name: str
    start: float
    """epoch seconds of origin 0 (the first step of the replayed range)"""
    step_s: float
    point: np.ndarray
    upper: np.ndarray
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    """where the forecast came from: the models served per horizon, accuracy, band coverage"""

    @property
    def horizon(self) -> int:
        return int(self.point.shape[1])


def persistence_outlook(active: np.ndarray, horizon: int, start: float = 0.0, step_s: float = 600.0) -> Outlook:
    """The last observation for every step ahead, up to ``horizon`` steps (NaN past the range's end)."""
    a = np.asarray(active, dtype=np.float64)
    n = len(a)
    point = np.repeat(a[:, None], horizon, axis=1)
    ahead = np.arange(n)[:, None] + 1 + np.arange(horizon)[None, :]
    point[ahead >= n] = np.nan
    return Outlook("persistence", start, step_s, point, point.copy(), {"model": "persistence"})


def _by_origin(by_target: dict[int, np.ndarray], n: int, horizon: int) -> np.ndarray:
    """``by_target[h][k]`` (target ``k`` from origin ``k - h``) -> ``out[o, h - 1]`` (origin ``o``, target
    ``o + h``), NaN where the target lies past the range."""
    out = np.full((n, horizon), np.nan)
    for h in range(1, horizon + 1):
        origins = np.arange(0, n - h)
        out[origins, h - 1] = by_target[h][origins + h]
    return out


def served_outlook(path: Path, horizon: int, window: Literal["test", "validate"] = "test") -> Outlook:
    """gpuaware's served forecast and its p90, 1 .. ``horizon`` ten-minute steps ahead of each origin of
    the Philly test range -- or, with ``window="validate"``, of November, from the same recipe run one
    month earlier (module docstring).

    Loads torch through ``gpuaware.forecast`` (its evaluation recipe lives beside the LSTM)."""
    from gpuaware.forecast import prepare, rmse, run

    prepared = prepare([Path(path)], "philly")
    if window == "validate":
        p = prepared[0]
        at = [p.series.index_of(pd.Timestamp(when, tz="UTC").timestamp()) for when in MONTH_BEFORE]
        split = dataclasses.replace(p.split, train_end=at[0], valid_end=at[1], test_end=at[2])
        prepared = [dataclasses.replace(p, split=split)]
    series, split = prepared[0].series, prepared[0].split
    minutes = [round(h * series.step_s / 60.0) for h in range(1, horizon + 1)]
    result = run(prepared, minutes, None).results[0]
    n = split.test_end - split.valid_end
    steps = dict(zip(range(1, horizon + 1), minutes, strict=True))
    point = _by_origin({h: result.forecasts["served"][m] for h, m in steps.items()}, n, horizon)
    upper = _by_origin({h: result.bands["served"][m].p90 for h, m in steps.items()}, n, horizon)
    upper = np.where(np.isfinite(upper), np.maximum(upper, point), point)  # no band yet: the point itself
    info = {"model": "served", "split": split.describe(series), "series_notes": list(series.notes),
            "served_per_horizon_min": {str(m): result.served[m] for m in minutes},
            "rmse_at_min": {str(m): rmse(result.actual, result.forecasts["served"][m]) for m in minutes},
            "coverage_p90_at_min": result.metrics()["served"]["coverage_p90_at"]}
    return Outlook("served", series.start + split.valid_end * series.step_s, series.step_s, point, upper, info)
