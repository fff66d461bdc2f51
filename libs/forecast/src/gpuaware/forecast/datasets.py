"""Trace files -> Series, and the train/validate/test splits the evaluations use.

Three public traces (../shared/data, each folder's PROVENANCE.txt says where it comes from):

* Helios (SenseTime Earth, May 2020): one CSV per virtual cluster, one row per minute. Demand is
  ``running_gpu_num + pending_gpu_num``: GPUs held plus GPUs queued jobs wait for, i.e. what the VC
  would use if capacity were unlimited (the issue's definition).
* Philly node sequence (Oct-Dec 2017): active nodes per minute. The published setup
  (HeliosArtifact CES_Philly.py) resamples to the 10-minute max; train October, validate November,
  test 2017-12-01..14. Minutes that are missing stay gaps; ``active == 0`` rows (outage-like) are
  kept as observed, because the published persistence figure (RMSE 10.33) counts them.
* GenTD26 (Alibaba GenAI serving): per-pod GPU duty cycle every 57 s for ~23 h; put on a 60-s grid
  (mean per minute) so horizons in minutes are whole steps; the minutes no sample falls in are gaps.

Times are parsed as UTC (the traces carry no zone; only their time of day matters to the models).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from gpuaware.forecast.series import Series, SeriesError, regularise

__all__ = ["FORMATS", "Split", "load", "load_gentd26", "load_helios", "load_philly", "split_last_days",
           "split_philly"]

FORMATS = ("helios", "philly", "gentd26")
DAY_S = 86_400.0


@dataclasses.dataclass(frozen=True)
class Split:
    """Index ranges into one series: fit on [0, train_end), pick on [train_end, valid_end), test after."""

    train_end: int
    valid_end: int
    test_end: int

    def describe(self, s: Series) -> dict[str, str]:
        def at(i: int) -> str:
            return str(pd.Timestamp(s.start + i * s.step_s, unit="s"))
        return {"train": f"{at(0)} .. {at(self.train_end)}", "validate": f"{at(self.train_end)} .. {at(self.valid_end)}",
                "test": f"{at(self.valid_end)} .. {at(self.test_end)}"}


def _read(path: Path, columns: list[str]) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise SeriesError(f"{path}: file not found")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise SeriesError(f"{path}: not a readable CSV ({err})") from err
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SeriesError(f"{path}: columns {missing} missing (has {list(frame.columns)[:8]})")
    return frame


def _epoch(column: pd.Series, path: Path) -> np.ndarray:
    parsed = pd.to_datetime(column, errors="coerce", utc=True)
    bad = int(parsed.isna().sum())
    if bad == len(parsed):
        raise SeriesError(f"{path}: no parseable timestamps in `time`")
    # resolution-independent (pandas 3 parses to microseconds): seconds since the epoch, NaN if unparsed
    return ((parsed - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64, na_value=np.nan)


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)


def load_helios(path: Path) -> list[Series]:
    """A VC's ``*_cluster_sequence_vc.csv`` (or a folder of them) -> demand series, one per VC, 60-s step."""
    path = Path(path)
    files = sorted(path.glob("*_cluster_sequence_vc.csv")) if path.is_dir() else [path]
    if not files:
        raise SeriesError(f"{path}: no *_cluster_sequence_vc.csv files")
    out = []
    for f in files:
        frame = _read(f, ["time", "running_gpu_num", "pending_gpu_num"])
        demand = _numeric(frame, "running_gpu_num") + _numeric(frame, "pending_gpu_num")
        name = f.name.removesuffix("_cluster_sequence_vc.csv").removesuffix(".csv")
        out.append(regularise(name, _epoch(frame["time"], f), demand, 60.0, agg="last"))
    return out


def load_philly(path: Path) -> list[Series]:
    """``philly_node_sequence.csv`` -> active nodes, 10-minute max (the published setup)."""
    frame = _read(Path(path), ["time", "active"])
    return [regularise("philly", _epoch(frame["time"], Path(path)), _numeric(frame, "active"), 600.0, agg="max")]


def load_gentd26(path: Path, min_points: int = 60) -> list[Series]:
    """``pod_gpu_duty_cycle_anon.csv`` -> one duty-cycle series per pod (60-s grid, mean); pods with fewer
    than ``min_points`` samples are left out (named in the first series' notes)."""
    frame = _read(Path(path), ["value", "timestamp_anon", "container_ip"])
    t = pd.to_numeric(frame["timestamp_anon"], errors="coerce").to_numpy(dtype=np.float64)
    v = _numeric(frame, "value")
    start, end = np.nanmin(t), np.nanmax(t)
    out, short = [], []
    for pod, idx in frame.groupby("container_ip").indices.items():
        if len(idx) < min_points:
            short.append(str(pod)[:8])
            continue
        out.append(regularise(str(pod)[:12], t[idx], v[idx], 60.0, agg="mean", start=start, end=end))
    if not out:
        raise SeriesError(f"{path}: no pod with {min_points} samples")
    if short:
        out[0] = dataclasses.replace(out[0], notes=(*out[0].notes, f"{len(short)} pods under {min_points} samples left out"))
    return out


def load(path: Path, fmt: str) -> list[Series]:
    loaders = {"helios": load_helios, "philly": load_philly, "gentd26": load_gentd26}
    if fmt not in loaders:
        raise SeriesError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    return loaders[fmt](Path(path))


def split_philly(s: Series) -> Split:
    """Train 2017-10-03..10-31, validate November, test 2017-12-01 00:00 .. 12-14 23:50 (2016 points)."""
    def at(text: str) -> int:
        return s.index_of(pd.Timestamp(text, tz="UTC").timestamp())
    return Split(at("2017-11-01"), at("2017-12-01"), at("2017-12-15"))


def split_last_days(s: Series, test_days: float, valid_days: float = 1.0) -> Split:
    """The last ``test_days`` held out for test, the ``valid_days`` before them for model selection."""
    test = round(test_days * DAY_S / s.step_s)
    valid = round(valid_days * DAY_S / s.step_s)
    if test + valid >= len(s):
        raise SeriesError(f"{s.name}: {len(s)} steps cannot hold {test_days} test + {valid_days} validation days "
                          "and still leave training data")
    return Split(len(s) - test - valid, len(s) - test, len(s))
