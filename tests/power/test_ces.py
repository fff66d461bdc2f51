"""The Helios CES policy's rules (HeliosArtifact ``framework/CES Service/CES_Philly.py``), one decision at a
time on hand-made series: warm-up, buffer, shortfall and hold, both trends, the rising-later check, the
cluster's total; and, with no boot delay, the replay of the policy against the published loop."""

from __future__ import annotations

import numpy as np

from gpuaware.power import CesParams, CesPolicy, ces_step, persistence_outlook, replay

FLAT = np.full(59, np.nan)


def flat(value: float) -> np.ndarray:
    return np.full(59, float(value))


def falling() -> np.ndarray:
    """Nine steps: 100 for eight, then 90 (the history trend falls by 10)."""
    return np.array([100.0] * 8 + [90.0])


def test_warm_up_keeps_demand_plus_buffer_whatever_else_holds() -> None:
    d = ces_step(3, np.array([50.0, 60, 70, 80]), flat(10), powered=400, ready=400, total=420, hold_until=0)
    assert (d.target, d.hold_until, d.rule) == (100, 0, "warm-up")
    d = ces_step(5, np.array([50.0] * 5 + [410]), flat(10), powered=400, ready=400, total=420, hold_until=0)
    assert d.target == 420  # never more than the cluster


def test_both_trends_falling_decrease_to_demand_plus_the_buffer() -> None:
    d = ces_step(8, falling(), flat(90), powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.hold_until, d.rule) == (110, 8, "decrease")  # 90 + 20; the hold reset to i


def test_the_buffer_is_overridable_and_a_decrease_under_de_threshold_is_not_made() -> None:
    d = ces_step(8, falling(), flat(90), powered=150, ready=150, total=420, hold_until=0,
                 params=CesParams(buffer=5))
    assert d.target == 95
    d = ces_step(8, falling(), flat(90), powered=110, ready=110, total=420, hold_until=0)
    assert (d.target, d.rule) == (110, "keep")  # already at 90 + 20: nothing to take away


def test_no_decrease_when_the_history_does_not_fall() -> None:
    d = ces_step(8, np.array([100.0] * 9), flat(100), powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.rule) == (150, "keep")
    d = ces_step(8, np.array([100.0] * 7 + [80, 90]), flat(90), powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.rule) == (150, "keep")  # mean(100, 80) - 90 = 0 < 0.1


def test_no_decrease_when_the_forecast_rises_above_now() -> None:
    d = ces_step(8, falling(), flat(91), powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.rule) == (150, "keep")  # 90 - mean(90, 91 x 29) < 0


def test_no_decrease_when_the_forecast_rises_further_out() -> None:
    forecast = np.array([80.0] * 29 + [200.0] * 30)
    d = ces_step(8, falling(), forecast, powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.hold_until, d.rule) == (150, 8, "rising later")


def test_the_forecast_is_floored_and_a_short_window_at_the_end_of_a_range_still_decides() -> None:
    d = ces_step(8, falling(), flat(90.9), powered=150, ready=150, total=420, hold_until=0)
    assert d.rule == "decrease"  # 90.9 floors to 90, as the published loop floors its prediction
    short = FLAT.copy()
    short[:3] = 85.0
    d = ces_step(8, falling(), short, powered=150, ready=150, total=420, hold_until=0)
    assert (d.target, d.rule) == (110, "decrease")


def test_a_shortfall_switches_on_demand_plus_buffer_and_holds_for_keep_steps() -> None:
    d = ces_step(8, np.array([100.0] * 9), flat(100), powered=90, ready=90, total=420, hold_until=0)
    assert (d.target, d.hold_until, d.rule) == (120, 18, "shortfall")
    held = ces_step(12, np.array([100.0] * 12 + [90]), flat(90), powered=120, ready=120, total=420,
                    hold_until=d.hold_until)
    assert (held.target, held.hold_until, held.rule) == (120, 18, "hold")
    after = ces_step(18, np.array([100.0] * 18 + [90]), flat(90), powered=120, ready=120, total=420,
                     hold_until=d.hold_until)
    assert (after.target, after.rule) == (110, "decrease")
    capped = ces_step(8, np.array([100.0] * 8 + [410]), flat(410), powered=400, ready=400, total=420,
                      hold_until=0)
    assert (capped.target, capped.rule) == (420, "shortfall")


def test_booting_nodes_do_not_count_against_a_shortfall() -> None:
    d = ces_step(8, np.array([100.0] * 9), flat(100), powered=130, ready=95, total=420, hold_until=0)
    assert (d.target, d.hold_until, d.rule) == (120, 18, "shortfall")


def published_loop(active: np.ndarray, forecast: np.ndarray, total: int, p: CesParams) -> tuple[list[int], list[int]]:
    """CES_Philly.py's simulation loop restated: the nodes on after each step's decision and what each
    step lacked, the forecast window at step i being the step itself and the forecast rows after it."""
    on = [0] * len(active)
    lack = [0] * len(active)
    hold = 0
    for i, now in enumerate(active):
        if i < p.warmup:
            on[i] = int(now) + p.buffer
            continue
        on[i] = on[i - 1]
        if on[i] < now:
            lack[i] = int(now) - on[i]
            on[i] = int(now) + p.buffer
            hold = i + p.keep
        on[i] = min(on[i], total)
        near = np.concatenate(([now], np.floor(forecast[i][: p.future - 1])))
        far = np.concatenate(([now], np.floor(forecast[i][: 2 * p.future - 1])))
        near, far = near[np.isfinite(near)], far[np.isfinite(far)]
        if np.mean(active[i - p.history: i]) - now >= p.his_threshold and now - np.mean(near) >= p.fut_threshold:
            if i < hold:
                continue
            hold = i
            if np.mean(near) < np.mean(far):
                continue
            if on[i] - min(on[i], int(now) + p.buffer) >= p.de_threshold:
                on[i] = min(on[i], int(now) + p.buffer)
    return on, lack


def test_with_no_boot_delay_the_replay_is_the_published_loop() -> None:
    rng = np.random.default_rng(7)
    steps = 400
    walk = np.clip(200 + np.cumsum(rng.integers(-9, 10, steps)), 120, 300)
    walk[:6] = 200  # the published loop counts no shortfall in its warm-up; keep it free of any
    active = walk.astype(np.int64)
    total = np.full(steps, 320)
    p = CesParams()
    for forecast in (persistence_outlook(active, 59).point,
                     persistence_outlook(active, 59).point + rng.normal(0, 8, (steps, 59))):
        on, lack = published_loop(active, forecast, 320, p)
        r = replay("ces", CesPolicy(forecast, p), active, total, 600.0, 0.0)
        assert r.powered[1:].tolist() == on[:-1]  # nodes on in step t + 1 = the decision at step t
        assert r.short[1:].tolist() == lack[1:]
        assert r.shortfall_events > 0 and np.count_nonzero(np.diff(on)) > 10  # the case exercises both ways
