"""One observation's evidence: what changed since the last one, and each component's score.

``HealthBook.observe`` runs these steps in order on a GPU's ``GpuTrack``:

1. ``count_events``: the cumulative counters differenced into new events (reset detection);
2. ``note_xids``: the XIDs seen (explicit ones and changes of the last-XID gauge);
3. ``update_sums``: the decaying sums the rates and the failure risk read;
4. ``score_components``: each component's score (0..100), appending its reasons, recovery actions
   and evidence levels to an ``Evidence`` in the order the module docstring of ``tracker`` lists.

Evidence levels are 0 (none), 1 (degrade) and 2 (quarantine); ``hard`` evidence acts at once,
``soft`` evidence must be confirmed by the state machine (``gpuaware.health.state``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuaware.health.config import HealthConfig, ScoreRules
from gpuaware.health.inputs import InputIssue, IssueKind
from gpuaware.health.observation import THERMAL_BITS, Observation
from gpuaware.health.risk import RiskEstimate, decay, estimate, spread
from gpuaware.health.track import GpuTrack
from gpuaware.health.xid import XidAction, XidClass, XidInfo, classify_xid
from gpuaware.schemas import ThrottleReason

__all__ = ["Events", "Evidence", "count_events", "note_xids", "score_components", "update_sums"]

_POWER_BRAKE = ThrottleReason.HW_POWER_BRAKE_SLOWDOWN
_XID_SCORE = {XidClass.APPLICATION: 95.0, XidClass.SYSTEM: 80.0, XidClass.HARDWARE: 40.0, XidClass.FATAL: 0.0}


@dataclass(slots=True)
class Events:
    """New events in one observation (counts since the previous one)."""

    ce: int
    """corrected ECC errors"""
    ue: int
    """uncorrected ECC errors"""
    remap_uncorrectable: int
    pcie_replays: int
    nvlink_crc: int
    remap_failed_now: bool
    """a row remap failure first reported by this observation"""
    xid_weight: float = 0.0
    """what this observation's XIDs add to the XID frequency of the failure risk"""
    hard_now: bool = False
    """a hard error in this observation (it starts or extends a burst)"""


@dataclass(slots=True)
class Evidence:
    """What the components say: reasons and recovery actions in order, and the evidence levels."""

    reasons: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    hard: int = 0
    soft: int = 0

    def hard_at(self, level: int, reason: str | None = None) -> None:
        self.hard = max(self.hard, level)
        if reason is not None:
            self.reasons.append(reason)

    def soft_at(self, level: int, reason: str | None = None) -> None:
        self.soft = max(self.soft, level)
        if reason is not None:
            self.reasons.append(reason)


class _Counting:
    """Differencing of cumulative counters with reset detection, for one observation."""

    __slots__ = ("issues", "track")

    def __init__(self, track: GpuTrack, issues: list[InputIssue]) -> None:
        self.track, self.issues = track, issues

    def delta(self, name: str, value: int | None, at: float) -> int | None:
        """New counts since the last value; None when there is no previous value (a baseline)."""
        if value is None:
            return None
        counters = self.track.counters
        prev = counters.get(name)
        counters[name] = value
        if prev is None:
            return None
        if value < prev:
            self.track.inputs.counter_resets += 1
            self.issues.append(InputIssue(kind=IssueKind.COUNTER_RESET, at=at, detail=(
                f"{name} went down from {prev} to {value} (driver reload or GPU reset?): re-baselined, "
                "nothing counted")))
            return 0
        return value - prev


def _pick(*deltas: int | None) -> int:
    """The first available delta (aggregate before volatile before the observation's own delta)."""
    for d in deltas:
        if d is not None:
            return d
    return 0


def _xid_risk_weight(info: XidInfo) -> float:
    """What one XID adds to the XID frequency of the failure risk (see ``risk.py``, part 3).

    A quarantining XID starts a burst of hard errors and is counted there, once, by the aftershock
    term; counting it here too would make one fatal XID weigh as much as a run of system XIDs. The
    frequency term is for the XIDs that do not quarantine by themselves: system and hardware XIDs
    that keep the GPU working, each 1. Application XIDs are the workload's fault: 0.
    """
    if info.quarantines or info.xid_class is XidClass.APPLICATION:
        return 0.0
    return 1.0


