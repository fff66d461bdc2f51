"""The node-count series a power policy is replayed on: Philly's busy nodes per 10 minutes.

The Helios artifact's CES service (HeliosArtifact ``framework/CES Service/CES_Philly.py``) reads
``philly_node_sequence.csv`` (one row per minute: ``time``, ``active`` nodes running at least one job,
``total`` nodes in the cluster) and resamples it to 10 minutes taking the max, so a step's demand is the
most nodes busy at any minute of it: a policy that covers the max covers every minute. This module does
the same and says what the file lacks instead of hiding it:

* minutes missing from the file are counted; a step with some minutes missing takes the max of the
  minutes present; a step with none is a gap (NaN) -- ``held`` gives the last observation held for a
  replay, and the notes say how many steps were held;
* rows with ``active == 0`` (outage-like: the whole cluster idle for a few minutes) are kept as
  observed, as the published setup and ``gpuaware.forecast``'s loader keep them.

The published split (``CES_Philly.py``: train before November, validate November, simulate
2017-12-01 00:00 .. 12-14 23:59) is ``PHILLY_SPLIT``; ``window`` cuts a series to one of its ranges.
Times are UTC epoch seconds (the file carries no zone; only the time of day matters).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["PHILLY_FILE", "PHILLY_SPLIT", "NodeSeries", "NodeSeriesError", "load_node_series"]

PHILLY_FILE = Path("philly-node-sequence") / "philly_node_sequence.csv"
"""where the file lies under the shared data folder (``gpuaware.sim.shared_data_dir()``)"""
PHILLY_SPLIT = {"train": ("2017-10-03 00:00", "2017-11-01 00:00"),
                "validate": ("2017-11-01 00:00", "2017-12-01 00:00"),
                "test": ("2017-12-01 00:00", "2017-12-15 00:00")}
"""the published ranges, [from, to) in UTC: the test range is 2016 ten-minute steps"""
STEP_S = 600.0


class NodeSeriesError(ValueError):
    """A file that cannot become a node series (absent, not CSV, columns missing); the message says which."""


@dataclasses.dataclass(frozen=True)
class NodeSeries:
    """Busy and total nodes on a regular grid: index ``i`` is the step starting at ``start + i * step_s``."""

    name: str
    start: float
    """epoch seconds (UTC) of step 0"""
    step_s: float
    active: np.ndarray
    """float64: the most nodes busy in any minute of the step; NaN where no minute was recorded"""
    total: np.ndarray
    """float64: the most nodes the cluster had in the step; NaN where no minute was recorded"""
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.active)

    @property
    def times(self) -> np.ndarray:
        return self.start + self.step_s * np.arange(len(self.active), dtype=np.float64)

    def index_of(self, when: str) -> int:
        """The first step starting at or after ``when`` (a UTC date-time text), clipped to the series."""
        t = pd.Timestamp(when, tz="UTC").timestamp()
        return int(np.clip(np.ceil((t - self.start) / self.step_s - 1e-9), 0, len(self.active)))

    def window(self, lo: str, hi: str) -> NodeSeries:
        """The steps starting in [lo, hi), with a note of the gaps inside them."""
        a, b = self.index_of(lo), self.index_of(hi)
        gaps = int(np.isnan(self.active[a:b]).sum())
        notes = (*self.notes, f"window {lo} .. {hi}: {b - a} steps, {gaps} without a sample")
        return dataclasses.replace(self, start=self.start + a * self.step_s, active=self.active[a:b],
                                   total=self.total[a:b], notes=notes)

    def held(self) -> tuple[np.ndarray, np.ndarray]:
        """(active, total) as integers with gaps holding the last observation (the first one for leading
        gaps): what a replay consumes. How many steps were held is ``window``'s note."""
        def fill(v: np.ndarray) -> np.ndarray:
            s = pd.Series(v).ffill().bfill()
            return np.nan_to_num(s.to_numpy(dtype=np.float64), nan=0.0).astype(np.int64)
        return fill(self.active), fill(self.total)


def load_node_series(path: Path, step_s: float = STEP_S, name: str = "philly") -> NodeSeries:
    """``philly_node_sequence.csv`` -> a ``NodeSeries`` on a ``step_s`` grid (max per step, the published
    resample); the notes count missing minutes, partial steps, empty steps and outage-like zeros."""
    path = Path(path)
    if not path.is_file():
        raise NodeSeriesError(f"{path}: file not found")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise NodeSeriesError(f"{path}: not a readable CSV ({err})") from err
    missing = [c for c in ("time", "active", "total") if c not in frame.columns]
    if missing:
        raise NodeSeriesError(f"{path}: columns {missing} missing (has {list(frame.columns)[:8]})")
    parsed = pd.to_datetime(frame["time"], errors="coerce", utc=True)
    seconds = ((parsed - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64,
                                                                                         na_value=np.nan)
    active = pd.to_numeric(frame["active"], errors="coerce").to_numpy(dtype=np.float64)
    total = pd.to_numeric(frame["total"], errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(seconds) & np.isfinite(active) & np.isfinite(total)
    if not ok.any():
        raise NodeSeriesError(f"{path}: no row with a time, an active and a total count")
    notes = [] if ok.all() else [f"{int((~ok).sum())} unreadable rows dropped"]
    seconds, active, total = seconds[ok], active[ok], total[ok]
    t0 = float(np.floor(seconds.min() / step_s) * step_s)
    n = int(np.floor((seconds.max() - t0) / step_s)) + 1
    slot = np.floor((seconds - t0) / step_s).astype(np.int64)
    per_step = pd.DataFrame({"slot": slot, "minute": seconds, "active": active, "total": total}).groupby("slot")
    out_active, out_total = np.full(n, np.nan), np.full(n, np.nan)
    out_active[per_step["active"].max().index.to_numpy()] = per_step["active"].max().to_numpy(dtype=np.float64)
    out_total[per_step["total"].max().index.to_numpy()] = per_step["total"].max().to_numpy(dtype=np.float64)
    expected = round(float(seconds.max() - seconds.min()) / 60.0) + 1
    present = len(np.unique(seconds))
    per_slot = round(step_s / 60.0)
    counts = per_step["minute"].nunique()
    partial = int((counts < per_slot).sum())
    empty = int(np.isnan(out_active).sum())
    notes.append(f"{expected - present} of {expected} minutes missing: {partial} steps take the max of the "
                 f"minutes they have, {empty} of {n} steps have none (gaps)")
    if len(seconds) > present:
        notes.append(f"{len(seconds) - present} duplicate minutes combined by max")
    zeros = int((active == 0).sum())
    if zeros:
        notes.append(f"{zeros} minutes with active == 0 (outage-like) kept as observed")
    return NodeSeries(name=name, start=t0, step_s=float(step_s), active=out_active, total=out_total,
                      notes=tuple(notes))
