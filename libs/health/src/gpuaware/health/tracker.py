"""The per-GPU tracker: observations in, an ``Assessment`` (score, components, reasons, risk, state) out.

``HealthBook`` holds one ``GpuTrack`` per GPU and is the only object the service needs::

    book = HealthBook(HealthConfig())
    book.describe(uuid, node="node-a", gpu_index=0, model="A100")      # from the inventory
    for obs in from_rolledup(message, width_s=60):                    # or from_sampled(batch)
        a = book.observe(obs)
        publish(a.to_scored(source=..., emitted_at=...))
        if (changed := a.to_state_changed(source=..., emitted_at=...)) is not None:
            publish(changed)
    book.tick(now)                       # stale telemetry: scored, never a state change
    book.cordon(uuid, reason="RMA ticket 42", by="alice", at=now)
    data = book.dump(); book = HealthBook.load(data, config)          # a restart keeps the state

Everything is a function of the observations and the times passed in: no clock, no I/O. The score
is the product of named components (each 0..100), so one bad part pulls the whole score down and
two mediocre ones compound; the state comes from the evidence levels of the components through the
hysteresis of ``gpuaware.health.state``, never from the score alone (a low score from stale
telemetry or an unknown XID must not quarantine a GPU).

Components and the codes they put in ``reasons``:

====================  ==========================================================================
``memory_errors``     ``ecc_uncorrected`` (0, quarantines at once), ``ecc_corrected_rate`` (short-term
                      CE rate, ``100 - min(60, 15 * log2(1 + CE/h))``), ``ecc_uncorrected_history``
                      (any uncorrectable error in the GPU's life: at most 90)
``row_remap``         ``row_remap_failure`` (0, quarantines), ``row_remap_pending`` (40, degrades),
                      ``row_remap_uncorrectable`` (at most 50), ``retired_pages`` (degrades from 15,
                      quarantines from 63: DCGM's limits)
``xid``               ``xid_<code>`` for each XID within ``xid_hold_s``: fatal 0 (quarantines), hardware
                      40 (degrades, quarantines when its action is a reset or stronger), system 80,
                      application 95; ``xid_unknown_<code>`` 90 (counted, never a state change)
``thermal``           ``thermal_headroom_low`` (100 at >= 10 degC below the model's slowdown
                      temperature, 50 at 0, 0 at the hardware slowdown 5 degC above),
                      ``thermal_throttle`` (at most 100 x the unthrottled share; degrades at 50 %),
                      ``thermal_hw_slowdown`` (degrades)
``power``             ``power_over_limit``, ``power_brake`` (60, degrade when confirmed)
``pcie``              ``pcie_replay`` (linear from 100 at 1/min to 40 at 8/min; degrades at 8/min)
``nvlink``            ``nvlink_down`` (share of the links seen up), ``nvlink_errors`` (CRC >= 100/s)
``telemetry``         ``stale_telemetry`` (50 while no observation for ``stale_after_s``)
``risk``              ``100 * (1 - risk)``; ``failure_risk`` plus its drivers (``ue_recurrence``,
                      ``ce_rate``, ``xid_frequency``, ``thermal_drift``); degrades at
                      ``risk_degrade``, quarantines at ``risk_quarantine`` (soft: confirmed first)
====================  ==========================================================================

While the state is above what the evidence asks for, ``reasons`` ends with ``recovering`` (the
clean period is running); a manual override adds ``manual_cordon``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import msgspec

from gpuaware.health.config import HealthConfig
from gpuaware.health.inputs import InputCounters, InputIssue, IssueKind
from gpuaware.health.observation import THERMAL_BITS, Observation
from gpuaware.health.risk import decay, estimate, spread
from gpuaware.health.state import STATES, Machine, Override, OverrideRecord, step
from gpuaware.health.xid import XidAction, XidClass, XidInfo, classify_xid
from gpuaware.schemas import GpuScored, GpuStateChanged, HealthState, ThrottleReason, find_gpu_model

__all__ = ["COMPONENTS", "Assessment", "GpuTrack", "HealthBook", "score_stream"]

COMPONENTS = ("memory_errors", "row_remap", "xid", "thermal", "power", "pcie", "nvlink", "telemetry", "risk")
"""every component name an ``Assessment`` carries, in this order"""

_POWER_BRAKE = ThrottleReason.HW_POWER_BRAKE_SLOWDOWN
_XID_SCORE = {XidClass.APPLICATION: 95.0, XidClass.SYSTEM: 80.0, XidClass.HARDWARE: 40.0, XidClass.FATAL: 0.0}


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


_CUMULATIVE = ("ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_corrected_aggregate",
               "ecc_uncorrected_aggregate", "retired_pages", "remapped_rows_correctable",
               "remapped_rows_uncorrectable", "pcie_replay", "nvlink_crc_errors")


class Assessment(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The verdict on one GPU after one observation (or a tick, a cordon, an uncordon)."""

    gpu_uuid: str
    node: str
    gpu_index: int
    at: float
    state: HealthState
    """the effective state (an override wins over the automatic one)"""
    target: HealthState
    """what the current evidence alone asks for (before hysteresis and overrides)"""
    score: float
    risk: float
    components: dict[str, float]
    reasons: tuple[str, ...]
    changed: bool = False
    """the effective state changed here (also true for the first assessment of a GPU)"""
    previous: HealthState | None = None
    """the effective state before, when ``changed`` (None for a GPU never seen before)"""
    cause: str = ""
    """why it changed: ``first``, ``escalated``, ``clean_period``, ``cordon``, ``uncordon``"""
    actions: tuple[str, ...] = ()
    """recovery actions the XID catalogue asks for (``RESET_GPU``, ``REBOOT_NODE``, ``CONTACT_SUPPORT``)"""
    override: Override | None = None
    issues: tuple[InputIssue, ...] = ()
    """bad input met by this observation (also counted in the GPU's ``InputCounters``)"""
    applied: bool = True
    """False: the observation was refused (late or duplicate) and the verdict is the previous one"""

    def to_scored(self, *, source: str, emitted_at: float, cluster: str = "default",
                  model_version: str = "rules-v1") -> GpuScored:
        """The contract's ``GpuScored`` (``node`` must be known: ``describe`` it or carry it in observations)."""
        return GpuScored(source=source, emitted_at=emitted_at, cluster=cluster, node=self.node,
                         gpu_uuid=self.gpu_uuid, gpu_index=self.gpu_index, score=self.score, state=self.state,
                         scored_at=self.at, reasons=self.reasons, components=dict(self.components),
                         model_version=model_version)  # fmt: skip

    def to_state_changed(self, *, source: str, emitted_at: float,
                         cluster: str = "default") -> GpuStateChanged | None:
        """The contract's ``GpuStateChanged``, or None when the state did not change."""
        if not self.changed:
            return None
        return GpuStateChanged(source=source, emitted_at=emitted_at, cluster=cluster, node=self.node,
                               gpu_uuid=self.gpu_uuid, gpu_index=self.gpu_index, current=self.state,
                               score=self.score, changed_at=self.at, previous=self.previous,
                               reasons=self.reasons)  # fmt: skip


