"""The three fault data sets parsed: StepFun's fault trace, Titan's GPU lifetimes, Calchas's HBM errors."""

from __future__ import annotations

import bisect
import csv
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["DAY", "HOUR", "SIGNATURES", "STEPFUN_KINDS", "CalchasSummary", "FaultKind", "HbmHistory",
           "StepFunFault", "TitanSummary", "parse_calchas", "parse_stepfun", "parse_titan"]

HOUR = 3600.0
DAY = 86400.0
UE_EPISODE_GAP_S = 24 * HOUR
"""an uncorrectable error after this long without one starts an episode (``gpuaware.sim.hbm``'s definition)"""
QUIET_AFTER_S = 7 * DAY
"""a corrected-error burst with no uncorrectable error this long after it is noise (the precision window)"""


class FaultKind(StrEnum):
    """A hard GPU failure, after StepFun's GPU-class descriptions."""

    DBE = "dbe"
    DEVICE_ERROR = "device_error"
    PCIE_LINK = "pcie_link"
    XID = "xid"
    SMI_TIMEOUT = "smi_timeout"
    GPU_LOST = "gpu_lost"
    THERMAL = "thermal"
    OTHER = "other"


STEPFUN_KINDS: dict[str, FaultKind] = {
    "GPU DBE(Double Bit ECC) > Threshold": FaultKind.DBE,
    "GPU device unknow error": FaultKind.DEVICE_ERROR,
    "GPU PCI link width low": FaultKind.PCIE_LINK,
    "GPU xid Error": FaultKind.XID,
    "nvidia-smi Timeout": FaultKind.SMI_TIMEOUT,
    "GPU Lost": FaultKind.GPU_LOST,
    "GPU device not found": FaultKind.GPU_LOST,
    "GPU Temperature High": FaultKind.THERMAL,
}
"""StepFun GPU-class description -> kind; any other GPU-class description (P2P bandwidth low, SBE
above threshold, silent data corruption) is ``OTHER``. "Device not found" is a GPU off the bus."""

SIGNATURES: dict[FaultKind, str] = {
    FaultKind.DBE: "the replayed Calchas episode's uncorrectable errors at the failure (ECC uncorrected counter)",
    FaultKind.DEVICE_ERROR: "XID 119 (GSP RPC timeout: nvidia-smi's 'Unknown Error'), no telemetry until it ends",
    FaultKind.PCIE_LINK: "PCIe replays at the ramp's peak rate (or 10-50/min) until it ends",
    FaultKind.XID: "one XID of the catalogue's reset class (74 NVLink, 61/62 micro-controller), drawn evenly",
    FaultKind.SMI_TIMEOUT: "no telemetry until it ends (no XID)",
    FaultKind.GPU_LOST: "XID 79 (fallen off the bus), no telemetry until it ends",
    FaultKind.THERMAL: "temperature at the hardware slowdown (slowdown + 5..12 degC) until it ends",
    FaultKind.OTHER: "nothing the telemetry shows (P2P bandwidth, silent data corruption)",
}
"""How a failure shows in telemetry at its start (an assumption: StepFun gives a description, not codes)."""


@dataclass(frozen=True, slots=True)
class StepFunFault:
    node: str
    start_d: float
    end_d: float
    cls: str
    desc: str


def parse_stepfun(trace: Sequence[Mapping[str, Any]]) -> list[StepFunFault]:
    """Pair each fault_start with the next fault_end of the same server and type (first in, first out)."""
    opened: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    out: list[StepFunFault] = []
    for e in sorted(trace, key=lambda e: (float(e["event_time"]), e["event_type"] != "fault_start")):
        ft = e["fault_type"]
        key = (str(e["node_id"]), str(ft["Class"]), str(ft["Desc"]))
        t = float(e["event_time"])
        if e["event_type"] == "fault_start":
            opened[key].append(t)
        elif e["event_type"] == "fault_end":
            if not opened[key]:
                raise ValueError(f"StepFun trace: fault_end without a start for {key} at day {t}")
            out.append(StepFunFault(key[0], opened[key].pop(0), t, key[1], key[2]))
        else:
            raise ValueError(f"StepFun trace: unknown event_type {e['event_type']!r}")
    left = sum(len(v) for v in opened.values())
    if left:
        raise ValueError(f"StepFun trace: {left} fault_start events never end")
    return sorted(out, key=lambda f: (f.start_d, f.node))


