"""The fault model's numbers, computed from the data files, and the assumptions the data do not cover."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuaware.sim.fleet_faults.data import (
    STEPFUN_KINDS,
    CalchasSummary,
    FaultKind,
    StepFunFault,
    TitanSummary,
    parse_calchas,
    parse_stepfun,
    parse_titan,
)

__all__ = ["CALCHAS_FILE", "STEPFUN_FILE", "TITAN_FILE", "Assumptions", "Calibration", "calibrate",
           "load_calibration"]


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
