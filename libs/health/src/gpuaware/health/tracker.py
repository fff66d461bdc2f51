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

from collections.abc import Iterable, Iterator

import msgspec

from gpuaware.health.components import Evidence, count_events, note_xids, score_components, update_sums
from gpuaware.health.config import HealthConfig
from gpuaware.health.inputs import InputCounters, InputIssue, IssueKind
from gpuaware.health.observation import Observation
from gpuaware.health.state import STATES, Machine, Override, OverrideRecord, step
from gpuaware.health.track import COMPONENTS, Assessment, GpuTrack, product
from gpuaware.schemas import HealthState, find_gpu_model

__all__ = ["COMPONENTS", "Assessment", "GpuTrack", "HealthBook", "score_stream"]


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
        issues: list[InputIssue] = []
        if obs.node:
            t.node = obs.node
        if obs.gpu_index:
            t.gpu_index = obs.gpu_index
        if obs.model is not None:
            self._set_model(t, obs.model)
        dt_s = self._admit(t, obs, issues)
        if dt_s is None:
            self._remember_issues(t, issues)
            return self._verdict(t, obs.at, issues=issues, applied=False)
        return self._apply(t, obs, dt_s, issues)

    def _admit(self, t: GpuTrack, obs: Observation, issues: list[InputIssue]) -> float | None:
        """The time since the GPU's last applied observation (its interval for the first one), or None
        for a late or duplicate observation (refused); a gap is counted and explained, not refused."""
        at = obs.at
        if t.last_at is None:
            dt_s = max(obs.interval_s, 0.0)
            t.first_at = at
        elif at < t.last_at:
            t.inputs.out_of_order += 1
            issues.append(InputIssue(kind=IssueKind.OUT_OF_ORDER, at=at, detail=(
                f"observation at {at:.3f} is {t.last_at - at:.3f} s older than the last applied one: "
                "ignored")))
            return None
        elif at == t.last_at:
            t.inputs.duplicates += 1
            issues.append(InputIssue(kind=IssueKind.DUPLICATE, at=at, detail=(
                f"second observation at {at:.3f}: ignored")))
            return None
        else:
            dt_s = at - t.last_at
            expected = max(obs.interval_s, 1e-9)
            if dt_s > self.config.states.gap_factor * expected:
                t.inputs.gaps += 1
                t.inputs.missing_s += dt_s - expected
                issues.append(InputIssue(kind=IssueKind.GAP, at=at, detail=(
                    f"{dt_s:.0f} s since the last observation, {expected:.0f} s expected: rates use the "
                    "real elapsed time, the state is held")))
        t.last_at = at
        t.stale = False
        t.inputs.observations += 1
        return dt_s

    def _apply(self, t: GpuTrack, obs: Observation, dt_s: float, issues: list[InputIssue]) -> Assessment:
        """An admitted observation: its events, the sums they feed, the components, then the state."""
        cfg = self.config
        events = count_events(t, obs, issues)
        note_xids(t, obs, events, issues, cfg.states.xid_hold_s)
        update_sums(t, obs, events, dt_s, cfg)
        evidence = Evidence()
        comps, est = score_components(t, obs, events, dt_s, cfg, evidence)
        return self._settle(t, obs.at, comps, est.risk, evidence, issues)

    def _settle(self, t: GpuTrack, at: float, comps: dict[str, float], risk: float, evidence: Evidence,
                issues: list[InputIssue]) -> Assessment:
        """Step the state machine on the evidence and remember the verdict on the track."""
        before = t.last_state
        happened = step(t.machine, at=at, hard=evidence.hard, soft=evidence.soft, rules=self.config.states)
        target = max(evidence.hard, evidence.soft)
        reasons = evidence.reasons
        if t.machine.level > target and t.override is None:
            reasons.append("recovering")
        if t.override is not None:
            reasons.append("manual_cordon")
        t.last_components = comps
        t.last_reasons = tuple(dict.fromkeys(reasons))
        t.last_score = product(comps)
        t.last_risk = round(risk, 6)
        t.last_target = target
        t.last_actions = tuple(dict.fromkeys(evidence.actions))
        self._remember_issues(t, issues)
        now_state = t.state
        changed = before != now_state
        t.last_state = now_state
        cause = "first" if before is None else (happened or "escalated") if changed else ""
        return self._verdict(t, at, issues=issues, applied=True, previous=before if changed else None,
                             changed=changed, cause=cause)

    def observe_many(self, observations: Iterable[Observation]) -> list[Assessment]:
        return [self.observe(o) for o in observations]

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
            target=STATES[t.last_target], score=product(comps) if components is not None else t.last_score,
            risk=t.last_risk, components=comps, reasons=t.last_reasons if reasons is None else reasons,
            changed=changed, previous=previous, cause=cause, actions=t.last_actions, override=t.override,
            issues=tuple(issues), applied=applied)  # fmt: skip

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
        t.audit.append(OverrideRecord(action=action, reason=reason, by=by, at=at, previous=before,  # type: ignore[arg-type]  # action is one of OverrideRecord's literals
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