def count_events(t: GpuTrack, obs: Observation, issues: list[InputIssue]) -> Events:
    """The counters' new events (a counter that went down is a reset: recorded in ``issues``), and
    the lifetime totals, retired pages and remap flags the track keeps."""
    at = obs.at
    count = _Counting(t, issues)
    ce_agg = count.delta("ecc_corrected_aggregate", obs.ecc_corrected_aggregate, at)
    ce_vol = count.delta("ecc_corrected_volatile", obs.ecc_corrected_volatile, at)
    ue_agg = count.delta("ecc_uncorrected_aggregate", obs.ecc_uncorrected_aggregate, at)
    ue_vol = count.delta("ecc_uncorrected_volatile", obs.ecc_uncorrected_volatile, at)
    ce = _pick(ce_agg, ce_vol, obs.ecc_corrected_delta)
    ue = _pick(ue_agg, ue_vol, obs.ecc_uncorrected_delta)
    t.lifetime_ce = obs.ecc_corrected_aggregate if obs.ecc_corrected_aggregate is not None else t.lifetime_ce + ce
    t.lifetime_ue = (obs.ecc_uncorrected_aggregate if obs.ecc_uncorrected_aggregate is not None
                     else t.lifetime_ue + ue)
    count.delta("retired_pages", obs.retired_pages, at)
    if obs.retired_pages is not None:
        t.retired_pages = obs.retired_pages
    count.delta("remapped_rows_correctable", obs.remapped_rows_correctable, at)
    remap_unc = _pick(count.delta("remapped_rows_uncorrectable", obs.remapped_rows_uncorrectable, at),
                      obs.remapped_rows_delta)
    pcie = _pick(count.delta("pcie_replay", obs.pcie_replay, at), obs.pcie_replay_delta)
    nvl_crc = count.delta("nvlink_crc_errors", obs.nvlink_crc_errors, at) or 0
    if obs.row_remap_pending is not None:
        t.remap_pending = obs.row_remap_pending
    remap_failed_now = bool(obs.row_remap_failed) and not t.remap_failed
    if obs.row_remap_failed is not None:
        t.remap_failed = obs.row_remap_failed
    return Events(ce=ce, ue=ue, remap_uncorrectable=remap_unc, pcie_replays=pcie, nvlink_crc=nvl_crc,
                  remap_failed_now=remap_failed_now, hard_now=ue > 0 or remap_failed_now)


def note_xids(t: GpuTrack, obs: Observation, ev: Events, issues: list[InputIssue], xid_hold_s: float) -> None:
    """Record the observation's XIDs (explicit events, and changes of the last-XID gauge: its first
    value is a baseline) in ``t.recent_xids``, dropping those older than ``xid_hold_s``; an XID not
    in the catalogue is counted and explained in ``issues``."""
    at = obs.at
    xids = list(obs.xids)
    if obs.xid_last is not None:
        if t.xid_last is not None and obs.xid_last != t.xid_last and obs.xid_last != 0:
            xids.append(obs.xid_last)
        t.xid_last = obs.xid_last
    for code in xids:
        info = classify_xid(code)
        if info is None:
            t.inputs.unknown_xids += 1
            key = str(code)
            t.inputs.unknown_xid_codes[key] = t.inputs.unknown_xid_codes.get(key, 0) + 1
            issues.append(InputIssue(kind=IssueKind.UNKNOWN_XID, at=at, detail=(
                f"XID {code} is not in the catalogue: scored as xid_unknown_{code}, no state change")))
        else:
            ev.xid_weight += _xid_risk_weight(info)
            ev.hard_now = ev.hard_now or info.quarantines
        t.recent_xids.append((at, code))
    horizon = at - xid_hold_s
    if t.recent_xids and t.recent_xids[0][0] < horizon:
        t.recent_xids = [x for x in t.recent_xids if x[0] >= horizon]


