"""A fault plan: the ground truth of a simulated window (failures, transients) and what each fault
does to its GPU's telemetry (``Effects``), drawn from a ``Calibration`` with a seed."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpuaware.sim.fleet_faults.calibration import Calibration
from gpuaware.sim.fleet_faults.data import DAY, HOUR, FaultKind

__all__ = ["Effects", "Failure", "FaultPlan", "Heat", "Outage", "Point", "Replays", "Transient", "draw_plan"]

_XID_FAILURE_CODES = (74, 61, 62)
_GPU_LOST_XID = 79
_DEVICE_ERROR_XID = 119
_APP_XIDS = (13, 31, 43)
_UNSEEN = frozenset({FaultKind.SMI_TIMEOUT, FaultKind.OTHER})
"""kinds that leave no health evidence in telemetry (a gap, or nothing): an earlier one is no precursor"""



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
