"""Score components: each condition's component value, reason code, state and catalogue action.

Every case observes a baseline at t=0 (counters at their first value), then the condition. The risk
is switched off (``no_risk``) so each row tests one component alone; the risk has its own tests.
"""

from __future__ import annotations

import pytest
from health_helpers import GPU, NODE, no_risk, obs

from gpuaware.health import COMPONENTS
from gpuaware.schemas import GpuScored, GpuStateChanged, HealthState

H, D, Q = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.QUARANTINED


@pytest.mark.parametrize("baseline, at, condition, component, expected, reason, state, action", [
    # A100 slows down at 87 degC: 82 leaves 5 degC of the 10 that score 100 -> 50 + 50 * 5/10 = 75
    ({}, 60, dict(model="A100", temperature_c=82.0), "thermal", 75.0, "thermal_headroom_low", H, None),
    # 10 degC of headroom is enough: 100, nothing named
    ({}, 60, dict(model="A100", temperature_c=77.0), "thermal", 100.0, None, H, None),
    # 3 degC past the slowdown: 50 * (1 - 3/5) = 20
    ({}, 60, dict(model="A100", temperature_c=90.0), "thermal", 20.0, "thermal_headroom_low", H, None),
    # T4 slows down at 83: 80 leaves 3 -> 50 + 50 * 3/10 = 65
    ({}, 60, dict(model="T4", temperature_c=80.0), "thermal", 65.0, "thermal_headroom_low", H, None),
    # unknown model: 87 by default; 95 is 8 past it, beyond the 5 degC of hardware slowdown -> 0 (soft evidence)
    ({}, 60, dict(model="X9", temperature_c=95.0), "thermal", 0.0, "thermal_hw_slowdown", H, None),
    # thermally throttled for a whole 600 s window: share = (1 - e^-1) * 1 = 0.632 -> 100 * (1 - 0.632) = 36.8
    ({"interval_s": 600.0}, 600, dict(interval_s=600.0, thermal_throttled_pct=100.0), "thermal", 36.8,
     "thermal_throttle", H, None),
    # 12 CEs in 60 s: S_f = 12 * 360 * (1 - e^(-1/360)) = 11.983, r_f = 1.997/h -> 100 - 15*log2(2.997) = 76.2
    (dict(ecc_corrected_aggregate=0), 60, dict(ecc_corrected_aggregate=12), "memory_errors", 76.2,
     "ecc_corrected_rate", H, None),
    # one uncorrectable error: 0 and quarantined at once (hard evidence)
    (dict(ecc_uncorrected_aggregate=0), 60, dict(ecc_uncorrected_aggregate=1), "memory_errors", 0.0,
     "ecc_uncorrected", Q, None),
    # the volatile counter alone counts too
    (dict(ecc_uncorrected_volatile=2), 60, dict(ecc_uncorrected_volatile=3), "memory_errors", 0.0,
     "ecc_uncorrected", Q, None),
    # a rollup's delta counts when no cumulative counter is reported
    ({}, 60, dict(ecc_uncorrected_delta=1), "memory_errors", 0.0, "ecc_uncorrected", Q, None),
    ({}, 60, dict(row_remap_pending=True), "row_remap", 40.0, "row_remap_pending", D, "RESET_GPU"),
    ({}, 60, dict(row_remap_failed=True), "row_remap", 0.0, "row_remap_failure", Q, "CONTACT_SUPPORT"),
    # 5 retired pages: 100 - 2 * 5 = 90; DCGM's soft limit 15 degrades, its limit 63 quarantines
    (dict(retired_pages=0), 60, dict(retired_pages=5), "row_remap", 90.0, None, H, None),
    (dict(retired_pages=0), 60, dict(retired_pages=20), "row_remap", 60.0, "retired_pages", D, None),
    (dict(retired_pages=0), 60, dict(retired_pages=70), "row_remap", 0.0, "retired_pages", Q, None),
    # XIDs by the catalogue: fatal 0 (quarantined), hardware 40 (degraded), application 95, unknown 90
    ({}, 60, dict(xids=(79,)), "xid", 0.0, "xid_79", Q, "REBOOT_NODE"),
    ({}, 60, dict(xids=(48,)), "xid", 0.0, "xid_48", Q, "RESET_GPU"),
    ({}, 60, dict(xids=(94,)), "xid", 40.0, "xid_94", D, None),
    ({}, 60, dict(xids=(13,)), "xid", 95.0, "xid_13", H, None),
    ({}, 60, dict(xids=(32,)), "xid", 80.0, "xid_32", H, None),
    ({}, 60, dict(xids=(999,)), "xid", 90.0, "xid_unknown_999", H, None),
    # 20 replays in 60 s: S = 20 * 5 * (1 - e^-0.2) = 18.127 over tau 300 s -> 3.625/min
    #   -> 100 - 60 * (3.625 - 1) / (8 - 1) = 77.5
    (dict(pcie_replay=0), 60, dict(pcie_replay=20), "pcie", 77.5, "pcie_replay", H, None),
    # 60 replays: 10.9/min >= DCGM's 8/min -> 40 (soft: one sample does not degrade)
    (dict(pcie_replay=0), 60, dict(pcie_replay=60), "pcie", 40.0, "pcie_replay", H, None),
    # 10 of the 12 links seen up: 100 * 10/12 = 83.3 (soft)
    (dict(nvlink_up=12), 60, dict(nvlink_up=10), "nvlink", 83.3, "nvlink_down", H, None),
    # 1,000 CRC errors/s over 60 s >= DCGM's 100/s -> 50
    (dict(nvlink_crc_errors=0), 60, dict(nvlink_crc_errors=60_000), "nvlink", 50.0, "nvlink_errors", H, None),
    # 450 W against a 400 W limit: beyond 1.1 x -> 60
    ({}, 60, dict(power_w=450.0, power_limit_w=400.0), "power", 60.0, "power_over_limit", H, None),
    ({}, 60, dict(power_w=390.0, power_limit_w=400.0), "power", 100.0, None, H, None),
    ({}, 60, dict(throttle_reasons=0x80), "power", 60.0, "power_brake", H, None),
])
def test_component(baseline, at, condition, component, expected, reason, state, action) -> None:
    b = no_risk()
    b.observe(obs(0.0, **baseline))
    a = b.observe(obs(float(at), **condition))
    assert a.components[component] == pytest.approx(expected, abs=0.05)
    assert set(a.components) == set(COMPONENTS)
    if reason is None:
        assert not [r for r in a.reasons if r.startswith(component[:4])], a.reasons
    else:
        assert reason in a.reasons
    assert a.state is state
    if action is not None:
        assert action in a.actions
    # the score is the product of the components
    product = 100.0
    for v in a.components.values():
        product *= v / 100.0
    assert a.score == pytest.approx(product, abs=0.05)


