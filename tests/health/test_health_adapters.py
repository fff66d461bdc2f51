"""Telemetry contract -> Observation, the stream hook, and a restart keeping the state (dump/load)."""

from __future__ import annotations

import pytest
from health_helpers import GPU, HOUR, NODE, book, obs

from gpuaware.health import (
    HealthBook,
    HealthConfig,
    Observation,
    from_rolledup,
    from_sampled,
    score_stream,
)
from gpuaware.schemas import (
    Anomaly,
    GpuRolledUp,
    GpuRollup,
    GpuSample,
    GpuSampled,
    HealthState,
    RollupWindow,
    Stats,
)


def test_from_sampled_rows() -> None:
    batch = GpuSampled.from_samples(
        [GpuSample(gpu_uuid="GPU-0", gpu_index=0, temperature_c=60.0, ecc_uncorrected_aggregate=0, xid_last=0),
         GpuSample(gpu_uuid="GPU-1", gpu_index=1, temperature_c=70.0, nvlink_up=12, row_remap_pending=True)],
        source="agent/n", emitted_at=10.0, node="n", sampled_at=10.0, interval_s=5.0)
    got = from_sampled(batch, model_of={"GPU-1": "A100"}.get)
    assert [(o.gpu_uuid, o.gpu_index, o.at, o.interval_s, o.node) for o in got] == [
        ("GPU-0", 0, 10.0, 5.0, "n"), ("GPU-1", 1, 10.0, 5.0, "n")]
    assert (got[0].ecc_uncorrected_aggregate, got[0].xid_last, got[0].model) == (0, 0, None)
    assert (got[1].nvlink_up, got[1].row_remap_pending, got[1].model) == (12, True, "A100")


@pytest.mark.parametrize("flags, throttled, xid_last, expected_thermal, expected_xids", [
    # throttled 40 % of the window and the agent flagged heat: 40 % thermal
    (Anomaly.THERMAL, 40.0, None, 40.0, ()),
    # throttled but no THERMAL flag (a power cap): no thermal time
    (Anomaly.POWER_CAPPED, 40.0, None, 0.0, ()),
    # the window's XID, and GPU_LOST as XID 79
    (Anomaly.GPU_LOST, None, 48, None, (48, 79)),
])
def test_from_rolledup(flags, throttled, xid_last, expected_thermal, expected_xids) -> None:
    msg = GpuRolledUp(source="collector/0", emitted_at=120.0, node="n", window=RollupWindow.MINUTE,
                      window_start=60.0, gpus=(GpuRollup(
                          gpu_uuid="GPU-0", gpu_index=3, samples=12, throttled_pct=throttled, xid_last=xid_last,
                          temperature_c=Stats(mean=70.0, max=83.0, p95=80.0), ecc_uncorrected_delta=2,
                          pcie_replay_delta=5, anomaly_flags=flags),))
    (o,) = from_rolledup(msg, width_s=60.0)
    assert (o.at, o.interval_s, o.gpu_index, o.node) == (120.0, 60.0, 3, "n")
    assert (o.ecc_uncorrected_delta, o.pcie_replay_delta, o.temperature_c) == (2, 5, 83.0)
    assert o.thermal_throttled_pct == expected_thermal and o.xids == expected_xids


def test_rollups_feed_the_tracker() -> None:
    b = HealthBook()
    msg = GpuRolledUp(source="c", emitted_at=0.0, node="n", window=RollupWindow.MINUTE, window_start=0.0,
                      gpus=(GpuRollup(gpu_uuid="GPU-0", gpu_index=0, samples=12, ecc_uncorrected_delta=1),))
    (a,) = [b.observe(o) for o in from_rolledup(msg, width_s=60.0)]
    assert a.state is HealthState.QUARANTINED and "ecc_uncorrected" in a.reasons


def test_a_restart_keeps_the_state() -> None:
    # the same stream scored by one book, or by a book dumped and loaded half-way: identical verdicts
    # (an uncorrectable error at hour 5 quarantines until hour ~290, then degraded)
    stream = [obs(0.0, ecc_uncorrected_aggregate=0, ecc_corrected_aggregate=0, interval_s=HOUR)]
    stream += [obs(h * HOUR, ecc_uncorrected_aggregate=1 if h >= 5 else 0, ecc_corrected_aggregate=3 * h,
                   temperature_c=60.0 + h % 7, interval_s=HOUR) for h in range(1, 400)]
    whole = list(score_stream(stream))
    first = book()
    before = [first.observe(o) for o in stream[:150]]
    first.cordon(GPU, reason="check", by="ops", at=150 * HOUR - 1)
    first.uncordon(GPU, reason="ok", by="ops", at=150 * HOUR - 0.5)
    restarted = HealthBook.load(first.dump(), HealthConfig())
    after = [restarted.observe(o) for o in stream[150:]]
    assert [(a.state, a.score, a.risk, a.reasons) for a in before + after] == [
        (a.state, a.score, a.risk, a.reasons) for a in whole]
    assert [r.action for r in restarted.tracks[GPU].audit] == ["cordon", "uncordon"]
    assert {a.state for a in whole} == {HealthState.HEALTHY, HealthState.QUARANTINED, HealthState.DEGRADED}


def test_score_stream_interleaves_gpus() -> None:
    b = HealthBook()
    stream = [Observation(gpu_uuid=f"GPU-{i % 3}", node=NODE, at=float(i // 3), xids=(79,) if i == 4 else ())
              for i in range(9)]
    states = [a.state for a in score_stream(stream, book=b)]
    assert states.count(HealthState.QUARANTINED) == 2          # GPU-1 from its second observation on
    assert b.state_of("GPU-1") is HealthState.QUARANTINED and b.state_of("GPU-0") is HealthState.HEALTHY
    assert b.counters().observations == 9
    assert GPU not in b.tracks
