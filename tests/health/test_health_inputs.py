"""Bad input never flips a state: late, duplicated and missing samples, counter resets, unknown XIDs
and stale telemetry are each counted and explained, and the GPU stays healthy."""

from __future__ import annotations

import pytest
from health_helpers import GPU, HOUR, book, obs

from gpuaware.health import IssueKind
from gpuaware.schemas import HealthState

H = HealthState.HEALTHY


@pytest.mark.parametrize("samples, counter, count, kind", [
    # driver reload: the volatile CE counter restarts (100 -> 5); 95 errors are not invented
    ([dict(ecc_corrected_volatile=100), dict(ecc_corrected_volatile=5)], "counter_resets", 1, IssueKind.COUNTER_RESET),
    # an aggregate UE counter that goes down (InfoROM cleared) is no uncorrectable error
    ([dict(ecc_uncorrected_aggregate=3), dict(ecc_uncorrected_aggregate=0)], "counter_resets", 1,
     IssueKind.COUNTER_RESET),
    # two counters reset in one observation: two resets
    ([dict(ecc_uncorrected_volatile=4, pcie_replay=900), dict(ecc_uncorrected_volatile=0, pcie_replay=1)],
     "counter_resets", 2, IssueKind.COUNTER_RESET),
    # unknown XID codes, even many: counted, scored a little, no state change
    ([{}, dict(xids=(999, 999, 1234))], "unknown_xids", 3, IssueKind.UNKNOWN_XID),
])
def test_repaired_input_is_counted_and_explained(samples, counter, count, kind) -> None:
    b = book()
    assessments = [b.observe(obs(i * 60.0, **s)) for i, s in enumerate(samples)]
    last = assessments[-1]
    assert last.state is H and last.applied and last.risk < 0.05
    assert getattr(b.tracks[GPU].inputs, counter) == count
    assert [i.kind for i in last.issues] == [kind] * len(last.issues) and last.issues
    assert all(i.detail for i in last.issues)
    assert b.counters().as_dict()[counter] == count


def test_counting_resumes_after_a_reset() -> None:
    # 100 -> 5 (reset, nothing counted) -> 17 (12 new errors counted from the new baseline)
    b = book()
    b.observe(obs(0.0, ecc_corrected_volatile=100))
    b.observe(obs(60.0, ecc_corrected_volatile=5))
    assert b.tracks[GPU].ce_fast == 0.0
    b.observe(obs(120.0, ecc_corrected_volatile=17))
    # the 12 errors arrived over 60 s: 12 * 360 * (1 - e^(-1/360)) = 11.983
    assert b.tracks[GPU].ce_fast == pytest.approx(11.983, abs=1e-3)


def test_late_and_duplicate_observations_are_refused() -> None:
    b = book()
    b.observe(obs(0.0, ecc_uncorrected_aggregate=0))
    b.observe(obs(120.0, ecc_uncorrected_aggregate=0))
    # an older observation with an uncorrectable error: refused, the state does not move
    late = b.observe(obs(60.0, ecc_uncorrected_aggregate=1))
    assert (late.applied, late.state, [i.kind for i in late.issues]) == (False, H, [IssueKind.OUT_OF_ORDER])
    # a second observation at the same time: refused too
    dup = b.observe(obs(120.0, ecc_uncorrected_aggregate=1))
    assert (dup.applied, dup.state, [i.kind for i in dup.issues]) == (False, H, [IssueKind.DUPLICATE])
    inputs = b.tracks[GPU].inputs
    assert (inputs.out_of_order, inputs.duplicates, inputs.observations) == (1, 1, 2)
    # the baseline was not disturbed: a later real error still counts
    assert b.observe(obs(180.0, ecc_uncorrected_aggregate=1)).state is HealthState.QUARANTINED


def test_a_gap_is_counted_and_rates_use_the_real_time() -> None:
    b = book()
    b.observe(obs(0.0, ecc_corrected_aggregate=0))
    # an hour without samples (60 s expected): gap of 3,540 s; the 60 CEs that piled up are spread over
    # the hour: S_f = 60 * 6 * (1 - e^(-1/6)) = 55.27, a rate of 9.2/h, not 60 in a minute
    a = b.observe(obs(HOUR, ecc_corrected_aggregate=60))
    inputs = b.tracks[GPU].inputs
    assert (inputs.gaps, inputs.missing_s) == (1, pytest.approx(3540.0))
    assert [i.kind for i in a.issues] == [IssueKind.GAP]
    assert b.tracks[GPU].ce_fast == pytest.approx(55.27, abs=0.01)
    assert a.state is H


def test_stale_telemetry_is_scored_never_a_state_change() -> None:
    b = book()
    b.observe(obs(0.0))
    assert b.tick(299.0) == []                       # stale after 300 s
    first, again = b.tick(400.0), b.tick(500.0)
    assert [a.state for a in first] == [H] and "stale_telemetry" in first[0].reasons
    # telemetry component 50 -> score 100 * 0.5 = 50
    assert first[0].components["telemetry"] == 50.0 and first[0].score == 50.0
    assert [i.kind for i in first[0].issues] == [IssueKind.STALE] and again[0].issues == ()
    assert b.tracks[GPU].inputs.stale_periods == 1   # one period, however many ticks
    back = b.observe(obs(600.0))
    assert "stale_telemetry" not in back.reasons and back.score == 100.0


def test_a_stale_quarantined_gpu_stays_quarantined() -> None:
    # XID 79: the GPU fell off the bus and its telemetry stops; days later it is still quarantined
    b = book()
    b.observe(obs(0.0))
    b.observe(obs(60.0, xids=(79,)))
    assert [a.state for a in b.tick(60.0 + 10 * 86400.0)] == [HealthState.QUARANTINED]


def test_xid_last_gauge_first_value_is_a_baseline() -> None:
    # the sample's xid_last is "the last XID since the agent started": its first value may be old
    b = book()
    assert b.observe(obs(0.0, xid_last=79)).state is H
    assert b.observe(obs(60.0, xid_last=79)).state is H      # unchanged: no new XID
    assert b.observe(obs(120.0, xid_last=13)).reasons == ("xid_13",)
    assert b.observe(obs(180.0, xid_last=79)).state is HealthState.QUARANTINED


def test_unknown_xid_codes_are_kept_by_code() -> None:
    b = book()
    b.observe(obs(0.0, xids=(999,)))
    b.observe(obs(60.0, xids=(999, 4242)))
    assert b.tracks[GPU].inputs.unknown_xid_codes == {"999": 2, "4242": 1}
    assert b.state_of(GPU) is H
