"""Hysteresis: no flapping on noisy samples, escalation at once on hard evidence, recovery one level
at a time after a clean period, and the manual override with its audit trail."""

from __future__ import annotations

import math

import pytest
from health_helpers import DAY, GPU, HOUR, book, no_risk, obs

from gpuaware.health import HealthBook
from gpuaware.schemas import HealthState

H, D, Q = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.QUARANTINED
HOT = dict(model="A100", temperature_c=95.0)  # 8 degC past the A100's 87: hardware slowdown, soft evidence
COOL = dict(model="A100", temperature_c=60.0)


def states(b: HealthBook, samples: list[dict], step: float = 60.0) -> list[HealthState]:
    return [b.observe(obs(i * step, **s)).state for i, s in enumerate(samples)]


@pytest.mark.parametrize("pattern, expected", [
    # one hot sample among cool ones: soft evidence needs 2 consecutive observations -> never degraded
    ("CHCCC", "HHHHH"),
    # alternating hot and cool: never two in a row -> never degraded (a flapping sensor does not flap the GPU)
    ("HCHCHCHC", "HHHHHHHH"),
    # two in a row: degraded on the second, held by the one-day clean period afterwards
    ("CHHCC", "HHDDD"),
    # a longer episode
    ("HHHHC", "HDDDD"),
])
def test_soft_evidence_needs_confirmation(pattern: str, expected: str) -> None:
    b = no_risk()
    got = states(b, [HOT if c == "H" else COOL for c in pattern])
    assert "".join(s.value[0].upper() for s in got) == expected


def test_degraded_recovers_after_the_clean_period_and_not_before() -> None:
    b = no_risk()
    b.observe(obs(0.0, **HOT))
    assert b.observe(obs(60.0, **HOT)).state is D        # confirmed at t = 60 (last evidence at 60)
    # the clean clock starts at the last evidence: 60 + 86,400 s
    assert b.observe(obs(60.0 + DAY - 60.0, **COOL)).state is D
    a = b.observe(obs(60.0 + DAY, **COOL))
    assert (a.state, a.changed, a.previous, a.cause) == (H, True, D, "clean_period")


def test_evidence_during_the_clean_period_restarts_it() -> None:
    b = no_risk()
    b.observe(obs(0.0, **HOT))
    b.observe(obs(60.0, **HOT))
    # a single hot sample half a day later does not re-escalate (unconfirmed) but is evidence:
    b.observe(obs(DAY / 2, **HOT))
    assert b.observe(obs(60.0 + DAY, **COOL)).state is D      # would have recovered without it
    assert b.observe(obs(DAY / 2 + DAY, **COOL)).state is H    # one day after the last evidence


def test_quarantine_steps_down_one_level_at_a_time() -> None:
    # risk off: an uncorrectable error quarantines at once; one clean day -> degraded; another -> healthy
    b = no_risk()
    b.observe(obs(0.0, ecc_uncorrected_aggregate=0))
    assert b.observe(obs(HOUR, ecc_uncorrected_aggregate=1)).state is Q
    seen = {}
    for h in range(2, 60):
        a = b.observe(obs(h * HOUR, ecc_uncorrected_aggregate=1))
        seen.setdefault(a.state, h)
    # Q -> D at hour 1 + 24 = 25, D -> H at 25 + 24 = 49
    assert seen == {Q: 2, D: 25, H: 49}


def test_uncorrectable_error_with_the_default_risk_holds_quarantine_then_degraded() -> None:
    """Default config (aftershock K = 1.4, horizon 168 h, degrade at 5 %, quarantine at 50 %).

    After one burst at hour 0 the risk is 1 - exp(-1.4 * ln(1 + 168 / (dt + 1))):
    >= 0.5 until dt = 261 h (1.4 * ln(1 + 168/262) = 0.6934 >= ln 2 = 0.6931), so the last
    quarantine-level evidence is at hour 261 and the GPU steps down at 261 + 24 = 285;
    >= 0.05 until dt ~ 4,500 h, so it is healthy again about 4,524 h (6.3 months) after the error."""
    b = book()
    b.observe(obs(-HOUR, ecc_uncorrected_aggregate=0, interval_s=HOUR))
    first: dict[HealthState, float] = {}
    for h in range(0, 5000):
        a = b.observe(obs(h * HOUR, ecc_uncorrected_aggregate=1, interval_s=HOUR))
        first.setdefault(a.state, h)
    assert first[Q] == 0 and first[D] == 285
    k, c, horizon = 1.4, 1.0, 168.0
    last_degraded = max(h for h in range(5000) if -math.expm1(-k * math.log1p(horizon / (h + c))) >= 0.05)
    assert 4400 < last_degraded < 4600
    assert first[H] == last_degraded + 24


