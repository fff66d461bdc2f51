"""Demand hours ahead (``gpuaware.forecast.hours``): per series, the ridge where it beats persistence on
the series' own recent errors (a daily cycle), persistence where nothing does (a random walk), bands
from the served forecast's own errors, and the hourly path published beside the minute one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuaware.forecast import HoursAhead
from gpuaware.forecast.demand import TOTAL, class_key
from gpuaware.forecast.hours import HoursStep

STEP = 600.0
DAY = 144
T0 = 1_700_000_000.0 // 86_400 * 86_400  # midnight UTC: the cycle's phase follows the hour of day


def run(values: np.ndarray) -> tuple[HoursAhead, list[HoursStep]]:
    hours = HoursAhead()
    steps = []
    for k, v in enumerate(values):
        step = hours.observe(T0 + STEP * k, {TOTAL: float(v)})
        assert step is not None
        steps.append(step)
    return hours, steps


def scored(steps: list[HoursStep], j: int, k: int, since: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(actual, served p10/p50/p90, the origin's value) of the total's forecasts at horizon ``j`` (``k``
    steps) issued from origin ``since`` on whose target is in the run."""
    origins = range(since, len(steps) - k)
    actual = np.array([steps[o + k].origin[0] for o in origins])
    served = np.array([steps[o].values[0, j] for o in origins])
    origin = np.array([steps[o].origin[0] for o in origins])
    return actual, served, origin


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


@pytest.fixture(scope="module")
def cycle() -> list[HoursStep]:
    rng = np.random.default_rng(100)
    k = np.arange(7 * DAY)
    return run(np.maximum(0.0, 50 + 30 * np.sin(2 * np.pi * k / DAY) + rng.normal(0, 5, len(k))))[1]


def test_a_daily_cycle_is_served_the_ridge_hours_ahead_and_it_beats_persistence(cycle: list[HoursStep]) -> None:
    first = cycle[0]
    assert first.models[0] == ("persistence",) * 3
    assert first.reasons[0][0] == "too little history: 0 h (the ridge needs 72)"
    # the last day: the ridge at 6 and 12 h on every origin (3 h too), named so
    for step in cycle[-DAY:]:
        assert step.models[0][1:] == ("ridge", "ridge") and step.reasons[0][1:] == (None, None)
    for j, k in ((1, 36), (2, 72)):
        actual, served, origin = scored(cycle, j, k, len(cycle) - DAY - k)
        assert rmse(actual, served[:, 1]) < 0.5 * rmse(actual, origin)  # persistence misses the cycle
        assert rmse(actual, served[:, 1]) < 7.0  # noise sd 5: near it, below seasonal naive's 5 * sqrt(2)


@pytest.mark.parametrize("seed", [2, 3, 6])
def test_a_random_walk_is_served_persistence_at_every_hour_horizon(seed: int) -> None:
    """Seeds where the ridge passed for a winner at some hour horizon with half a day or one day of
    scored origins; two days of them (the default) leave every origin to persistence."""
    rng = np.random.default_rng(seed)
    walk = np.maximum(0.0, 50 + np.cumsum(rng.normal(0, 1, 6 * DAY)))
    hours, steps = run(walk)
    assert all(step.models[0] == ("persistence",) * 3 for step in steps)
    assert all(step.values[0, j, 1] == step.origin[0] for step in steps for j in range(3))
    why = steps[-1].reasons[0]
    assert all(w is not None and "not better than persistence on recent errors (RMSE" in w for w in why), why
    assert steps[4 * DAY].reasons[0][2].startswith("too few scored ridge forecasts: ")
    assert hours.who(steps[-1], 0) == ("persistence", f"baseline: {why[2]}")


def test_bands_on_white_noise_cover_about_ninety_and_eighty_percent() -> None:
    """The ridge takes over from persistence at about 5.5 days; its band is its own errors' three days
    later (before, persistence's wider errors are in the window): the targets of days 9-12 count."""
    rng = np.random.default_rng(7)
    _, steps = run(50 + rng.normal(0, 5, 12 * DAY))
    for j, k in enumerate((18, 36, 72)):
        actual, served, _ = scored(steps, j, k, 9 * DAY - k)
        p10, p50, p90 = served.T
        assert np.all(p10 <= p50) and np.all(p50 <= p90)
        under = float(np.mean(actual <= p90))
        inside = float(np.mean((actual >= p10) & (actual <= p90)))
        assert 0.85 <= under <= 0.95 and 0.75 <= inside <= 0.85, (k, under, inside)


