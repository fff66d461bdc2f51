"""Adaptive sampling: deadbands, the heartbeat back-off, and the acceptance numbers on a simulated clock."""

from __future__ import annotations

import numpy as np
import pytest
from telemetry_helpers import T0, flat_trace, frame_of, quiet_fleet, step_trace

from gpuaware.gpu import ManualClock
from gpuaware.telemetry import AdaptivePolicy, AdaptiveSampler, NodeEdge, SendReason

BASE = {"util_pct": [50.0], "mem_used_mib": [40_000], "mem_total_mib": [80_000], "power_w": [300.0],
        "power_limit_w": [400.0], "temperature_c": [60.0], "sm_clock_mhz": [1400], "ecc_uncorrected_volatile": [0],
        "throttle_reasons": [0], "xid_last": [0], "nvlink_up": [12]}


def _with(**changes) -> dict:
    cols = {k: list(v) for k, v in BASE.items()}
    for k, v in changes.items():
        cols[k] = [v]
    return cols


@pytest.mark.parametrize("changes, sent", [
    # util moves 9 points: inside the 10-point deadband -> nothing new
    ({"util_pct": 59.0}, False),
    # 11 points: news
    ({"util_pct": 61.0}, True),
    # memory: deadband 5 % of 80,000 MiB = 4,000; +3,999 stays, +4,001 is sent
    ({"mem_used_mib": 43_999}, False),
    ({"mem_used_mib": 44_001}, True),
    # power: 10 % of the 400 W limit = 40 W
    ({"power_w": 339.0}, False),
    ({"power_w": 341.0}, True),
    # temperature: 5 degrees
    ({"temperature_c": 64.9}, False),
    ({"temperature_c": 65.5}, True),
    # SM clock: 10 % of the last sent 1400 MHz = 140
    ({"sm_clock_mhz": 1530}, False),
    ({"sm_clock_mhz": 1250}, True),
    # counters, bitmasks and limits: any change at all
    ({"ecc_uncorrected_volatile": 1}, True),
    ({"throttle_reasons": 4}, True),
    ({"xid_last": 79}, True),
    ({"nvlink_up": 11}, True),
    ({"power_limit_w": 350.0}, True),
    # a value that vanishes (NotSupported after a driver reload) is news too
    ({"temperature_c": None}, True),
])
def test_deadbands(changes: dict, sent: bool) -> None:
    sampler = AdaptiveSampler(AdaptivePolicy())
    first = sampler.decide(frame_of(BASE), T0)
    assert first.reasons.tolist() == [SendReason.FIRST]
    # 0.4 s later: no heartbeat can be due, so only a change sends the row
    d = sampler.decide(frame_of(_with(**changes), at=T0 + 0.4), T0 + 0.4)
    assert bool(d.send[0]) is sent
    if sent:
        assert d.reasons[0] == SendReason.CHANGED


def test_deadband_is_measured_from_the_last_sent_value_so_drift_adds_up() -> None:
    sampler = AdaptiveSampler(AdaptivePolicy(slow_s=1000, fast_s=1.0, backoff=1000))
    sent = []
    for k in range(30):  # util drifts +1 point per read, never 10 points from one read to the next
        d = sampler.decide(frame_of(_with(util_pct=50.0 + k)), T0 + k)
        sent.append(bool(d.send[0]))
    # first read, heartbeat at +1 s (interval 1 s, then 1000 s); the drift passes 10 points from the value
    # sent at 1 s (51) at 12 s (62); a change puts the GPU back on the fast rate, so a heartbeat follows at
    # 13 s (interval then 1000 s again); 63 + 11 -> 24 s, heartbeat 25 s
    assert [k for k, s in enumerate(sent) if s] == [0, 1, 12, 13, 24, 25]


