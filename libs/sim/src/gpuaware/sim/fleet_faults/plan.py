"""A fault model for the simulated fleet, calibrated on real fault data: kinds, rates, durations, precursors.

Why here, in ``gpuaware.gpu`` next to ``faults.py``: it is the simulated fleet's fault injection, only
drawn from data instead of written by hand; it needs numpy (health scoring does not, and must not
see the ground truth it is scored against); the demo and the twin can draw from it as well. Health
scoring reads what this module renders as telemetry, never the plan itself.

Three public data sets (``../shared/data/gpu-faults``, PROVENANCE.md there) calibrate it, parsed
here at run time (``calibrate`` takes their contents, ``load_calibration`` reads the files):

* **StepFun** (``fault_trace.json``: fault_start / fault_end per server over ~349 days, 400
  servers): the *kinds* of hard GPU failure and their mix (the GPU class: DBE above threshold,
  unknown device error, PCIe link width low, XID error, nvidia-smi timeout, GPU lost, temperature
  high, other), the *rate* (GPU-class faults per server-day / 8 GPUs -> per GPU-hour), the
  *durations* (fault_end - fault_start, per kind), *recurrence* (an earlier GPU-class fault on the
  same server before a failure: the share and the real gaps) and fan faults (class ``Fan``: the
  cooling failures that heat a node's GPUs, rate and durations).
* **Titan** (``gc_full.csv``): GPU-hours per DBE / off-the-bus removal, an independent check of the
  rate (the plan uses StepFun's; both are reported).
* **Calchas** (``hbm_errors_public.csv``): what comes before an uncorrectable memory error. Every
  real UE episode (an uncorrectable error after >= 24 h without one on that server) with its
  server's preceding history (corrected errors and earlier uncorrectable episodes, hour by hour,
  within ``Assumptions.lookback_days``) is kept; a simulated DBE failure *replays one of them,
  chosen at random*, ending at the failure. Bursts of corrected errors not followed by an
  uncorrectable one within 7 days are the real corrected-error noise of healthy GPUs.

What the data do not say is an ``Assumptions`` field, each with its reason: how each StepFun
description shows in telemetry (``SIGNATURES``), the shape and share of the precursors no data set
records (XID bursts before GPU-lost / XID / device errors, PCIe replay growth before a link
downgrade, the thermal drift before a temperature fault), the rate of application XIDs and PCIe
replay bursts, how much a fan fault heats a node. The benchmark writes the calibration and the
assumptions next to its figures.

The real rates give about one hard failure in 1,000 GPUs x 7 days, so ``draw_plan`` multiplies
every rate taken from StepFun by ``scale`` (the benchmark reports it): detection lead and false
quarantines do not depend on the rate, only how many cases there are to count.

Pure functions of their inputs and a seed: ``calibrate(...)`` -> ``Calibration``;
``draw_plan(calibration, layout, ...)`` -> ``FaultPlan`` (the ground truth: failures, transients, the
effects per GPU); ``render(effects, ...)`` -> per-minute telemetry arrays of one GPU (cumulative ECC
and PCIe counters, temperatures, XIDs, telemetry presence) over a base temperature the caller
brings (the ``SimulatedFleet``'s, for the benchmark).
"""

from __future__ import annotations

import bisect
import csv
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SIGNATURES",
    "STEPFUN_KINDS",
    "Assumptions",
    "Calibration",
    "Effects",
    "Failure",
    "FaultKind",
    "FaultPlan",
    "HbmHistory",
    "Heat",
    "Outage",
    "Point",
    "Rendered",
    "Replays",
    "Transient",
    "calibrate",
    "draw_plan",
    "load_calibration",
    "parse_calchas",
    "parse_stepfun",
    "parse_titan",
    "render",
]

HOUR = 3600.0
DAY = 86400.0
UE_EPISODE_GAP_S = 24 * HOUR
"""an uncorrectable error after this long without one starts an episode (``gpuaware.health.hbm``'s definition)"""
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

_XID_FAILURE_CODES = (74, 61, 62)
_GPU_LOST_XID = 79
_DEVICE_ERROR_XID = 119
_APP_XIDS = (13, 31, 43)
_UNSEEN = frozenset({FaultKind.SMI_TIMEOUT, FaultKind.OTHER})
"""kinds that leave no health evidence in telemetry (a gap, or nothing): an earlier one is no precursor"""