def update_sums(t: GpuTrack, obs: Observation, ev: Events, dt_s: float, cfg: HealthConfig) -> None:
    """Advance the decaying sums by ``dt_s`` (rates independent of the sampling interval; see
    ``risk.py``), the temperature averages, the throttled share, and the bursts of hard errors."""
    rm, sr = cfg.risk, cfg.score
    at = obs.at
    dt_h = dt_s / 3600.0
    t.ce_fast = decay(t.ce_fast, dt_h, rm.ce_fast_tau_h) + spread(ev.ce, dt_h, rm.ce_fast_tau_h)
    t.ce_slow = decay(t.ce_slow, dt_h, rm.ce_slow_tau_h) + spread(ev.ce, dt_h, rm.ce_slow_tau_h)
    t.xid_sum = decay(t.xid_sum, dt_h, rm.xid_tau_h) + spread(ev.xid_weight, dt_h, rm.xid_tau_h)
    t.pcie_sum = decay(t.pcie_sum, dt_s, sr.pcie_tau_s) + spread(ev.pcie_replays, dt_s, sr.pcie_tau_s)
    if obs.temperature_c is not None:
        x = obs.temperature_c
        if t.temp_fast is None or t.temp_slow is None:
            t.temp_fast = t.temp_slow = x
        else:
            t.temp_fast += -math.expm1(-dt_h / rm.thermal_fast_tau_h) * (x - t.temp_fast)
            t.temp_slow += -math.expm1(-dt_h / rm.thermal_slow_tau_h) * (x - t.temp_slow)
    share: float | None = None
    if obs.thermal_throttled_pct is not None:
        share = min(1.0, max(0.0, obs.thermal_throttled_pct / 100.0))
    elif obs.throttle_reasons is not None:
        share = 1.0 if obs.throttle_reasons & THERMAL_BITS else 0.0
    if share is not None:
        t.throttle_share += -math.expm1(-dt_s / sr.throttle_tau_s) * (share - t.throttle_share)
    if ev.hard_now:
        if t.bursts and at - t.bursts[-1][1] <= rm.burst_gap_s:
            t.bursts[-1] = (t.bursts[-1][0], at)
        else:
            t.bursts.append((at, at))
            del t.bursts[: max(0, len(t.bursts) - rm.max_bursts)]


def _memory(t: GpuTrack, ev: Events, cfg: HealthConfig, out: Evidence) -> float:
    mem = 100.0
    if ev.ue > 0:
        mem = 0.0
        out.hard_at(2, "ecc_uncorrected")
    r_f = t.ce_fast / cfg.risk.ce_fast_tau_h
    if r_f > 1e-6:
        mem = min(mem, 100.0 - min(60.0, 15.0 * math.log2(1.0 + r_f)))
        if r_f >= cfg.score.ce_rate_warn_per_h:
            out.reasons.append("ecc_corrected_rate")
    if t.lifetime_ue > 0 and ev.ue == 0:
        mem = min(mem, 90.0)
        out.reasons.append("ecc_uncorrected_history")
    return round(mem, 1)


def _row_remap(t: GpuTrack, ev: Events, sr: ScoreRules, out: Evidence) -> float:
    rr = 100.0
    if t.remap_failed:
        rr = 0.0
        out.hard_at(2, "row_remap_failure")
        out.actions.append(XidAction.CONTACT_SUPPORT.value)
    elif t.remap_pending:
        rr = 40.0
        out.hard_at(1, "row_remap_pending")
        out.actions.append(XidAction.RESET_GPU.value)
    if ev.remap_uncorrectable > 0:
        rr = min(rr, 50.0)
        out.reasons.append("row_remap_uncorrectable")
    if t.retired_pages > 0:
        if t.retired_pages >= sr.retired_pages_quarantine:
            rr = 0.0
            out.hard_at(2, "retired_pages")
        elif t.retired_pages >= sr.retired_pages_degrade:
            rr = min(rr, 60.0)
            out.hard_at(1, "retired_pages")
        else:
            rr = min(rr, 100.0 - 2.0 * t.retired_pages)
    return rr


def _xid(t: GpuTrack, out: Evidence) -> float:
    xs = 100.0
    for _, code in t.recent_xids:
        info = classify_xid(code)
        if info is None:
            xs = min(xs, 90.0)
            out.reasons.append(f"xid_unknown_{code}")
            continue
        xs = min(xs, 0.0 if info.quarantines else _XID_SCORE[info.xid_class])
        out.reasons.append(info.reason)
        if info.quarantines:
            out.hard_at(2)
        elif info.degrades:
            out.hard_at(1)
        if info.xid_class >= XidClass.HARDWARE and info.action not in (XidAction.IGNORE, XidAction.RESTART_APP):
            out.actions.append(info.action.value)
    return xs