def test_components_compound_into_the_score() -> None:
    # thermal 75 (82 degC on an A100) and pcie 77.5 (20 replays in a minute): 100 * 0.75 * 0.775 = 58.1
    b = no_risk()
    b.observe(obs(0.0, pcie_replay=0))
    a = b.observe(obs(60.0, model="A100", temperature_c=82.0, pcie_replay=20))
    assert a.score == pytest.approx(58.1, abs=0.05)
    assert {"thermal_headroom_low", "pcie_replay"} <= set(a.reasons)


def test_a_clean_gpu_scores_100_healthy_with_no_reasons() -> None:
    b = no_risk()
    b.observe(obs(0.0, ecc_corrected_aggregate=5, temperature_c=50.0, model="A100"))
    a = b.observe(obs(60.0, ecc_corrected_aggregate=5, temperature_c=50.0, model="A100"))
    assert (a.score, a.state, a.reasons, a.risk) == (100.0, H, (), 0.0)


def test_contract_events() -> None:
    b = no_risk()
    first = b.observe(obs(0.0, ecc_uncorrected_aggregate=0))
    # the first assessment of a GPU is a change from nothing (previous None)
    change = first.to_state_changed(source="health/0", emitted_at=1.0)
    assert isinstance(change, GpuStateChanged) and change.previous is None and change.current is H
    a = b.observe(obs(60.0, ecc_uncorrected_aggregate=1))
    scored = a.to_scored(source="health/0", emitted_at=61.0, model_version="rules-v1")
    assert isinstance(scored, GpuScored)
    assert (scored.node, scored.gpu_uuid, scored.state, scored.score) == (NODE, GPU, Q, 0.0)
    assert "ecc_uncorrected" in scored.reasons and scored.components["memory_errors"] == 0.0
    change = a.to_state_changed(source="health/0", emitted_at=61.0)
    assert change is not None and (change.previous, change.current) == (H, Q)
    same = b.observe(obs(120.0, ecc_uncorrected_aggregate=1))
    assert same.to_state_changed(source="health/0", emitted_at=121.0) is None
