"""The failure risk: its arithmetic (risk.py's docstring), rising on corrected-error acceleration, XID
frequency and thermal drift, and degrading a GPU before its first hard error."""

from __future__ import annotations

import itertools
import math

import pytest
from health_helpers import GPU, HOUR, book, obs

from gpuaware.health import RiskModel
from gpuaware.health.risk import aftershock_expected, ce_hazard, estimate
from gpuaware.schemas import HealthState

M = RiskModel()


@pytest.mark.parametrize("ce_fast, ce_slow, expected_hazard, expected_accel", [
    # steady 1 CE/h for long: S_f = 6, S_s = 168 -> r_f = r_s = 1, a = 1 -> 5e-5 * 1 * (1 + 0) = 5e-5
    (6.0, 168.0, 5e-5, 1.0),
    # the same short rate arriving suddenly: S_s = 6 -> r_s = 6/168 = 0.0357, a = 28
    #   -> 5e-5 * 1 * (1 + 0.5 * ln 28) = 5e-5 * 2.666 = 1.333e-4
    (6.0, 6.0, 5e-5 * (1 + 0.5 * math.log(28.0)), 28.0),
    # docstring example: 20 CEs at once on a quiet GPU -> r_f = 3.33, a = 28 -> 4.44e-4
    (20.0, 20.0, 4.4435e-4, 28.0),
    # a slowing rate (long rate above the short one) is no acceleration: a = 1 -> 5e-5 * 0.5 = 2.5e-5
    (3.0, 168.0, 2.5e-5, 1.0),
    # no corrected errors: no hazard
    (0.0, 50.0, 0.0, 1.0),
])
def test_ce_hazard(ce_fast, ce_slow, expected_hazard, expected_accel) -> None:
    hazard, _, accel = ce_hazard(ce_fast, ce_slow, M)
    assert hazard == pytest.approx(expected_hazard, rel=1e-3)
    assert accel == pytest.approx(expected_accel, rel=1e-6)


@pytest.mark.parametrize("hours_since, expected", [
    # one burst 100 h ago: 1.4 * ln((100 + 1 + 168) / (100 + 1)) = 1.3714
    ([100.0], 1.3714),
    # right after it: 1.4 * ln(169 / 1) = 7.18
    ([0.0], 7.1814),
    # two bursts add up: 1.3714 + 1.4 * ln(1 + 168/1001) = 1.3714 + 0.2171
    ([100.0, 1000.0], 1.5885),
])
def test_aftershock_expected(hours_since, expected) -> None:
    assert aftershock_expected(hours_since, M) == pytest.approx(expected, abs=1e-3)


def test_estimate_adds_the_drivers_and_names_them() -> None:
    # burst 100 h ago (1.3714) + the 20-CE storm (168 * 4.4435e-4 = 0.07465) -> risk = 1 - e^-1.446 = 0.7645
    est = estimate(bursts_hours_since=[100.0], ce_fast=20.0, ce_slow=20.0, xid_sum=0.0, drift_c=0.0, m=M)
    assert est.expected["ue_recurrence"] == pytest.approx(1.3714, abs=1e-3)
    assert est.expected["ce_rate"] == pytest.approx(0.07465, abs=1e-4)
    assert est.risk == pytest.approx(1 - math.exp(-(1.3714 + 0.07465)), abs=1e-3)
    assert est.drivers == ("ue_recurrence",)      # the CE part is under a tenth of the total
    # thermal drift 12 degC: 168 * 1e-4 * (12 - 5) = 0.1176 -> 1 - e^-0.1176 = 0.1109
    hot = estimate(bursts_hours_since=[], ce_fast=0, ce_slow=0, xid_sum=0, drift_c=12.0, m=M)
    assert hot.risk == pytest.approx(0.1109, abs=1e-4) and hot.drivers == ("thermal_drift",)
    # three hardware XIDs just now: r_x = 3/24 -> 168 * 5e-3 * 0.125 = 0.105 -> risk 0.0997
    xid = estimate(bursts_hours_since=[], ce_fast=0, ce_slow=0, xid_sum=3.0, drift_c=0.0, m=M)
    assert xid.risk == pytest.approx(1 - math.exp(-0.105), abs=1e-4)


def test_risk_rises_as_corrected_errors_accelerate() -> None:
    # hourly CE counts doubling each hour after a quiet week: the risk rises every hour
    b = book()
    b.observe(obs(0.0, ecc_corrected_aggregate=0, interval_s=HOUR))
    for h in range(1, 24 * 7):
        b.observe(obs(h * HOUR, ecc_corrected_aggregate=0, interval_s=HOUR))
    total, risks = 0, []
    for k in range(6):
        total += 2 ** k
        risks.append(b.observe(obs((24 * 7 + k) * HOUR, ecc_corrected_aggregate=total, interval_s=HOUR)).risk)
    assert all(a < b for a, b in itertools.pairwise(risks)), risks