# --- the data ------------------------------------------------------------------------------------------
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


# --- the calibration --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Assumptions:
    """What no data set here records, each with the reason for its value. Written to the results."""

    lookback_days: float = 180.0
    """history kept before a failure (Calchas episodes, StepFun recurrences): 90 % of Calchas's gaps
    between UE episodes are under 88 days; the health model's aftershock lasts ~6 months"""
    gpus_per_server: int = 8
    """StepFun's servers are 8-GPU machines (PROVENANCE.md)"""
    stepfun_servers: int = 400
    """StepFun's fleet (PROVENANCE.md; the trace names only the 231 servers that had a fault)"""
    recurrence_same_gpu: bool = True
    """StepFun names the server, not the GPU: an earlier fault on the server is put on the failing
    GPU (Calchas shows one device per server carrying the recurrences); an upper bound for per-GPU
    history, the same for both rules"""
    signature_precursor_share: float = 0.5
    """share of GPU-lost / XID / device-error failures preceded by an XID burst and of PCIe-link
    failures preceded by replay growth: no data set records it; one half, and the figures are
    reported by precursor so the ones from data stand alone"""
    xid_burst_codes: tuple[int, ...] = (8, 32, 38)
    """system-class XIDs (channel timeout, corrupted push buffer from the bus, driver firmware): the
    driver's complaints before a GPU falls off the bus or halts"""
    xid_burst_extra_mean: float = 2.0
    """a burst is 2 + Poisson(mean) XIDs (a burst is at least two)"""
    xid_burst_hours: tuple[float, float] = (1.0, 12.0)
    """the burst spreads over this many hours before the failure, closer together towards it"""
    pcie_ramp_hours: tuple[float, float] = (1.0, 12.0)
    """PCIe replays grow linearly from 0 to the peak over this long before the link is downgraded"""
    pcie_peak_per_min: tuple[float, float] = (10.0, 50.0)
    """replays per minute at the downgrade (DCGM warns above 8/min)"""
    thermal_ramp_c_per_min: tuple[float, float] = (0.05, 0.3)
    """a GPU's own cooling failing: the temperature climbs this fast to the hardware slowdown"""
    thermal_over_c: tuple[float, float] = (5.0, 12.0)
    """a thermal failure holds the GPU this far above its slowdown temperature"""
    fan_heat_c: tuple[float, float] = (15.0, 35.0)
    """a server's fan fault heats each of its GPUs by this much (loaded ones reach the slowdown)"""
    fan_ramp_min: float = 15.0
    app_xid_per_gpu_day: float = 0.2
    """application faults (XID 13 / 31 / 43): one failed job per GPU every five days"""
    pcie_burst_per_gpu_day: float = 0.01
    """a transient PCIe replay burst (a marginal link, a retrained lane) per GPU-day"""
    pcie_burst_minutes: tuple[float, float] = (2.0, 20.0)
    pcie_burst_per_min: tuple[float, float] = (10.0, 60.0)
    ce_burst_rate: str = "calchas"
    """corrected-error bursts on healthy GPUs at Calchas's rate of quiet bursts per server-day (an
    upper bound: the file holds only servers that had HBM errors), shapes replayed from the file"""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Numbers computed from the data files (``summary()`` is what the benchmark writes)."""

    assumptions: Assumptions
    stepfun_span_days: float
    gpu_faults: int
    mix: dict[FaultKind, int]
    descriptions: dict[str, int]
    durations_h: dict[FaultKind, tuple[float, ...]]
    recurrence_pairs: tuple[tuple[float, FaultKind], ...]
    """(gap in hours, the earlier fault's kind) for every non-DBE GPU fault with an earlier GPU fault
    on its server within the lookback"""
    recurrence_eligible: int
    """non-DBE GPU faults (the denominator of the recurrence share)"""
    fan_faults: int
    fan_durations_h: tuple[float, ...]
    titan: TitanSummary
    calchas: CalchasSummary

    @property
    def gpu_faults_per_gpu_hour(self) -> float:
        a = self.assumptions
        return self.gpu_faults / (a.stepfun_servers * a.gpus_per_server * self.stepfun_span_days * 24.0)

    @property
    def fan_faults_per_server_hour(self) -> float:
        return self.fan_faults / (self.assumptions.stepfun_servers * self.stepfun_span_days * 24.0)

    @property
    def recurrence_share(self) -> float:
        return len(self.recurrence_pairs) / max(1, self.recurrence_eligible)

    @property
    def quiet_ce_bursts_per_server_day(self) -> float:
        c = self.calchas
        return len(c.quiet_ce_bursts) / max(1e-9, c.servers * c.span_days)

    def summary(self) -> dict[str, Any]:
        c = self.calchas
        eps = c.episodes
        med = {k.value: round(float(np.median(v)), 2) if v else None for k, v in self.durations_h.items()}
        return {
            "stepfun": {
                "gpu_class_faults": self.gpu_faults,
                "servers": self.assumptions.stepfun_servers,
                "span_days": round(self.stepfun_span_days, 2),
                "per_1000_server_days": round(1000 * self.gpu_faults / (self.assumptions.stepfun_servers
                                                                       * self.stepfun_span_days), 3),
                "per_gpu_hour": self.gpu_faults_per_gpu_hour,
                "gpu_hours_per_fault": round(1 / self.gpu_faults_per_gpu_hour),
                "mix": {k.value: v for k, v in self.mix.items()},
                "descriptions": self.descriptions,
                "median_duration_h": med,
                "recurrence": {"share": round(self.recurrence_share, 4), "with_earlier": len(self.recurrence_pairs),
                               "of": self.recurrence_eligible,
                               "median_gap_h": round(float(np.median([g for g, _ in self.recurrence_pairs])), 1)
                               if self.recurrence_pairs else None},
                "fan_faults": self.fan_faults,
                "fan_faults_per_server_hour": self.fan_faults_per_server_hour,
                "fan_median_duration_h": round(float(np.median(self.fan_durations_h)), 1)
                if self.fan_durations_h else None,
            },
            "titan": {
                "gpu_hours": round(self.titan.gpu_hours),
                "removals": self.titan.removals,
                "gpu_hours_per_removal": round(self.titan.hours_per_removal),
                "rows_without_duration": self.titan.rows_without_duration,
                "vs_stepfun_rate": round((1 / self.titan.hours_per_removal) / self.gpu_faults_per_gpu_hour, 3),
            },
            "calchas": {
                "servers": c.servers,
                "span_days": round(c.span_days, 1),
                "ue_episodes": len(eps),
                "with_earlier_ue_in_lookback": sum(e.earlier_ue for e in eps),
                "with_only_ce_before": sum(e.earlier_ce and not e.earlier_ue for e in eps),
                "without_precursor": sum(not e.before for e in eps),
                "first_on_server": sum(e.first_on_server for e in eps),
                "first_on_server_with_ce_before": sum(e.first_on_server and e.earlier_ce for e in eps),
                "median_onset_ue": float(np.median([e.onset_ue for e in eps])) if eps else None,
                "quiet_ce_bursts": len(c.quiet_ce_bursts),
                "quiet_ce_bursts_per_server_day": round(self.quiet_ce_bursts_per_server_day, 5),
                "quiet_ce_burst_median_count": float(np.median([sum(n for _, n in b) for b in c.quiet_ce_bursts]))
                if c.quiet_ce_bursts else None,
            },
        }


def calibrate(stepfun_trace: Sequence[Mapping[str, Any]], titan_lines: Iterable[str],
              calchas_lines: Iterable[str], assumptions: Assumptions | None = None) -> Calibration:
    """Every number of the fault model from the three files' contents."""
    a = assumptions or Assumptions()
    faults = parse_stepfun(stepfun_trace)
    span = max(float(e["event_time"]) for e in stepfun_trace)
    gpu = [f for f in faults if f.cls == "GPU"]
    if not gpu:
        raise ValueError("StepFun trace: no GPU-class faults")
    kind_of = {f: STEPFUN_KINDS.get(f.desc, FaultKind.OTHER) for f in gpu}
    mix = Counter(kind_of[f] for f in gpu)
    durations: dict[FaultKind, list[float]] = defaultdict(list)
    for f in gpu:
        durations[kind_of[f]].append((f.end_d - f.start_d) * 24.0)
    by_node: dict[str, list[StepFunFault]] = defaultdict(list)
    for f in gpu:
        by_node[f.node].append(f)
    pairs: list[tuple[float, FaultKind]] = []
    eligible = 0
    for f in gpu:
        if kind_of[f] is FaultKind.DBE:
            continue
        eligible += 1
        earlier = [g for g in by_node[f.node] if g.start_d < f.start_d and f.start_d - g.start_d <= a.lookback_days]
        if earlier:
            g = max(earlier, key=lambda g: g.start_d)
            pairs.append(((f.start_d - g.start_d) * 24.0, kind_of[g]))
    fans = [f for f in faults if f.cls == "Fan"]
    return Calibration(
        assumptions=a,
        stepfun_span_days=span,
        gpu_faults=len(gpu),
        mix={k: mix.get(k, 0) for k in FaultKind},
        descriptions=dict(Counter(f.desc for f in gpu).most_common()),
        durations_h={k: tuple(durations.get(k, ())) for k in FaultKind},
        recurrence_pairs=tuple(pairs),
        recurrence_eligible=eligible,
        fan_faults=len(fans),
        fan_durations_h=tuple((f.end_d - f.start_d) * 24.0 for f in fans),
        titan=parse_titan(titan_lines),
        calchas=parse_calchas(calchas_lines, lookback_days=a.lookback_days),
    )


STEPFUN_FILE = Path("stepfun-infinitehbd") / "fault_trace.json"
TITAN_FILE = Path("titan-gpu-lifetimes") / "gc_full.csv"
CALCHAS_FILE = Path("calchas-hbm") / "hbm_errors_public.csv"


def load_calibration(gpu_faults_dir: Path, assumptions: Assumptions | None = None) -> Calibration:
    """Read the three files under ``gpu_faults_dir`` (``<shared data>/gpu-faults``) and calibrate."""
    trace = json.loads((gpu_faults_dir / STEPFUN_FILE).read_text(encoding="utf-8"))
    with (gpu_faults_dir / TITAN_FILE).open(newline="", encoding="utf-8") as titan, \
            (gpu_faults_dir / CALCHAS_FILE).open(newline="", encoding="utf-8") as calchas:
        return calibrate(trace, titan, calchas, assumptions)


# --- the plan: ground truth and effects -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Point:
    """Counts and XIDs at one instant."""

    at: float
    ce: int = 0
    ue: int = 0
    xids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Outage:
    """No telemetry in ``(start, end]`` (the GPU or nvidia-smi does not answer)."""

    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Heat:
    """A temperature change. ``anchor`` set: the GPU's own cooling fails; the temperature follows a
    line reaching slowdown + 5 (the hardware slowdown: the failure) at ``anchor``, rising
    ``rate_c_per_min``, never below the base, then holds ``over_c`` above the slowdown until ``end``.
    ``anchor`` None: ``delta_c`` is added, ramped in over ``ramp_s`` from ``start``, until ``end``."""

    start: float
    end: float
    delta_c: float = 0.0
    ramp_s: float = 0.0
    anchor: float | None = None
    rate_c_per_min: float = 0.0
    over_c: float = 0.0


@dataclass(frozen=True, slots=True)
class Replays:
    """PCIe replays per minute, linear from ``rate0`` at ``start`` to ``rate1`` at ``end``."""

    start: float
    end: float
    rate0: float
    rate1: float


@dataclass(slots=True)
class Effects:
    """Everything the faults do to one GPU's telemetry."""

    points: list[Point] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)
    heats: list[Heat] = field(default_factory=list)
    replays: list[Replays] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Failure:
    """A hard failure (ground truth)."""

    gpu: int
    at: float
    kind: FaultKind
    end: float
    """StepFun's fault_end: the GPU is back (repaired, reset, replaced) from here"""
    precursors: tuple[str, ...]
    """what came before it, at least 10 minutes before: ``hbm_recurrence`` / ``hbm_ce`` (a replayed
    Calchas history), ``recurrence`` (an earlier StepFun fault on the server, when that fault leaves
    health evidence: an nvidia-smi timeout or an "other" fault shows nothing but a gap), and the
    assumed ``xid_burst``, ``pcie_ramp``, ``thermal_drift``"""
    earliest_precursor: float | None = None

    @property
    def from_data(self) -> bool:
        return any(p in ("hbm_recurrence", "hbm_ce", "recurrence") for p in self.precursors)