class GpuTrack(msgspec.Struct, kw_only=True, gc=False):
    """Everything remembered about one GPU; a msgspec Struct so the service persists it as JSON."""

    gpu_uuid: str
    node: str = ""
    gpu_index: int = 0
    model: str | None = None
    slowdown_c: float | None = None
    first_at: float | None = None
    last_at: float | None = None
    counters: dict[str, int] = msgspec.field(default_factory=dict)
    """last value of each cumulative counter"""
    xid_last: int | None = None
    ce_fast: float = 0.0
    ce_slow: float = 0.0
    xid_sum: float = 0.0
    temp_fast: float | None = None
    temp_slow: float | None = None
    throttle_share: float = 0.0
    pcie_sum: float = 0.0
    nvlink_max: int = 0
    bursts: list[tuple[float, float]] = msgspec.field(default_factory=list)
    """(first, last) time of each burst of hard errors, oldest first"""
    recent_xids: list[tuple[float, int]] = msgspec.field(default_factory=list)
    lifetime_ue: int = 0
    lifetime_ce: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    retired_pages: int = 0
    machine: Machine = msgspec.field(default_factory=Machine)
    override: Override | None = None
    audit: list[OverrideRecord] = msgspec.field(default_factory=list)
    inputs: InputCounters = msgspec.field(default_factory=InputCounters)
    issues: list[InputIssue] = msgspec.field(default_factory=list)
    stale: bool = False
    # the last verdict, returned for refused observations and ticks
    last_state: HealthState | None = None
    last_target: int = 0
    last_score: float = 100.0
    last_risk: float = 0.0
    last_components: dict[str, float] = msgspec.field(default_factory=dict)
    last_reasons: tuple[str, ...] = ()
    last_actions: tuple[str, ...] = ()

    @property
    def state(self) -> HealthState:
        return self.override.state if self.override is not None else STATES[self.machine.level]


