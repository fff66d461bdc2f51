"""A regular time series with its gaps made explicit, and the checks that decide whether a model may run.

Every forecaster here (baselines, LSTM, the streaming ONNX model) works on a regular grid: one value
per ``step_s``. Raw inputs are not regular: trace files and rollups have duplicate timestamps, missing
minutes, NaNs and counter resets. ``regularise`` turns any (time, value) pairs into a ``Series`` whose
``values`` carry NaN where nothing was observed, and ``filled()`` gives the model input (the last
observation held, flagged as not observed). Metrics are computed only where the target was observed,
so a filled gap never counts as a correct forecast.

Why a model must not be trusted on a series (too little history, constant, too many gaps, nothing
observed) is decided in one place, ``runtime.Streams.reasons``, step by step as the service runs;
callers then serve persistence and publish the reason.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import pandas as pd

__all__ = ["Series", "SeriesError", "regularise"]

Agg = Literal["mean", "max", "last", "sum"]


class SeriesError(ValueError):
    """Input that cannot become a series (no timestamps, non-numeric values); the message says which."""


@dataclasses.dataclass(frozen=True)
class Series:
    """Values on a regular grid: ``values[i]`` is the value at ``start + i * step_s`` (NaN: not observed)."""

    name: str
    start: float
    """epoch seconds (UTC) of ``values[0]``"""
    step_s: float
    values: np.ndarray
    """float64, NaN where nothing was observed"""
    notes: tuple[str, ...] = ()
    """what regularisation did (duplicates merged, gaps, non-finite values dropped)"""

    def __len__(self) -> int:
        return len(self.values)

    @property
    def times(self) -> np.ndarray:
        return self.start + self.step_s * np.arange(len(self.values), dtype=np.float64)

    @property
    def observed(self) -> np.ndarray:
        return np.isfinite(self.values)

    def filled(self) -> np.ndarray:
        """The last observation held across gaps; leading gaps take the first observation (0 if none)."""
        v = pd.Series(self.values).ffill().bfill().to_numpy(dtype=np.float64)
        return np.nan_to_num(v, nan=0.0)

    def index_of(self, t: float) -> int:
        """Index of the first grid point at or after epoch second ``t`` (clipped to the series)."""
        return int(np.clip(np.ceil((t - self.start) / self.step_s - 1e-9), 0, len(self.values)))

    def slice(self, lo: int, hi: int, name: str | None = None) -> Series:
        return dataclasses.replace(self, name=name or self.name, start=self.start + lo * self.step_s,
                                   values=self.values[lo:hi])

    def steps(self, minutes: float) -> int:
        """How many grid steps ``minutes`` is; refuses a horizon that is not a whole number of steps."""
        n = minutes * 60.0 / self.step_s
        if abs(n - round(n)) > 1e-6 or round(n) < 1:
            raise SeriesError(f"{minutes} min is not a whole number of {self.step_s:g}-s steps of {self.name}")
        return round(n)


def regularise(name: str, times: np.ndarray, values: np.ndarray, step_s: float, agg: Agg = "mean",
               start: float | None = None, end: float | None = None) -> Series:
    """(epoch seconds, value) pairs in any order -> a Series on a ``step_s`` grid.

    Duplicates and several samples in one step are combined with ``agg`` (the data's own rule: the
    Philly setup takes the 10-minute max); non-finite values are dropped before, so they become gaps
    rather than poisoning an aggregate; steps without a sample are NaN.
    """
    times = np.asarray(times, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if times.shape != values.shape or times.ndim != 1:
        raise SeriesError(f"{name}: times and values must be 1-d of one length, got {times.shape} and {values.shape}")
    notes: list[str] = []
    bad = ~np.isfinite(values) | ~np.isfinite(times)
    if bad.any():
        notes.append(f"{int(bad.sum())} non-finite samples dropped")
    times, values = times[~bad], values[~bad]
    if len(times) == 0:
        raise SeriesError(f"{name}: no finite samples")
    dup = len(times) - len(np.unique(times))
    if dup:
        notes.append(f"{dup} duplicate timestamps combined by {agg}")
    t0 = float(np.floor((times.min() if start is None else start) / step_s) * step_s)
    t1 = float(times.max() if end is None else end)
    n = int(np.floor((t1 - t0) / step_s)) + 1
    keep = (times >= t0) & (times < t0 + n * step_s)
    slot = np.floor((times[keep] - t0) / step_s).astype(np.int64)
    grouped = pd.Series(values[keep]).groupby(slot).agg(agg)
    out = np.full(n, np.nan)
    out[grouped.index.to_numpy()] = grouped.to_numpy(dtype=np.float64)
    gaps = int(np.isnan(out).sum())
    if gaps:
        notes.append(f"{gaps} of {n} steps without a sample (gaps)")
    return Series(name=name, start=t0, step_s=float(step_s), values=out, notes=tuple(notes))