@dataclass(frozen=True, slots=True)
class Transient:
    """A fault that clears by itself or with a job restart; the GPU is sound (ground truth)."""

    gpu: int
    kind: str
    """``app_xid``, ``pcie_burst``, ``ce_burst``, ``fan_heat``"""
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class FaultPlan:
    start: float
    end: float
    scale: float
    n_gpus: int
    failures: tuple[Failure, ...]
    """the failures inside the window (an earlier fault of a recurrence is not one of them)"""
    prior_faults: tuple[Failure, ...]
    """earlier faults of recurrences (their effects are in ``effects``; some fall before the window)"""
    transients: tuple[Transient, ...]
    effects: dict[int, Effects]
    rates: dict[str, float]

    def effects_of(self, gpu: int) -> Effects:
        return self.effects.get(gpu, Effects())


def _uniform(rng: np.random.Generator, lo_hi: tuple[float, float]) -> float:
    return float(rng.uniform(lo_hi[0], lo_hi[1]))


def _minute(t: float) -> float:
    return math.floor(t / 60.0) * 60.0


class _Planner:
    def __init__(self, cal: Calibration, *, n_gpus: int, gpus_per_node: int, start: float, end: float,
                 scale: float, seed: int) -> None:
        self.cal, self.a = cal, cal.assumptions
        self.n, self.per_node = n_gpus, gpus_per_node
        self.start, self.end, self.scale = start, end, scale
        self.rng = np.random.default_rng([seed, 0xFA017])
        self.effects: dict[int, Effects] = defaultdict(Effects)
        self.failures: list[Failure] = []
        self.prior: list[Failure] = []
        self.transients: list[Transient] = []
        kinds = [k for k in FaultKind if cal.mix.get(k, 0) > 0]
        weights = np.array([cal.mix[k] for k in kinds], dtype=float)
        self.kinds, self.kind_p = kinds, weights / weights.sum()

    def duration_s(self, kind: FaultKind) -> float:
        pool = self.cal.durations_h.get(kind) or tuple(d for v in self.cal.durations_h.values() for d in v)
        return float(pool[int(self.rng.integers(len(pool)))]) * HOUR

    # the failure itself, as telemetry
    def signature(self, gpu: int, kind: FaultKind, at: float, end: float, *, onset_ue: int | None = None,
                  peak: float | None = None, heat: Heat | None = None) -> None:
        fx, rng = self.effects[gpu], self.rng
        if kind is FaultKind.DBE:
            if onset_ue is None:
                eps = self.cal.calchas.episodes
                onset_ue = eps[int(rng.integers(len(eps)))].onset_ue if eps else 1
            fx.points.append(Point(at, ue=max(1, onset_ue)))
        elif kind is FaultKind.DEVICE_ERROR:
            fx.points.append(Point(at, xids=(_DEVICE_ERROR_XID,)))
            fx.outages.append(Outage(at, end))
        elif kind is FaultKind.XID:
            fx.points.append(Point(at, xids=(_XID_FAILURE_CODES[int(rng.integers(len(_XID_FAILURE_CODES)))],)))
        elif kind is FaultKind.SMI_TIMEOUT:
            fx.outages.append(Outage(at, end))
        elif kind is FaultKind.GPU_LOST:
            fx.points.append(Point(at, xids=(_GPU_LOST_XID,)))
            fx.outages.append(Outage(at, end))
        elif kind is FaultKind.PCIE_LINK:
            rate = peak if peak is not None else _uniform(rng, self.a.pcie_peak_per_min)
            fx.replays.append(Replays(at, end, rate, rate))
        elif kind is FaultKind.THERMAL:
            fx.heats.append(heat if heat is not None else Heat(
                start=at, end=end, anchor=at, rate_c_per_min=_uniform(rng, self.a.thermal_ramp_c_per_min),
                over_c=_uniform(rng, self.a.thermal_over_c)))

    def failure(self, gpu: int, at: float) -> None:
        rng, a = self.rng, self.a
        kind = self.kinds[int(rng.choice(len(self.kinds), p=self.kind_p))]
        end = at + self.duration_s(kind)
        pre: list[tuple[str, float]] = []   # (precursor, its earliest time)
        fx = self.effects[gpu]
        onset_ue: int | None = None
        peak: float | None = None
        heat: Heat | None = None
        if kind is FaultKind.DBE:
            eps = self.cal.calchas.episodes
            ep = eps[int(rng.integers(len(eps)))]
            onset_ue = ep.onset_ue
            for hours, ce, ue in ep.before:
                fx.points.append(Point(at - hours * HOUR, ce=ce, ue=ue))
            if ep.before:
                pre.append(("hbm_recurrence" if ep.earlier_ue else "hbm_ce", at - max(h for h, _, _ in ep.before) * HOUR))
        else:
            if rng.random() < self.cal.recurrence_share and self.cal.recurrence_pairs:
                gap_h, earlier = self.cal.recurrence_pairs[int(rng.integers(len(self.cal.recurrence_pairs)))]
                t0 = _minute(at - gap_h * HOUR)
                # the earlier fault was over before this one began (at most half the gap)
                e0 = min(t0 + self.duration_s(earlier), t0 + (at - t0) / 2)
                self.signature(gpu, earlier, t0, e0)
                self.prior.append(Failure(gpu, t0, earlier, e0, ()))
                if earlier not in _UNSEEN:
                    pre.append(("recurrence", t0))
            if kind in (FaultKind.GPU_LOST, FaultKind.XID, FaultKind.DEVICE_ERROR) and \
                    rng.random() < a.signature_precursor_share:
                n = 2 + int(rng.poisson(a.xid_burst_extra_mean))
                span = _uniform(rng, a.xid_burst_hours) * HOUR
                # closer together towards the failure: times at span * (1 - u^2) before it... squared spacing
                u = np.sort(rng.random(n))
                times = [_minute(at - span * (1.0 - float(x)) ** 2) for x in u]
                codes = rng.choice(a.xid_burst_codes, size=n)
                for t, c in zip(times, codes, strict=True):
                    fx.points.append(Point(t, xids=(int(c),)))
                pre.append(("xid_burst", min(times)))
            if kind is FaultKind.PCIE_LINK and rng.random() < a.signature_precursor_share:
                span = _uniform(rng, a.pcie_ramp_hours) * HOUR
                peak = _uniform(rng, a.pcie_peak_per_min)
                fx.replays.append(Replays(at - span, at, 0.0, peak))
                pre.append(("pcie_ramp", at - span))
            if kind is FaultKind.THERMAL:
                rate = _uniform(rng, a.thermal_ramp_c_per_min)
                heat = Heat(start=at, end=end, anchor=at, rate_c_per_min=rate, over_c=_uniform(rng, a.thermal_over_c))
                # from a loaded GPU's ~35 degC below the hardware slowdown
                pre.append(("thermal_drift", at - 35.0 / rate * 60.0))
        self.signature(gpu, kind, at, end, onset_ue=onset_ue, peak=peak, heat=heat)
        valid = [(p, t) for p, t in pre if t <= at - 600.0]
        self.failures.append(Failure(gpu, at, kind, end, tuple(p for p, _ in valid),
                                     min((t for _, t in valid), default=None)))

    def draw(self) -> None:
        rng, span = self.rng, self.end - self.start
        lam = self.cal.gpu_faults_per_gpu_hour * self.scale / HOUR
        first = rng.exponential(1.0 / lam, size=self.n) if lam > 0 else np.full(self.n, np.inf)
        for gpu in np.flatnonzero(first < span).tolist():
            self.failure(gpu, _minute(self.start + float(first[gpu])) + 60.0)
        self.draw_transients()

    def draw_transients(self) -> None:
        rng, a, span = self.rng, self.a, self.end - self.start
        days = span / DAY
        for gpu, k in enumerate(rng.poisson(a.app_xid_per_gpu_day * days, size=self.n).tolist()):
            for _ in range(k):
                t = _minute(self.start + float(rng.uniform(0, span)))
                self.effects[gpu].points.append(Point(t, xids=(int(rng.choice(_APP_XIDS)),)))
                self.transients.append(Transient(gpu, "app_xid", t, t))
        for gpu, k in enumerate(rng.poisson(a.pcie_burst_per_gpu_day * days, size=self.n).tolist()):
            for _ in range(k):
                t = _minute(self.start + float(rng.uniform(0, span)))
                e = t + _uniform(rng, a.pcie_burst_minutes) * 60.0
                r = _uniform(rng, a.pcie_burst_per_min)
                self.effects[gpu].replays.append(Replays(t, e, r, r))
                self.transients.append(Transient(gpu, "pcie_burst", t, e))
        bursts = self.cal.calchas.quiet_ce_bursts
        if bursts:
            rate = self.cal.quiet_ce_bursts_per_server_day
            for gpu, k in enumerate(rng.poisson(rate * days, size=self.n).tolist()):
                for _ in range(k):
                    b = bursts[int(rng.integers(len(bursts)))]
                    t = _minute(self.start + float(rng.uniform(0, span)))
                    for hours, count in b:
                        self.effects[gpu].points.append(Point(t + hours * HOUR, ce=count))
                    self.transients.append(Transient(gpu, "ce_burst", t, t + b[-1][0] * HOUR))
        nodes = -(-self.n // self.per_node)
        lam_fan = self.cal.fan_faults_per_server_hour * self.scale * span / HOUR
        for node, k in enumerate(rng.poisson(lam_fan, size=nodes).tolist()):
            for _ in range(k):
                t = _minute(self.start + float(rng.uniform(0, span)))
                d = self.cal.fan_durations_h[int(rng.integers(len(self.cal.fan_durations_h)))] * HOUR
                for gpu in range(node * self.per_node, min(self.n, (node + 1) * self.per_node)):
                    heat = Heat(start=t, end=t + d, delta_c=_uniform(rng, a.fan_heat_c), ramp_s=a.fan_ramp_min * 60.0)
                    self.effects[gpu].heats.append(heat)
                    self.transients.append(Transient(gpu, "fan_heat", t, t + d))


def draw_plan(cal: Calibration, *, n_gpus: int, gpus_per_node: int = 8, start: float, days: float,
              scale: float, seed: int = 0) -> FaultPlan:
    """Failures at StepFun's rate x ``scale`` (at most one per GPU in the window: the first), their
    kinds, durations and precursors; the transients; every effect per GPU. Deterministic in ``seed``."""
    if n_gpus < 1 or days <= 0 or scale < 0:
        raise ValueError("need n_gpus >= 1, days > 0, scale >= 0")
    p = _Planner(cal, n_gpus=n_gpus, gpus_per_node=gpus_per_node, start=start, end=start + days * DAY,
                 scale=scale, seed=seed)
    p.draw()
    rates = {
        "hard_failures_per_gpu_hour": cal.gpu_faults_per_gpu_hour * scale,
        "hard_failures_per_gpu_hour_real": cal.gpu_faults_per_gpu_hour,
        "expected_hard_failures_real_rate": cal.gpu_faults_per_gpu_hour * n_gpus * days * 24.0,
        "expected_hard_failures": n_gpus * (1 - math.exp(-cal.gpu_faults_per_gpu_hour * scale * days * 24.0)),
        "fan_faults_per_server_hour": cal.fan_faults_per_server_hour * scale,
        "app_xid_per_gpu_day": cal.assumptions.app_xid_per_gpu_day,
        "pcie_burst_per_gpu_day": cal.assumptions.pcie_burst_per_gpu_day,
        "ce_burst_per_gpu_day": cal.quiet_ce_bursts_per_server_day,
        "recurrence_share": cal.recurrence_share,
    }
    for fx in p.effects.values():
        fx.points.sort(key=lambda x: x.at)
    return FaultPlan(start=p.start, end=p.end, scale=scale, n_gpus=n_gpus,
                     failures=tuple(sorted(p.failures, key=lambda f: (f.at, f.gpu))), prior_faults=tuple(p.prior),
                     transients=tuple(p.transients), effects=dict(p.effects), rates=rates)


# --- telemetry ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rendered:
    """One GPU's telemetry: observation ``k`` at ``times[k]`` covers ``(times[k] - step, times[k]]``.

    ``before`` holds what happened before the window (hourly, plus every event time), for a tracker
    that has run for months: ``(time, ce_cumulative, ue_cumulative, xids)``; the window's counters
    continue from its last values."""

    times: np.ndarray
    temperature_c: np.ndarray
    thermal: np.ndarray
    """throttle bits: 0, SW thermal slowdown (32), or with HW thermal + HW slowdown (32|64|8)"""
    ce: np.ndarray
    ue: np.ndarray
    pcie: np.ndarray
    present: np.ndarray
    xids: dict[int, tuple[int, ...]]
    before: list[tuple[float, int, int, tuple[int, ...]]]


_SW_THERMAL, _HW_THERMAL, _HW_SLOWDOWN = 0x20, 0x40, 0x8


def render(fx: Effects, *, start: float, step_s: float, n: int, base_temp_c: np.ndarray, slowdown_c: float,
           history_step_s: float = HOUR) -> Rendered:
    """Per-step telemetry of one GPU over ``base_temp_c`` (its temperature without faults, one per step)."""
    times = start + step_s * np.arange(1, n + 1, dtype=np.float64)
    temp = np.asarray(base_temp_c, dtype=np.float64).copy()
    for h in fx.heats:
        if h.anchor is not None:
            line = slowdown_c + 5.0 - h.rate_c_per_min * (h.anchor - times) / 60.0
            temp = np.where(times < h.anchor, np.maximum(temp, line), temp)
            held = (times >= h.anchor) & (times < h.end)
            temp = np.where(held, np.maximum(temp, slowdown_c + h.over_c), temp)
        else:
            frac = np.clip((times - h.start) / max(h.ramp_s, 1.0), 0.0, 1.0)
            temp = temp + np.where((times >= h.start) & (times < h.end), h.delta_c * frac, 0.0)
    temp = np.clip(temp, 0.0, 120.0)
    thermal = np.where(temp >= slowdown_c, _SW_THERMAL, 0) | np.where(
        temp >= slowdown_c + 5.0, _HW_THERMAL | _HW_SLOWDOWN, 0)

    def step_of(at: float) -> int:
        return math.ceil((at - start) / step_s) - 1

    ce = np.zeros(n, dtype=np.int64)
    ue = np.zeros(n, dtype=np.int64)
    xids: dict[int, tuple[int, ...]] = {}
    early: list[Point] = []
    for p in fx.points:
        if p.at <= start:
            early.append(p)
            continue
        k = step_of(p.at)
        if k >= n:
            continue
        ce[k] += p.ce
        ue[k] += p.ue
        if p.xids:
            xids[k] = xids.get(k, ()) + p.xids
    # PCIe replays: the integral of the rate over each step, as whole counts
    cum = np.zeros(n + 1)
    edges = np.concatenate(([start], times))
    for r in fx.replays:
        a = np.clip(edges, r.start, r.end)
        slope = (r.rate1 - r.rate0) / max(r.end - r.start, 1e-9)
        # integral of rate0 + slope * (t - start) per minute, from r.start to a
        x = a - r.start
        cum += (r.rate0 * x + 0.5 * slope * x * x) / 60.0
    pcie = np.diff(np.floor(cum)).astype(np.int64)
    present = np.ones(n, dtype=bool)
    for o in fx.outages:
        present &= ~((times > o.start) & (times <= o.end))
    before: list[tuple[float, int, int, tuple[int, ...]]] = []
    ce0 = ue0 = 0
    if early:
        # from one step before the first event (a tracker's first observation is its counters' baseline)
        grid = np.arange(start, min(p.at for p in early) - history_step_s - 1.0, -history_step_s)[::-1]
        marks = sorted({*grid.tolist(), *(p.at for p in early)})
        by_time: dict[float, list[Point]] = defaultdict(list)
        for p in early:
            by_time[p.at].append(p)
        for t in marks:
            if any(o.start < t <= o.end for o in fx.outages) and t not in by_time:
                continue
            xs: tuple[int, ...] = ()
            for p in by_time.get(t, ()):
                ce0 += p.ce
                ue0 += p.ue
                xs += p.xids
            before.append((t, ce0, ue0, xs))
    return Rendered(times=times, temperature_c=np.round(temp, 1), thermal=thermal, ce=ce0 + np.cumsum(ce),
                    ue=ue0 + np.cumsum(ue), pcie=np.cumsum(pcie), present=present, xids=xids, before=before)