@dataclass(frozen=True, slots=True)
class TitanSummary:
    gpu_hours: float
    """sum of the recorded service durations"""
    removals: dict[str, int]
    """DBE / OTB removals (every row naming one, with a duration or not)"""
    rows: int
    rows_without_duration: int

    @property
    def hours_per_removal(self) -> float:
        return self.gpu_hours / max(1, sum(self.removals.values()))


def parse_titan(lines: Iterable[str]) -> TitanSummary:
    """``gc_full.csv``: GPU-hours and DBE / off-the-bus removals."""
    reader = csv.DictReader(lines)
    missing = {"duration", "event"} - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"Titan file: missing column(s) {sorted(missing)}")
    seconds, rows, blank = 0.0, 0, 0
    removals: Counter[str] = Counter()
    for row in reader:
        rows += 1
        d = (row.get("duration") or "").strip()
        if d:
            seconds += float(d)
        else:
            blank += 1
        ev = (row.get("event") or "").strip()
        if ev in ("DBE", "OTB"):
            removals[ev] += 1
    return TitanSummary(gpu_hours=seconds / HOUR, removals=dict(removals), rows=rows, rows_without_duration=blank)


@dataclass(frozen=True, slots=True)
class HbmHistory:
    """One real UE episode and what its server showed before it."""

    server: str
    onset_ue: int
    """uncorrectable errors in the episode's first hour"""
    before: tuple[tuple[float, int, int], ...]
    """(hours before the onset, corrected, uncorrectable) per hour with any error, within the lookback"""
    first_on_server: bool

    @property
    def earlier_ue(self) -> bool:
        return any(ue for _, _, ue in self.before)

    @property
    def earlier_ce(self) -> bool:
        return any(ce for _, ce, _ in self.before)


@dataclass(frozen=True, slots=True)
class CalchasSummary:
    episodes: tuple[HbmHistory, ...]
    quiet_ce_bursts: tuple[tuple[tuple[float, int], ...], ...]
    """corrected-error bursts (hours <= 6 h apart) with no uncorrectable error from a day before to
    7 days after: (hours since the burst's first, count) per hour"""
    servers: int
    span_days: float


def parse_calchas(lines: Iterable[str], *, lookback_days: float) -> CalchasSummary:
    """``hbm_errors_public.csv`` (Server, Time, EccType): episodes with their history, quiet CE bursts."""
    reader = csv.DictReader(lines)
    missing = {"Server", "Time", "EccType"} - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"Calchas file: missing column(s) {sorted(missing)}")
    ce: dict[str, Counter[float]] = defaultdict(Counter)
    ue: dict[str, Counter[float]] = defaultdict(Counter)
    times: list[float] = []
    for row in reader:
        t, kind, server = float(row["Time"]), row["EccType"].strip(), row["Server"].strip()
        times.append(t)
        if kind == "CE":
            ce[server][t] += 1
        elif kind in ("UER", "UEO"):
            ue[server][t] += 1
        else:
            raise ValueError(f"Calchas file: unknown EccType {kind!r}")
    if not times:
        raise ValueError("Calchas file: no events")
    look = lookback_days * DAY
    episodes: list[HbmHistory] = []
    bursts: list[tuple[tuple[float, int], ...]] = []
    for server in sorted(set(ce) | set(ue)):
        ue_t = sorted(ue[server])
        last: float | None = None
        for t in ue_t:
            if last is None or t - last >= UE_EPISODE_GAP_S:
                hours = sorted({h for h in (*ce[server], *ue[server]) if t - look <= h < t})
                before = tuple(((t - h) / HOUR, ce[server][h], ue[server][h]) for h in hours)
                episodes.append(HbmHistory(server, ue[server][t], before, first_on_server=last is None))
            last = t
        run: list[float] = []
        for h in [*sorted(ce[server]), math.inf]:
            if run and (h - run[-1] > 6 * HOUR):
                a, b = run[0], run[-1]
                i = bisect.bisect_left(ue_t, a - DAY)
                if i == len(ue_t) or ue_t[i] > b + QUIET_AFTER_S:
                    bursts.append(tuple(((x - a) / HOUR, ce[server][x]) for x in run))
                run = []
            run.append(h)
    servers = len(set(ce) | set(ue))
    return CalchasSummary(tuple(episodes), tuple(bursts), servers, (max(times) - min(times)) / DAY)
