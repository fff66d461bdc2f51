"""Utilisation traces that drive the simulated fleet: real ones when the shared data is there.

Three sources, in order of preference:

* **GenTD26** (Alibaba cluster-trace-v2026-GenAI, ``gentd26/pod_gpu_duty_cycle_anon.csv``): the
  GPU duty cycle of each production Stable-Diffusion serving pod every 57 s over ~22.8 h. These are
  *device* utilisation values (percent) and are replayed verbatim. Research use only: read in place
  from the shared data folder, never copied into the repository.
* **Helios** (SenseTime Earth cluster, SC'21, CC-BY-4.0, ``helios/<vc>_cluster_sequence_vc.csv``):
  per virtual cluster and minute, the share of GPUs allocated to running jobs (``running_gpu_num /
  total_gpu_num``) over May 2020. This is *allocation*, not SM activity, so it decides whether a
  simulated training pod is running at that minute (pod busy when its seeded rank is below the
  allocated share), and the pod's own seeded level decides how hard it works.
* **Synthetic**: a seeded diurnal shape (afternoon peak, AR(1) noise, idle gaps) for machines without
  the shared data.

``TraceBank`` flattens any mix of traces into one array so that evaluating 10,000 pods at one
instant is a single fancy-index, whatever their lengths and sampling steps.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpuaware.gpu.errors import TraceError

__all__ = [
    "GENTD26_FILE",
    "TraceBank",
    "UtilTrace",
    "default_traces",
    "load_gentd26",
    "load_helios",
    "shared_data_dir",
    "synthetic_traces",
]

GENTD26_FILE = Path("gentd26") / "pod_gpu_duty_cycle_anon.csv"
TraceKind = Literal["duty", "allocation"]


@dataclass(frozen=True, eq=False, slots=True)
class UtilTrace:
    """One replayable series. ``duty``: percent 0..100 of the device; ``allocation``: share 0..1."""

    name: str
    values: np.ndarray
    step_s: float
    kind: TraceKind

    @property
    def source(self) -> str:
        return self.name.split(":", 1)[0]

    def at(self, t: float, offset_s: float = 0.0) -> float:
        """The value a pod replaying this trace with ``offset_s`` sees at ``t`` (for tests/checks)."""
        return float(self.values[int(np.floor((t + offset_s) / self.step_s)) % len(self.values)])


def shared_data_dir() -> Path:
    """``GPUAWARE_SHARED_DATA``, or ``../shared/data`` next to the repository root."""
    env = os.environ.get("GPUAWARE_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[5].parent / "shared" / "data"


def _header(path: Path, required: Sequence[str]) -> list[str]:
    if not path.is_file():
        raise TraceError(f"{path}: file not found")
    with path.open(newline="", encoding="utf-8") as fh:
        header = [h.strip() for h in next(csv.reader(fh), [])]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}; header is {','.join(header)}")
    return header


def _columns(path: Path, header: list[str], names: Sequence[str], dtype: Any = np.float64) -> np.ndarray:
    """The named columns as a 2-D array (numpy's C reader: 10x faster than the csv module here)."""
    try:
        return np.loadtxt(
            path,
            delimiter=",",
            skiprows=1,
            usecols=[header.index(n) for n in names],
            dtype=dtype,
            ndmin=2,
            encoding="utf-8",
        )
    except ValueError as exc:
        raise TraceError(f"{path}: unreadable {', '.join(names)} ({exc})") from exc


@lru_cache(maxsize=8)
def load_gentd26(root: Path, min_coverage: float = 0.9) -> tuple[UtilTrace, ...]:
    """Per-pod duty cycles of GenTD26; pods present in fewer than ``min_coverage`` of the steps are
    left out, and a missing step of a kept pod is 0 (the pod was not running).

    ``root`` is the shared data folder or the CSV itself.
    """
    path = root if root.suffix == ".csv" else root / GENTD26_FILE
    header = _header(path, ("value", "timestamp_anon", "container_ip"))
    numbers = _columns(path, header, ("value", "timestamp_anon"))
    values, stamps = numbers[:, 0], numbers[:, 1]
    pods = _columns(path, header, ("container_ip",), dtype=str)[:, 0]
    grid = np.unique(stamps)
    if len(grid) < 2:
        raise TraceError(f"{path}: fewer than two timestamps")
    step = float(np.median(np.diff(grid)))
    slot = np.rint((stamps - grid[0]) / step).astype(np.int64)
    length = int(slot.max()) + 1
    names, inverse = np.unique(pods, return_inverse=True)
    matrix = np.full((len(names), length), np.nan)
    matrix[inverse, slot] = np.clip(values, 0, 100)
    coverage = np.mean(~np.isnan(matrix), axis=1)
    keep = np.flatnonzero(coverage >= min_coverage)
    return tuple(
        UtilTrace(f"gentd26:{names[k]}", np.nan_to_num(matrix[k], nan=0.0).astype(np.float32), step, "duty")
        for k in keep
    )


@lru_cache(maxsize=8)
def load_helios(root: Path, vcs: tuple[str, ...] | None = None) -> tuple[UtilTrace, ...]:
    """Per-VC GPU allocation share of the Helios Earth cluster, one value per minute."""
    folder = root / "helios" if (root / "helios").is_dir() else root
    files = sorted(folder.glob("*_cluster_sequence_vc.csv"))
    if vcs is not None:
        files = [f for f in files if f.name.split("_", 1)[0] in vcs]
    if not files:
        raise TraceError(f"{folder}: no *_cluster_sequence_vc.csv files")
    out = []
    for path in files:
        header = _header(path, ("running_gpu_num", "total_gpu_num"))
        counts = _columns(path, header, ("running_gpu_num", "total_gpu_num"))
        running, total = counts[:, 0], counts[:, 1]
        share = np.clip(np.divide(running, total, out=np.zeros_like(running), where=total > 0), 0, 1)
        out.append(
            UtilTrace(f"helios:{path.name.split('_', 1)[0]}", share.astype(np.float32), 60.0, "allocation")
        )
    return tuple(out)


def synthetic_traces(n: int, seed: int, *, step_s: float = 60.0, days: int = 1) -> tuple[UtilTrace, ...]:
    """``n`` seeded diurnal duty-cycle traces: level + amplitude * cos(hour - peak), AR(1) noise,
    and idle gaps (about one 30-minute gap in ten hours)."""
    rng = np.random.default_rng([seed, 0x5EED])
    length = int(days * 86_400 / step_s)
    hours = np.arange(length) * step_s / 3600.0
    out = []
    for k in range(n):
        level, amp, peak = rng.uniform(20, 70), rng.uniform(10, 30), rng.uniform(10, 16)
        noise = np.empty(length)
        e = rng.normal(0, 4, size=length)
        acc = 0.0
        for i in range(length):  # built once per trace, not on the sampling path
            acc = 0.8 * acc + e[i]
            noise[i] = acc
        series = level + amp * np.cos(2 * np.pi * (hours - peak) / 24) + noise
        gap_len = max(1, int(1800 / step_s))
        for start in np.flatnonzero(rng.random(length) < step_s / 36_000):
            series[start : start + gap_len] = 0
        out.append(UtilTrace(f"synthetic:{k}", np.clip(series, 0, 100).astype(np.float32), step_s, "duty"))
    return tuple(out)


def default_traces(root: Path | None, seed: int, n_synthetic: int = 32) -> tuple[UtilTrace, ...]:
    """GenTD26 and Helios traces found under ``root`` (both when both exist), else synthetic ones."""
    found: list[UtilTrace] = []
    if root is not None:
        if (root / GENTD26_FILE).is_file():
            found += load_gentd26(root)
        if (root / "helios").is_dir() and any((root / "helios").glob("*_cluster_sequence_vc.csv")):
            found += load_helios(root)
    return tuple(found) if found else synthetic_traces(n_synthetic, seed)


class TraceBank:
    """Many traces in one flat array: ``values(rows, t, offsets)`` evaluates all pods at once."""

    def __init__(self, traces: Sequence[UtilTrace]) -> None:
        if not traces:
            raise TraceError("a trace bank needs at least one trace")
        self.traces = tuple(traces)
        self.names = tuple(t.name for t in traces)
        lengths = np.array([len(t.values) for t in traces], dtype=np.int64)
        if np.any(lengths == 0):
            raise TraceError("empty trace: " + ", ".join(t.name for t in traces if len(t.values) == 0))
        self.lengths = lengths
        self.starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        self.steps = np.array([t.step_s for t in traces], dtype=np.float64)
        self.allocation = np.array([t.kind == "allocation" for t in traces])
        self.flat = np.concatenate([np.asarray(t.values, dtype=np.float32) for t in traces])
        sources = sorted({t.source for t in traces})
        self.sources = tuple(sources)
        self.source_of = np.array([sources.index(t.source) for t in traces], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.traces)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def values(self, rows: np.ndarray, t: float, offsets_s: np.ndarray) -> np.ndarray:
        idx = np.floor((t + offsets_s) / self.steps[rows]).astype(np.int64) % self.lengths[rows]
        return self.flat[self.starts[rows] + idx].astype(np.float64)