def _thermal(t: GpuTrack, obs: Observation, slowdown: float, sr: ScoreRules, out: Evidence) -> float:
    th = 100.0
    if obs.temperature_c is not None:
        headroom = slowdown - obs.temperature_c
        if headroom < sr.headroom_ok_c:
            th = 50.0 + 50.0 * headroom / sr.headroom_ok_c if headroom >= 0 else max(
                0.0, 50.0 * (1.0 + headroom / sr.hw_slowdown_margin_c))
            out.reasons.append("thermal_headroom_low")
            if headroom <= -sr.hw_slowdown_margin_c:
                out.soft_at(1, "thermal_hw_slowdown")
    if t.throttle_share >= 0.1:
        th = min(th, 100.0 * (1.0 - t.throttle_share))
        out.reasons.append("thermal_throttle")
        if t.throttle_share >= sr.throttle_degrade:
            out.soft_at(1)
    return round(th, 1)


def _power(obs: Observation, sr: ScoreRules, out: Evidence) -> float:
    pw = 100.0
    if obs.power_w is not None and obs.power_limit_w and obs.power_w > sr.power_over_limit * obs.power_limit_w:
        pw = 60.0
        out.soft_at(1, "power_over_limit")
    if obs.throttle_reasons is not None and obs.throttle_reasons & _POWER_BRAKE:
        pw = 60.0
        out.soft_at(1, "power_brake")
    return pw


def _pcie(t: GpuTrack, sr: ScoreRules, out: Evidence) -> float:
    pc = 100.0
    per_min = t.pcie_sum / sr.pcie_tau_s * 60.0
    if per_min >= sr.pcie_degrade_per_min:
        pc = 40.0
        out.soft_at(1, "pcie_replay")
    elif per_min >= sr.pcie_warn_per_min:
        span = max(sr.pcie_degrade_per_min - sr.pcie_warn_per_min, 1e-9)
        pc = 100.0 - 60.0 * (per_min - sr.pcie_warn_per_min) / span
        out.reasons.append("pcie_replay")
    return round(pc, 1)


def _nvlink(t: GpuTrack, obs: Observation, ev: Events, dt_s: float, sr: ScoreRules, out: Evidence) -> float:
    nv = 100.0
    if obs.nvlink_up is not None:
        t.nvlink_max = max(t.nvlink_max, obs.nvlink_up)
        if t.nvlink_max - obs.nvlink_up > 0:
            nv = 100.0 * obs.nvlink_up / t.nvlink_max
            out.soft_at(1, "nvlink_down")
    if ev.nvlink_crc > 0 and dt_s > 0 and ev.nvlink_crc / dt_s >= sr.nvlink_crc_degrade_per_s:
        nv = min(nv, 50.0)
        out.soft_at(1, "nvlink_errors")
    return round(nv, 1)


def _risk(t: GpuTrack, obs: Observation, slowdown: float, cfg: HealthConfig, out: Evidence) -> RiskEstimate:
    drift = 0.0
    if (t.temp_fast is not None and t.temp_slow is not None and obs.temperature_c is not None
            and slowdown - obs.temperature_c < cfg.score.headroom_ok_c):
        drift = t.temp_fast - t.temp_slow
    est = estimate(bursts_hours_since=[(obs.at - last) / 3600.0 for _, last in t.bursts], ce_fast=t.ce_fast,
                   ce_slow=t.ce_slow, xid_sum=t.xid_sum, drift_c=drift, m=cfg.risk)
    rules = cfg.states
    if est.risk >= rules.risk_degrade:
        out.soft_at(2 if est.risk >= rules.risk_quarantine else 1, "failure_risk")
        out.reasons.extend(est.drivers)
    return est


def score_components(t: GpuTrack, obs: Observation, ev: Events, dt_s: float, cfg: HealthConfig,
                     out: Evidence) -> tuple[dict[str, float], RiskEstimate]:
    """Every component's score (``COMPONENTS`` order) and the failure risk, their reasons, actions
    and evidence levels added to ``out``."""
    sr = cfg.score
    slowdown = t.slowdown_c if t.slowdown_c is not None else sr.default_slowdown_c
    comps = {
        "memory_errors": _memory(t, ev, cfg, out),
        "row_remap": _row_remap(t, ev, sr, out),
        "xid": _xid(t, out),
        "thermal": _thermal(t, obs, slowdown, sr, out),
        "power": _power(obs, sr, out),
        "pcie": _pcie(t, sr, out),
        "nvlink": _nvlink(t, obs, ev, dt_s, sr, out),
        "telemetry": 100.0,
    }
    est = _risk(t, obs, slowdown, cfg, out)
    comps["risk"] = round(100.0 * (1.0 - est.risk), 1)
    return comps, est
