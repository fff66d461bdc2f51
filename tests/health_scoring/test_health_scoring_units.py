"""The service's pure parts: the settings' time scaling, the view's publication policy, redelivery
versus duplicates, checkpoints handed back."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from health_scoring_helpers import T0, batch, row

from gpuaware.health import HealthBook, HealthConfig, Observation, RiskModel, ScoreRules, StateRules
from gpuaware.runtime import SettingsError
from gpuaware.schemas import CordonAction, CordonRequest, HealthState
from gpuaware.services.health_scoring.settings import SCALING, HealthScoringSettings, scaled
from gpuaware.services.health_scoring.state import UnknownGpu, View


@pytest.mark.parametrize("group", [StateRules, RiskModel, ScoreRules])
def test_every_health_knob_says_how_it_scales_with_time(group: type) -> None:
    assert set(SCALING[group]) == {f.name for f in dataclasses.fields(group)}
    assert set(SCALING[group].values()) <= {"duration", "rate", "fixed"}


@pytest.mark.parametrize(("name", "kind", "expected"), [
    # a twin at 576x: a virtual day of clean period is 150 wall seconds, an XID holds 3600 / 576 = 6.25 s
    ("states.degraded_clean_s", "duration", 86400 / 576),
    ("states.xid_hold_s", "duration", 6.25),
    ("states.stale_after_s", "fixed", 300.0),  # the telemetry's arrival is wall-clock either way
    ("risk.horizon_h", "duration", 168 / 576),
    ("risk.thermal_beta", "rate", 1e-4 * 576),
    ("score.pcie_degrade_per_min", "rate", 8 * 576),
    ("risk.ce_beta", "fixed", 5e-5),
])
def test_scaled_configuration(name: str, kind: str, expected: float) -> None:
    group, field = name.split(".")
    assert getattr(getattr(scaled(HealthConfig(), 576), group), field) == pytest.approx(expected)


def test_a_compressed_history_is_judged_as_the_same_history_in_real_time() -> None:
    """Two days of a GPU every 10 minutes (corrected errors speeding up, an uncorrectable burst, a hot
    spell), once in real time and once 576x compressed with the scaled rules: same states, same risk."""
    s = 576.0

    def history(scale: float) -> list[Observation]:
        out, ce, ue = [], 0, 0
        for k in range(288):
            t = k * 600.0
            ce += 2 if k < 100 else 25
            ue += 3 if k == 150 else 0
            temp = 90.0 if 200 <= k < 210 else 60.0
            out.append(Observation(gpu_uuid="G", node="n", at=T0 + t / scale, interval_s=600.0 / scale,
                                   model="A100", ecc_corrected_aggregate=ce, ecc_uncorrected_aggregate=ue,
                                   temperature_c=temp))
        return out

    real = HealthBook(HealthConfig().replace(states={"quarantine_clean_s": 7200.0, "degraded_clean_s": 7200.0}))
    fast = HealthBook(scaled(real.config, s))
    a = [real.observe(o) for o in history(1.0)]
    b = [fast.observe(o) for o in history(s)]
    assert [x.state for x in a] == [x.state for x in b]
    assert [x.risk for x in a] == pytest.approx([x.risk for x in b], rel=1e-6, abs=1e-9)
    assert {x.state for x in a} == {HealthState.HEALTHY, HealthState.DEGRADED, HealthState.QUARANTINED}


def test_settings_refuse_a_bad_scale_and_bad_rules() -> None:
    with pytest.raises(SettingsError, match="TIME_SCALE"):
        HealthScoringSettings(time_scale=0)
    with pytest.raises(SettingsError, match="health rules"):
        HealthScoringSettings(risk_degrade=0.9, risk_quarantine=0.5)
    assert HealthScoringSettings.from_env({"GPUAWARE_HEALTH_SCORING_TIME_SCALE": "288"}).time_scale == 288


def _view(**kw: object) -> View:
    return View(HealthConfig(), cluster="c", source="health-scoring/t", **kw)  # type: ignore[arg-type]  # kw holds the keyword fields under test


def test_a_redelivery_is_skipped_but_a_duplicate_is_bad_input() -> None:
    v = _view()
    msg = batch("c", "n1", T0, [row("n1", 0)])
    v.observe(msg, redelivered=False, now=T0)
    v.observe(msg, redelivered=True, now=T0)  # the server says it delivered this one before
    assert v.counts["redelivered"] == 1 and not v.issues
    v.observe(msg, redelivered=False, now=T0)  # the agent sent the same tick again
    assert v.issues == {"duplicate": 1} and v.counts["refused"] == 1
    # a redelivered message the view never applied (the crash came before its checkpoint) is applied
    later = batch("c", "n1", T0 + 10, [row("n1", 0)])
    v.observe(later, redelivered=True, now=T0)
    assert v.book.tracks["GPU-n1-0"].last_at == T0 + 10


def test_scores_once_per_window_at_once_on_a_change_with_ids_from_what_they_say() -> None:
    v = _view(score_window_s=60.0, score_delta=10.0)
    base = T0 - T0 % 60

    def kinds(at: float, **kw: object) -> list[str]:
        w = v.observe(batch("c", "n1", at, [row("n1", 0, **kw)]), redelivered=False, now=at)
        return [o.channel.subject.split(".")[2] for o in w.out]

    assert kinds(base) == ["state_changed", "scored"]  # the first state of a GPU never seen
    assert kinds(base + 10) == [] and kinds(base + 50) == []  # same window, same score
    assert kinds(base + 60) == ["scored"]  # the next window
    assert sorted(kinds(base + 70, xid_last=79)) == ["raised", "raised", "raised", "scored", "state_changed"]
    out = v.observe(batch("c", "n1", base + 70, [row("n1", 0, xid_last=79)]), redelivered=False, now=base + 99)
    assert out.out == []  # a duplicate publishes nothing
    # the same assessment made twice (a crash before the checkpoint) gets the same message ids
    ids = []
    for _ in range(2):
        w = _view().observe(batch("c", "n1", base, [row("n1", 0)]), redelivered=False, now=base + 5)
        ids.append([o.msg_id for o in w.out])
    assert ids[0] == ids[1] and ids[0] == [f"hc/c/GPU-n1-0/{base:.6f}/healthy", f"hs/c/GPU-n1-0/{base:.6f}"]


def test_a_checkpoint_that_failed_is_written_by_the_next_one() -> None:
    v = _view()
    v.observe(batch("c", "n1", T0, [row("n1", 0), row("n1", 1)]), redelivered=False, now=T0)
    cp, version = v.take_checkpoint()
    assert len(cp.tracks) == 2 and len(cp.scores) == 2 and version == v.version
    assert not v.take_checkpoint()[0]
    v.give_back(cp)
    again, _ = v.take_checkpoint()
    assert [t.gpu_uuid for t in again.tracks] == ["GPU-n1-0", "GPU-n1-1"] and again.scores == cp.scores
    track = msgspec.json.decode(again.tracks[0].track_json)
    assert track["gpu_uuid"] == "GPU-n1-0" and track["last_at"] == T0


def test_overrides_need_a_known_gpu_and_carry_who_and_why() -> None:
    v = _view()
    req = CordonRequest(source="cli", emitted_at=T0, cluster="c", gpu_uuid="GPU-n1-0", reason="RMA 7", by="alice")
    with pytest.raises(UnknownGpu):
        v.override(req, T0)
    v.observe(batch("c", "n1", T0, [row("n1", 0)]), redelivered=False, now=T0)
    work, reply = v.override(req, T0 + 1)
    assert reply.previous is HealthState.HEALTHY and reply.current is HealthState.QUARANTINED and reply.changed
    change = next(o.msg for o in work.out if o.channel.subject.startswith("health.gpu.state_changed"))
    assert {"manual_cordon", "cordon_by:alice", "cordon_reason:RMA 7"} <= set(change.reasons)
    v.observe(batch("c", "n1", T0 + 2, [row("n1", 1)]), redelivered=False, now=T0 + 2)
    with pytest.raises(ValueError, match="not cordoned"):
        v.override(msgspec.structs.replace(req, gpu_uuid="GPU-n1-1", action=CordonAction.UNCORDON), T0 + 3)
    cp, _ = v.take_checkpoint()
    assert [(o.action, o.requested_by, o.reason) for o in cp.overrides] == [("cordon", "alice", "RMA 7")]