def _product(components: dict[str, float]) -> float:
    p = 1.0
    for v in components.values():
        p *= v / 100.0
    return round(100.0 * p, 1)


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


class HealthBook:
    """All GPUs of a cluster (or of a replay): the API of health scoring. See the module docstring."""

    def __init__(self, config: HealthConfig | None = None) -> None:
        self.config = config or HealthConfig()
        self.tracks: dict[str, GpuTrack] = {}

    # --- identity ---------------------------------------------------------------------------------
    def _track(self, gpu_uuid: str) -> GpuTrack:
        t = self.tracks.get(gpu_uuid)
        if t is None:
            t = self.tracks[gpu_uuid] = GpuTrack(gpu_uuid=gpu_uuid)
        return t

    def describe(self, gpu_uuid: str, *, node: str | None = None, gpu_index: int | None = None,
                 model: str | None = None) -> None:
        """What the inventory knows: where the GPU is and its model (the slowdown temperature)."""
        t = self._track(gpu_uuid)
        if node:
            t.node = node
        if gpu_index is not None:
            t.gpu_index = gpu_index
        if model is not None:
            self._set_model(t, model)

    def _set_model(self, t: GpuTrack, model: str) -> None:
        if model == t.model and t.slowdown_c is not None:
            return
        t.model = model
        m = find_gpu_model(model)
        t.slowdown_c = m.slowdown_temp_c if m is not None else None

    def state_of(self, gpu_uuid: str) -> HealthState:
        """The effective state; a GPU never seen is healthy."""
        t = self.tracks.get(gpu_uuid)
        return t.state if t is not None else HealthState.HEALTHY

    def counters(self) -> InputCounters:
        """Bad-input counters summed over every GPU."""
        total = InputCounters()
        for t in self.tracks.values():
            total.add(t.inputs)
        return total

    # --- observations -----------------------------------------------------------------------------
    def observe(self, obs: Observation) -> Assessment:
        """Apply one observation (in any order: late and duplicate ones are refused and counted)."""
        t = self._track(obs.gpu_uuid)
        rules = self.config.states
        issues: list[InputIssue] = []
        if obs.node:
            t.node = obs.node
        if obs.gpu_index:
            t.gpu_index = obs.gpu_index
        if obs.model is not None:
            self._set_model(t, obs.model)
        at = obs.at
        if t.last_at is not None:
            if at < t.last_at:
                t.inputs.out_of_order += 1
                issues.append(InputIssue(kind=IssueKind.OUT_OF_ORDER, at=at, detail=(
                    f"observation at {at:.3f} is {t.last_at - at:.3f} s older than the last applied one: "
                    "ignored")))
                return self._refused(t, at, issues)
            if at == t.last_at:
                t.inputs.duplicates += 1
                issues.append(InputIssue(kind=IssueKind.DUPLICATE, at=at, detail=(
                    f"second observation at {at:.3f}: ignored")))
                return self._refused(t, at, issues)
            dt_s = at - t.last_at
            expected = max(obs.interval_s, 1e-9)
            if dt_s > rules.gap_factor * expected:
                t.inputs.gaps += 1
                t.inputs.missing_s += dt_s - expected
                issues.append(InputIssue(kind=IssueKind.GAP, at=at, detail=(
                    f"{dt_s:.0f} s since the last observation, {expected:.0f} s expected: rates use the "
                    "real elapsed time, the state is held")))
        else:
            dt_s = max(obs.interval_s, 0.0)
            t.first_at = at
        t.last_at = at
        t.stale = False
        t.inputs.observations += 1
        return self._apply(t, obs, dt_s, issues)

    def observe_many(self, observations: Iterable[Observation]) -> list[Assessment]:
        return [self.observe(o) for o in observations]

    def _refused(self, t: GpuTrack, at: float, issues: list[InputIssue]) -> Assessment:
        self._remember_issues(t, issues)
        return self._verdict(t, at, issues=issues, applied=False)

    def _remember_issues(self, t: GpuTrack, issues: list[InputIssue]) -> None:
        if issues:
            t.issues.extend(issues)
            del t.issues[: max(0, len(t.issues) - self.config.states.issues_keep)]

    def _verdict(self, t: GpuTrack, at: float, *, issues: Iterable[InputIssue] = (), applied: bool,
                 components: dict[str, float] | None = None, reasons: tuple[str, ...] | None = None,
                 previous: HealthState | None = None, changed: bool = False, cause: str = "") -> Assessment:
        comps = dict(t.last_components if components is None else components)
        return Assessment(
            gpu_uuid=t.gpu_uuid, node=t.node, gpu_index=t.gpu_index, at=at, state=t.state,
            target=STATES[t.last_target], score=_product(comps) if components is not None else t.last_score,
            risk=t.last_risk, components=comps, reasons=t.last_reasons if reasons is None else reasons,
            changed=changed, previous=previous, cause=cause, actions=t.last_actions, override=t.override,
            issues=tuple(issues), applied=applied)  # fmt: skip

    def _apply(self, t: GpuTrack, obs: Observation, dt_s: float, issues: list[InputIssue]) -> Assessment:
        cfg = self.config
        rules, rm, sr = cfg.states, cfg.risk, cfg.score
        at = obs.at
        dt_h = dt_s / 3600.0
        count = _Counting(t, issues)

        # --- counters -> new events in this observation
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

        # --- XIDs: explicit events, and changes of the last-XID gauge (its first value is a baseline)
        xids = list(obs.xids)
        if obs.xid_last is not None:
            if t.xid_last is not None and obs.xid_last != t.xid_last and obs.xid_last != 0:
                xids.append(obs.xid_last)
            t.xid_last = obs.xid_last
        xid_weight = 0.0
        hard_now = ue > 0 or remap_failed_now
        for code in xids:
            info = classify_xid(code)
            if info is None:
                t.inputs.unknown_xids += 1
                key = str(code)
                t.inputs.unknown_xid_codes[key] = t.inputs.unknown_xid_codes.get(key, 0) + 1
                issues.append(InputIssue(kind=IssueKind.UNKNOWN_XID, at=at, detail=(
                    f"XID {code} is not in the catalogue: scored as xid_unknown_{code}, no state change")))
            else:
                xid_weight += _xid_risk_weight(info)
                hard_now = hard_now or info.quarantines
            t.recent_xids.append((at, code))
        horizon = at - rules.xid_hold_s
        if t.recent_xids and t.recent_xids[0][0] < horizon:
            t.recent_xids = [x for x in t.recent_xids if x[0] >= horizon]

        # --- weighted sums (rates independent of the sampling interval; see risk.py)
        t.ce_fast = decay(t.ce_fast, dt_h, rm.ce_fast_tau_h) + spread(ce, dt_h, rm.ce_fast_tau_h)
        t.ce_slow = decay(t.ce_slow, dt_h, rm.ce_slow_tau_h) + spread(ce, dt_h, rm.ce_slow_tau_h)
        t.xid_sum = decay(t.xid_sum, dt_h, rm.xid_tau_h) + spread(xid_weight, dt_h, rm.xid_tau_h)
        t.pcie_sum = decay(t.pcie_sum, dt_s, sr.pcie_tau_s) + spread(pcie, dt_s, sr.pcie_tau_s)
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
        if hard_now:
            if t.bursts and at - t.bursts[-1][1] <= rm.burst_gap_s:
                t.bursts[-1] = (t.bursts[-1][0], at)
            else:
                t.bursts.append((at, at))
                del t.bursts[: max(0, len(t.bursts) - rm.max_bursts)]

        # --- components, reasons, evidence levels
        comps: dict[str, float] = {}
        reasons: list[str] = []
        actions: list[str] = []
        hard = soft = 0

        mem = 100.0
        if ue > 0:
            mem = 0.0
            reasons.append("ecc_uncorrected")
            hard = 2
        r_f = t.ce_fast / rm.ce_fast_tau_h
        if r_f > 1e-6:
            mem = min(mem, 100.0 - min(60.0, 15.0 * math.log2(1.0 + r_f)))
            if r_f >= sr.ce_rate_warn_per_h:
                reasons.append("ecc_corrected_rate")
        if t.lifetime_ue > 0 and ue == 0:
            mem = min(mem, 90.0)
            reasons.append("ecc_uncorrected_history")
        comps["memory_errors"] = round(mem, 1)

        rr = 100.0
        if t.remap_failed:
            rr, hard = 0.0, 2
            reasons.append("row_remap_failure")
            actions.append(XidAction.CONTACT_SUPPORT.value)
        elif t.remap_pending:
            rr, hard = 40.0, max(hard, 1)
            reasons.append("row_remap_pending")
            actions.append(XidAction.RESET_GPU.value)
        if remap_unc > 0:
            rr = min(rr, 50.0)
            reasons.append("row_remap_uncorrectable")
        if t.retired_pages > 0:
            if t.retired_pages >= sr.retired_pages_quarantine:
                rr, hard = 0.0, 2
                reasons.append("retired_pages")
            elif t.retired_pages >= sr.retired_pages_degrade:
                rr, hard = min(rr, 60.0), max(hard, 1)
                reasons.append("retired_pages")
            else:
                rr = min(rr, 100.0 - 2.0 * t.retired_pages)
        comps["row_remap"] = rr

        xs = 100.0
        for _, code in t.recent_xids:
            info = classify_xid(code)
            if info is None:
                xs = min(xs, 90.0)
                reasons.append(f"xid_unknown_{code}")
                continue
            xs = min(xs, 0.0 if info.quarantines else _XID_SCORE[info.xid_class])
            reasons.append(info.reason)
            if info.quarantines:
                hard = 2
            elif info.degrades:
                hard = max(hard, 1)
            if info.xid_class >= XidClass.HARDWARE and info.action not in (XidAction.IGNORE, XidAction.RESTART_APP):
                actions.append(info.action.value)
        comps["xid"] = xs

        th = 100.0
        slowdown = t.slowdown_c if t.slowdown_c is not None else sr.default_slowdown_c
        if obs.temperature_c is not None:
            headroom = slowdown - obs.temperature_c
            if headroom < sr.headroom_ok_c:
                th = 50.0 + 50.0 * headroom / sr.headroom_ok_c if headroom >= 0 else max(
                    0.0, 50.0 * (1.0 + headroom / sr.hw_slowdown_margin_c))
                reasons.append("thermal_headroom_low")
                if headroom <= -sr.hw_slowdown_margin_c:
                    soft = max(soft, 1)
                    reasons.append("thermal_hw_slowdown")
        if t.throttle_share >= 0.1:
            th = min(th, 100.0 * (1.0 - t.throttle_share))
            reasons.append("thermal_throttle")
            if t.throttle_share >= sr.throttle_degrade:
                soft = max(soft, 1)
        comps["thermal"] = round(th, 1)

        pw = 100.0
        if obs.power_w is not None and obs.power_limit_w and obs.power_w > sr.power_over_limit * obs.power_limit_w:
            pw, soft = 60.0, max(soft, 1)
            reasons.append("power_over_limit")
        if obs.throttle_reasons is not None and obs.throttle_reasons & _POWER_BRAKE:
            pw, soft = 60.0, max(soft, 1)
            reasons.append("power_brake")
        comps["power"] = pw

        pc = 100.0
        per_min = t.pcie_sum / sr.pcie_tau_s * 60.0
        if per_min >= sr.pcie_degrade_per_min:
            pc, soft = 40.0, max(soft, 1)
            reasons.append("pcie_replay")
        elif per_min >= sr.pcie_warn_per_min:
            span = max(sr.pcie_degrade_per_min - sr.pcie_warn_per_min, 1e-9)
            pc = 100.0 - 60.0 * (per_min - sr.pcie_warn_per_min) / span
            reasons.append("pcie_replay")
        comps["pcie"] = round(pc, 1)

        nv = 100.0
        if obs.nvlink_up is not None:
            t.nvlink_max = max(t.nvlink_max, obs.nvlink_up)
            down = t.nvlink_max - obs.nvlink_up
            if down > 0:
                nv, soft = 100.0 * obs.nvlink_up / t.nvlink_max, max(soft, 1)
                reasons.append("nvlink_down")
        if nvl_crc > 0 and dt_s > 0 and nvl_crc / dt_s >= sr.nvlink_crc_degrade_per_s:
            nv, soft = min(nv, 50.0), max(soft, 1)
            reasons.append("nvlink_errors")
        comps["nvlink"] = round(nv, 1)
        comps["telemetry"] = 100.0

        drift = 0.0
        if (t.temp_fast is not None and t.temp_slow is not None and obs.temperature_c is not None
                and slowdown - obs.temperature_c < sr.headroom_ok_c):
            drift = t.temp_fast - t.temp_slow
        est = estimate(bursts_hours_since=[(at - last) / 3600.0 for _, last in t.bursts], ce_fast=t.ce_fast,
                       ce_slow=t.ce_slow, xid_sum=t.xid_sum, drift_c=drift, m=rm)
        comps["risk"] = round(100.0 * (1.0 - est.risk), 1)
        if est.risk >= rules.risk_degrade:
            soft = max(soft, 2 if est.risk >= rules.risk_quarantine else 1)
            reasons.append("failure_risk")
            reasons.extend(est.drivers)

        # --- state
        before = t.last_state
        happened = step(t.machine, at=at, hard=hard, soft=soft, rules=rules)
        target = max(hard, soft)
        if t.machine.level > target and t.override is None:
            reasons.append("recovering")
        if t.override is not None:
            reasons.append("manual_cordon")
        reasons_t = tuple(dict.fromkeys(reasons))
        t.last_components = comps
        t.last_reasons = reasons_t
        t.last_score = _product(comps)
        t.last_risk = round(est.risk, 6)
        t.last_target = target
        t.last_actions = tuple(dict.fromkeys(actions))
        self._remember_issues(t, issues)
        now_state = t.state
        changed = before != now_state
        t.last_state = now_state
        cause = "first" if before is None else (happened or "escalated") if changed else ""
        return self._verdict(t, at, issues=issues, applied=True, previous=before if changed else None,
                             changed=changed, cause=cause)

    # --- time without observations --------------------------------------------------------------
    def tick(self, now: float) -> list[Assessment]:
        """Assessments of the GPUs whose telemetry is stale at ``now`` (scored, state held)."""
        out: list[Assessment] = []
        stale_after = self.config.states.stale_after_s
        for t in self.tracks.values():
            if t.last_at is None or now - t.last_at < stale_after:
                continue
            issues: list[InputIssue] = []
            if not t.stale:
                t.stale = True
                t.inputs.stale_periods += 1
                issues.append(InputIssue(kind=IssueKind.STALE, at=now, detail=(
                    f"no observation for {now - t.last_at:.0f} s: scored as stale_telemetry, state held")))
                self._remember_issues(t, issues)
            comps = dict(t.last_components)
            comps["telemetry"] = self.config.score.stale_component
            reasons = tuple(dict.fromkeys((*t.last_reasons, "stale_telemetry")))
            out.append(self._verdict(t, now, issues=issues, applied=False, components=comps, reasons=reasons))
        return out

    # --- manual override ------------------------------------------------------------------------
    def cordon(self, gpu_uuid: str, *, reason: str, by: str, at: float,
               state: HealthState = HealthState.QUARANTINED) -> Assessment:
        """Pin the GPU's effective state (quarantined by default) with a reason; recorded for the audit."""
        if not reason.strip():
            raise ValueError("a cordon needs a reason")
        if state is HealthState.HEALTHY:
            raise ValueError("cordon pins degraded or quarantined; use uncordon to return to the evidence")
        t = self._track(gpu_uuid)
        before = t.state
        t.override = Override(state=state, reason=reason, by=by, at=at)
        return self._record(t, "cordon", reason, by, at, before)

    def uncordon(self, gpu_uuid: str, *, reason: str, by: str, at: float, clear: bool = False) -> Assessment:
        """Remove the override (back to what the evidence says). ``clear``: the GPU was repaired or
        replaced, so its automatic state returns to healthy and its error history is forgotten."""
        if not reason.strip():
            raise ValueError("an uncordon needs a reason")
        t = self.tracks.get(gpu_uuid)
        if t is None or (t.override is None and not clear):
            raise ValueError(f"GPU {gpu_uuid} is not cordoned (use clear=True to reset its automatic state)")
        before = t.state
        t.override = None
        if clear:
            t.machine = Machine(level=0, since=at)
            t.bursts.clear()
            t.recent_xids.clear()
            t.ce_fast = t.ce_slow = t.xid_sum = t.pcie_sum = 0.0
            t.remap_pending = t.remap_failed = False
            t.last_target, t.last_risk = 0, 0.0
            t.last_components = {c: 100.0 for c in COMPONENTS}
            t.last_reasons, t.last_actions = (), ()
            t.last_score = 100.0
        return self._record(t, "uncordon", reason, by, at, before, cleared=clear)

    def _record(self, t: GpuTrack, action: str, reason: str, by: str, at: float, before: HealthState,
                cleared: bool = False) -> Assessment:
        after = t.state
        t.audit.append(OverrideRecord(action=action, reason=reason, by=by, at=at, previous=before,  # type: ignore[arg-type]
                                      current=after, cleared=cleared))
        del t.audit[: max(0, len(t.audit) - self.config.states.audit_keep)]
        changed = before != after
        t.last_state = after
        base = tuple(r for r in t.last_reasons if r not in ("manual_cordon", "recovering"))
        reasons = (*base, "manual_cordon") if t.override is not None else base
        t.last_reasons = reasons
        return self._verdict(t, at, applied=False, previous=before if changed else None, changed=changed,
                             cause=action if changed else "", reasons=reasons)

    # --- persistence ----------------------------------------------------------------------------
    def dump(self) -> bytes:
        """Every GPU's track as JSON (the service stores it; ``load`` restores it)."""
        return msgspec.json.encode(self.tracks)

    @classmethod
    def load(cls, data: bytes, config: HealthConfig | None = None) -> HealthBook:
        book = cls(config)
        book.tracks = msgspec.json.decode(data, type=dict[str, GpuTrack])
        return book


def score_stream(observations: Iterable[Observation], config: HealthConfig | None = None, *,
                 book: HealthBook | None = None) -> Iterator[Assessment]:
    """Score a stream of per-GPU observations (any GPUs, interleaved, in arrival order) exactly as the
    service would: the hook for replays and the simulated-fleet benchmark. Pass ``book`` to keep or
    inspect the state (``book.tracks``, ``book.counters()``) or to ``tick`` between observations."""
    b = book if book is not None else HealthBook(config)
    for obs in observations:
        yield b.observe(obs)