def test_until_there_are_errors_the_band_is_the_median() -> None:
    _, steps = run(np.full(20, 3.0) + np.arange(20))
    assert all(np.all(step.values[0, :, 0] == step.values[0, :, 2]) for step in steps)


def test_the_event_labels_each_series_hours_and_its_path_is_hourly_on_the_issuers_clock() -> None:
    hours = HoursAhead(time_scale=60.0)
    for k in range(3):
        step = hours.observe(T0 + STEP * k, {TOTAL: 6.0 + k, "team-a": 4.0, class_key("latency-sensitive"): 1.0})
    assert step is not None
    # the total served by the ridge at 6 and 12 h, persistence at 3 h: one message per who
    step = HoursStep(step.t, step.keys, step.values.copy(), step.origin, (("persistence", "ridge", "ridge"),
                     *step.models[1:]), step.reasons)
    step.values[0, :, :] = [[9.0] * 3, [12.0] * 3, [24.0] * 3]
    issued = (T0 + 2 * STEP) / 60.0
    events = hours.events(step, "c1", issued, 5.0, "forecasting/test")
    assert [(ev.model, ev.model_version) for ev in events] == [
        ("persistence", "baseline: too little history: 0 h (the ridge needs 72)"),
        ("ridge", "hours: ridge at 360, 720 min; persistence at 180 min")]
    for ev in events:
        assert ev.step_s == 60.0 and ev.horizon_steps == 12 and ev.start == issued + 60.0
        assert ev.quantiles == (0.1, 0.5, 0.9) and ev.issued_at == issued
    labels = [s.labels for ev in events for s in ev.series]
    assert sorted(labels, key=str) == sorted([
        {"cluster": "c1", "queue": "team-a", "horizon": "hours"},
        {"cluster": "c1", "class": "latency-sensitive", "horizon": "hours"},
        {"cluster": "c1", "horizon": "hours"}], key=str)
    total = events[1].series[0].values[1]
    # 1-2 h from the origin's value (8 GPUs) to the 3 h point; 4-5 h and 7-11 h between the horizons
    assert total[:6] == pytest.approx((8 + 1 / 3, 8 + 2 / 3, 9.0, 10.0, 11.0, 12.0))
    assert total[6:] == pytest.approx((14.0, 16.0, 18.0, 20.0, 22.0, 24.0))
    points = hours.points(step, "c1", issued)
    assert {(p.series, p.horizon_s, p.model, p.model_version) for p in points if p.series == "demand/c1/*"} == {
        ("demand/c1/*", 180.0, "persistence", "baseline: too little history: 0 h (the ridge needs 72)"),
        ("demand/c1/*", 360.0, "ridge", "hours: ridge"), ("demand/c1/*", 720.0, "ridge", "hours: ridge")}
    assert {p.series for p in points} == {"demand/c1/*", "demand/c1/team-a", "demand/c1/class:latency-sensitive"}


def test_bad_input_gaps_and_clock_jumps_leave_it_running_and_bounded() -> None:
    hours = HoursAhead(max_series=2, history_days=1.0)
    assert hours.observe(T0 + 60.0, {TOTAL: 1.0}) is None  # off the 10-minute grid
    assert hours.observe(math.nan, {TOTAL: 1.0}) is None
    step = hours.observe(T0, {TOTAL: math.inf, "a": math.nan, "b": 2.0})  # a third series: not kept
    assert step is not None and step.keys == (TOTAL, "a") and hours.dropped == 1
    assert np.all(np.isfinite(step.values)) and step.origin.tolist() == [0.0, 0.0]
    assert hours.observe(T0, {TOTAL: 1.0}) is None  # not after the last boundary
    step = hours.observe(T0 + 3 * STEP, {TOTAL: 5.0})  # two boundaries missed: gaps; "a" not given: a gap
    assert step is not None and step.origin.tolist() == [5.0, 0.0]
    assert len(hours.history[0].values) == 4
    for k in range(4, 400):
        hours.observe(T0 + STEP * k, {TOTAL: float(k % 7), "a": 1.0})
    assert len(hours.history[0].values) == hours.capacity == DAY + 72  # a day (at least a day and 12 h)
    step = hours.observe(T0 + STEP * 10_000, {TOTAL: 3.0, "a": 1.0})  # a clock jump past the history: again
    assert step is not None and len(hours.history[0].values) == 1 and step.origin.tolist() == [3.0, 1.0]


def test_horizons_must_be_whole_hours_up_to_a_day() -> None:
    for bad in ((), (6, 3), (0,), (25,), (1.5,)):
        with pytest.raises(ValueError):
            HoursAhead(bad)  # type: ignore[arg-type]  # 1.5 is refused at run time, as the types say