def test_heartbeat_backs_off_to_slow_and_a_change_resets_it_to_fast() -> None:
    sampler = AdaptiveSampler(AdaptivePolicy(fast_s=1.0, slow_s=30.0, backoff=2.0))
    sent = [k for k in range(200) if sampler.decide(frame_of(BASE, at=T0 + k), T0 + k).send[0]]
    # 0 first; then heartbeats 1, 2, 4, 8, 16 s apart, then every 30 s
    assert sent == [0, 1, 3, 7, 15, 31, 61, 91, 121, 151, 181]
    d = sampler.decide(frame_of(_with(util_pct=90.0), at=T0 + 200), T0 + 200)
    assert d.reasons[0] == SendReason.CHANGED and d.interval_s == 1.0
    after = [k for k in range(201, 220) if sampler.decide(frame_of(_with(util_pct=90.0), at=T0 + k), T0 + k).send[0]]
    assert after == [201, 203, 207, 215]


def test_a_new_anomaly_flag_sends_the_row_at_once() -> None:
    sampler = AdaptiveSampler()
    sampler.decide(frame_of(BASE), T0)
    sampler.decide(frame_of(BASE, at=T0 + 1), T0 + 1)  # heartbeat: interval now 2 s
    d = sampler.decide(frame_of(BASE, at=T0 + 1.5), T0 + 1.5, flags=np.array([0x20]))
    assert d.reasons.tolist() == [SendReason.FLAGGED]
    # the same flag still set is not news; a flag going away is not either
    assert not sampler.decide(frame_of(BASE, at=T0 + 1.7), T0 + 1.7, flags=np.array([0x20])).send[0]
    assert not sampler.decide(frame_of(BASE, at=T0 + 1.8), T0 + 1.8, flags=np.array([0])).send[0]


def test_fixed_policy_sends_every_gpu_every_read() -> None:
    sampler = AdaptiveSampler(AdaptivePolicy.fixed(1.0))
    assert all(sampler.decide(frame_of(BASE, at=T0 + k), T0 + k).send[0] for k in range(50))


@pytest.mark.parametrize("kwargs", [dict(fast_s=0), dict(fast_s=5, slow_s=1), dict(backoff=0.5)])
def test_policy_rejects_nonsense(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AdaptivePolicy(**kwargs)


def _run(policy: AdaptivePolicy, trace, seconds: int) -> tuple[int, int, list]:
    clock = ManualClock(T0)
    fleet = quiet_fleet(1, 8, [trace], clock=clock)
    node = fleet.node("node-0")
    edge = NodeEdge("node-0", source="test", policy=policy)
    messages, rows, sent = 0, 0, []
    for _ in range(seconds):
        now = clock.now
        out = edge.observe(node.sample(now), now, events=node.events())
        if out.sampled is not None:
            messages += 1
            rows += len(out.sampled.gpu_uuid)
            sent.append(out.sampled)
        clock.advance(1.0)
    return messages, rows, sent


def test_stable_trace_sends_at_least_five_times_fewer_messages_than_fixed_1hz() -> None:
    adaptive, adaptive_rows, _ = _run(AdaptivePolicy(), flat_trace(50), 300)
    fixed, fixed_rows, _ = _run(AdaptivePolicy.fixed(1.0), flat_trace(50), 300)
    # 300 s at 1 Hz: fixed sends 300 messages; adaptive 1 + 5 back-off heartbeats + 9 at 30 s = 14
    assert fixed == 300 and fixed_rows == 2400
    assert adaptive == 14 and adaptive_rows == 14 * 8
    assert fixed / adaptive >= 5


def test_step_change_is_published_within_two_seconds() -> None:
    # utilisation steps from 20 % to 80 % at T0 + 150 s, long after the GPUs backed off to 30 s
    _, _, sent = _run(AdaptivePolicy(), step_trace(20, 80, at=150), 300)
    first_high = next(m for m in sent if m.util_pct and max(m.util_pct) > 70)
    assert first_high.sampled_at - (T0 + 150) <= 2.0
    assert len(first_high.gpu_uuid) == 8  # every GPU of the node moved
    assert first_high.interval_s == 1.0   # and is back on the fast rate