def test_a_burst_of_errors_is_one_aftershock_whatever_the_sampling_rate() -> None:
    # the same 10 errors one per minute (one burst) or all in one hourly sample give the same risk an hour later
    per_minute, hourly = book(), book()
    per_minute.observe(obs(0.0, ecc_uncorrected_aggregate=0))
    for i in range(1, 11):
        per_minute.observe(obs(i * 60.0, ecc_uncorrected_aggregate=i))
    hourly.observe(obs(0.0, ecc_uncorrected_aggregate=0, interval_s=HOUR))
    hourly.observe(obs(600.0, ecc_uncorrected_aggregate=10, interval_s=HOUR))
    a = per_minute.observe(obs(600.0 + HOUR, ecc_uncorrected_aggregate=10))
    b = hourly.observe(obs(600.0 + HOUR, ecc_uncorrected_aggregate=10, interval_s=HOUR))
    assert len(per_minute.tracks[GPU].bursts) == len(hourly.tracks[GPU].bursts) == 1
    assert a.risk == pytest.approx(b.risk)


def test_cordon_and_uncordon_are_audited() -> None:
    b = no_risk()
    b.observe(obs(0.0))
    a = b.cordon(GPU, reason="RMA ticket 42", by="alice", at=10.0)
    assert (a.state, a.changed, a.previous, a.cause) == (Q, True, H, "cordon")
    assert a.override is not None and a.override.reason == "RMA ticket 42" and "manual_cordon" in a.reasons
    # evidence keeps being scored underneath; the effective state stays pinned
    assert b.observe(obs(60.0)).state is Q
    a = b.uncordon(GPU, reason="repaired", by="bob", at=120.0)
    assert (a.state, a.previous, a.cause) == (H, Q, "uncordon") and "manual_cordon" not in a.reasons
    audit = b.tracks[GPU].audit
    assert [(r.action, r.by, r.reason, r.previous, r.current) for r in audit] == [
        ("cordon", "alice", "RMA ticket 42", H, Q), ("uncordon", "bob", "repaired", Q, H)]


def test_cordon_degraded_and_refusals() -> None:
    b = no_risk()
    assert b.cordon(GPU, reason="flaky fan", by="ops", at=0.0, state=D).state is D
    with pytest.raises(ValueError, match="reason"):
        b.cordon(GPU, reason=" ", by="ops", at=1.0)
    with pytest.raises(ValueError, match="uncordon"):
        b.cordon(GPU, reason="x", by="ops", at=1.0, state=H)
    b.uncordon(GPU, reason="fan replaced", by="ops", at=2.0)
    with pytest.raises(ValueError, match="not cordoned"):
        b.uncordon(GPU, reason="again", by="ops", at=3.0)


def test_uncordon_returns_to_the_evidence_or_clears_it() -> None:
    b = book()
    b.observe(obs(0.0, ecc_uncorrected_aggregate=0))
    b.observe(obs(60.0, ecc_uncorrected_aggregate=1))
    b.cordon(GPU, reason="investigating", by="alice", at=70.0, state=D)
    # without clear the automatic state (quarantined by the error) comes back
    assert b.uncordon(GPU, reason="done", by="alice", at=80.0).state is Q
    # clear: the GPU was replaced; the automatic state and the error history are reset
    a = b.uncordon(GPU, reason="GPU replaced", by="alice", at=90.0, clear=True)
    assert a.state is H and b.tracks[GPU].audit[-1].cleared
    assert b.observe(obs(120.0, ecc_uncorrected_aggregate=1)).state is H
    assert b.tracks[GPU].bursts == []