def test_the_same_errors_weigh_more_when_they_accelerate() -> None:
    """4 CEs an hour for the last 6 h, after a week at 4/h (steady) or after a quiet week (sudden).

    steady: S_f = 4 * 6 = 24 (at its level), r_f = 4; S_s = 4 * 168 * (1 - e^-1) = 424.8 after one week,
            r_s = 2.53, a = 1.58 -> 5e-5 * 4 * (1 + 0.5 * ln 1.58) = 2.46e-4/h -> risk 1 - e^(-168 * 2.46e-4) = 4.0 %
    sudden: S_f = 24 * (1 - e^-1) = 15.2, r_f = 2.53; S_s = 23.6, r_s = 0.140, a = 18.0
            -> 5e-5 * 2.53 * (1 + 0.5 * ln 18) = 3.09e-4/h -> risk 5.1 %: more, from fewer recent errors."""
    steady, sudden = book(), book()
    last = {}
    for name, b, before in (("steady", steady, 4), ("sudden", sudden, 0)):
        b.observe(obs(0.0, ecc_corrected_aggregate=0, interval_s=HOUR))
        n = 0
        for h in range(1, 24 * 7):
            n += before
            b.observe(obs(h * HOUR, ecc_corrected_aggregate=n, interval_s=HOUR))
        for h in range(24 * 7, 24 * 7 + 6):
            n += 4
            last[name] = b.observe(obs(h * HOUR, ecc_corrected_aggregate=n, interval_s=HOUR))
    assert last["steady"].risk == pytest.approx(0.0402, abs=5e-4)
    assert last["sudden"].risk == pytest.approx(0.0506, abs=5e-4)
    assert sudden.tracks[GPU].ce_fast < steady.tracks[GPU].ce_fast


def test_corrected_error_storm_degrades_before_the_first_hard_error() -> None:
    # a quiet day, then 20 CEs an hour: hour 1 of the storm is evidence, hour 2 confirms it -> degraded,
    # with no uncorrectable error, no XID, nothing but the trend
    b = book()
    b.observe(obs(0.0, ecc_corrected_aggregate=0, interval_s=HOUR))
    for h in range(1, 25):
        b.observe(obs(h * HOUR, ecc_corrected_aggregate=0, interval_s=HOUR))
    first = b.observe(obs(25 * HOUR, ecc_corrected_aggregate=20, interval_s=HOUR))
    second = b.observe(obs(26 * HOUR, ecc_corrected_aggregate=40, interval_s=HOUR))
    assert first.risk >= 0.05 and first.state is HealthState.HEALTHY
    assert second.state is HealthState.DEGRADED and second.cause == "escalated"
    assert {"failure_risk", "ce_rate"} <= set(second.reasons)
    assert b.tracks[GPU].lifetime_ue == 0 and b.tracks[GPU].bursts == []


def test_a_few_corrected_errors_do_not_degrade() -> None:
    # 3 CEs in an hour on a quiet GPU: r_f ~ 0.46/h -> well under 5 % a week
    b = book()
    b.observe(obs(0.0, ecc_corrected_aggregate=0, interval_s=HOUR))
    a = b.observe(obs(HOUR, ecc_corrected_aggregate=3, interval_s=HOUR))
    a = b.observe(obs(2 * HOUR, ecc_corrected_aggregate=3, interval_s=HOUR))
    assert a.risk < 0.05 and a.state is HealthState.HEALTHY


def test_repeated_system_xids_raise_the_risk_until_it_degrades() -> None:
    # XID 32 (system, weight 1) twice an hour apart: S_x ~ 1.96 -> 168 * 5e-3 * 1.96/24 = 0.069 -> 6.6 %;
    # once alone: 168 * 5e-3 / 24 = 0.035 -> 3.4 %, under the 5 % that degrades
    b = book()
    b.observe(obs(0.0))
    first = b.observe(obs(HOUR, xids=(32,))).risk
    second = b.observe(obs(2 * HOUR, xids=(32,))).risk
    assert first < 0.05 <= second
    assert second == pytest.approx(0.066, abs=0.003)
    states = [b.observe(obs(2 * HOUR + 60.0 * i)).state for i in range(1, 3)]
    assert states[-1] is HealthState.DEGRADED


def test_a_quarantining_xid_is_counted_once_as_a_burst_not_in_the_xid_frequency() -> None:
    # XID 79 (fallen off the bus) starts a burst: its recurrence risk is the aftershock term's alone,
    # so with the aftershock switched off it adds nothing to the XID frequency; XID 13 (the
    # application's fault) adds nothing either, however often
    b = book(risk={"aftershock_k": 0.0})
    b.observe(obs(0.0))
    a = b.observe(obs(60.0, xids=(79,)))
    assert a.risk == 0.0 and "xid_frequency" not in a.reasons and a.state is HealthState.QUARANTINED
    c = book()
    c.observe(obs(0.0))
    for i in range(1, 20):
        a = c.observe(obs(60.0 * i, xids=(13,)))
    assert a.risk == 0.0 and a.state is HealthState.HEALTHY


def test_thermal_drift_counts_only_near_the_slowdown_temperature() -> None:
    # a day at 40 degC, then 80 degC for two hours: an A100 (slowdown 87) within 10 degC -> drift counts;
    # the same jump to 70 degC (17 degC of headroom) is work, not drift
    for hot, drifting in ((80.0, True), (70.0, False)):
        b = book()
        for h in range(0, 25):
            b.observe(obs(h * HOUR, model="A100", temperature_c=40.0, interval_s=HOUR))
        a = b.observe(obs(25 * HOUR, model="A100", temperature_c=hot, interval_s=HOUR))
        a = b.observe(obs(26 * HOUR, model="A100", temperature_c=hot, interval_s=HOUR))
        assert ("thermal_drift" in a.reasons) is drifting
        assert (a.state is HealthState.DEGRADED) is drifting
