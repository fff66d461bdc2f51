"""The demo's metrics (gpuaware.sim.metrics): pure functions, checked against hand arithmetic."""

from __future__ import annotations

import math

import pytest

from gpuaware.sim.metrics import (
    GpuLedger,
    PodRecord,
    delays_by_class,
    fragmentation,
    jct,
    queue_delays,
    slo_attainment,
    tenant_service,
    time_in_system,
    time_weighted_mean,
    utilisation_series,
)


def pod(uid: str, arrival: float, start: float | None = None, end: float | None = None, *, klass: str = "training",
        tenant: str = "a", milli: int = 1000, finished: float | None = None, duration: float | None = None,
        intervals: tuple[tuple[float, float | None], ...] | None = None) -> PodRecord:
    ivs = intervals if intervals is not None else (() if start is None else ((start, end),))
    return PodRecord(uid, klass, tenant, milli, arrival, ivs, finished, duration)


@pytest.mark.parametrize(("pods", "horizon", "expected"), [
    ([pod("a", 10, 15)], 100, [5.0]),                      # 15 - 10
    ([pod("a", 10)], 100, [90.0]),                         # still waiting: 100 - 10 (a lower bound)
    ([pod("a", 10, 150)], 100, [90.0]),                    # started after the horizon: waited 100 - 10 by then
    ([pod("a", 120)], 100, []),                            # arrived after the horizon: not counted
    ([pod("a", 0, 0), pod("b", 5, 35)], 100, [0.0, 30.0]),
])
def test_queue_delay_counts_waiting_pods_with_their_wait_so_far(pods: list[PodRecord], horizon: float,
                                                               expected: list[float]) -> None:
    assert queue_delays(pods, horizon) == expected


def test_delays_by_class_reports_percentiles_and_pods_still_waiting() -> None:
    pods = [pod("a", 0, 10, klass="inference"), pod("b", 0, 30, klass="inference"),
            pod("c", 50, klass="training")]
    got = delays_by_class(pods, horizon=100)
    # inference: delays 10, 30 -> p50 = 20 (pos 0.5), p99 = 10 + 0.99 * 20 = 29.8, mean 20, none waiting
    assert got["inference"] == {"n": 2.0, "p50": 20.0, "p99": pytest.approx(29.8), "mean": 20.0, "waiting": 0.0}
    # training: still waiting since 50 -> counted as 100 - 50 = 50
    assert got["training"]["p50"] == 50.0 and got["training"]["waiting"] == 1.0


def test_jct_is_finish_minus_arrival_for_finished_pods_only() -> None:
    pods = [pod("a", 10, 20, 70, finished=70), pod("b", 0, 5), pod("c", 30, 30, 40, finished=40)]
    assert jct(pods) == [60.0, 10.0]  # 70 - 10, 40 - 30; b has not finished


@pytest.mark.parametrize(("pods", "threshold", "horizon", "expected"), [
    ([pod("a", 0, 50)], 60, 1000, (1, 1)),            # started after 50 <= 60: met
    ([pod("a", 0, 90)], 60, 1000, (0, 1)),            # started after 90 > 60: missed
    ([pod("a", 0)], 60, 1000, (0, 1)),                # waiting 1000 > 60 at the horizon: missed
    ([pod("a", 970)], 60, 1000, (0, 0)),              # waiting 30 < 60 at the horizon: undecided
    ([pod("a", 0, 10), pod("b", 0, 100), pod("c", 0)], 60, 1000, (1, 3)),
])
def test_slo_attainment(pods: list[PodRecord], threshold: float, horizon: float, expected: tuple[int, int]) -> None:
    assert slo_attainment(pods, threshold, horizon) == expected


def test_tenant_service_is_gpu_seconds_held_over_asked() -> None:
    pods = [
        # tenant a: 1 GPU asked for 100 s from t=0, held 0..100 -> 100 / 100 = 1
        pod("a1", 0, 0, 100, tenant="a", duration=100),
        # tenant b: 2 GPUs for 100 s from t=0, started at 50, held to the horizon (200): 2*150 / 2*100
        pod("b1", 0, 50, None, tenant="b", milli=2000, duration=100),
        # tenant b: 0.5 GPU, unknown duration, arrived at 100, never started: asks 0.5 * (200 - 100) = 50
        pod("b2", 100, tenant="b", milli=500),
    ]
    got = tenant_service(pods, horizon=200)
    assert got["a"] == pytest.approx(1.0)
    assert got["b"] == pytest.approx(300 / 250)  # held 2*150 = 300; asked 2*100 + 0.5*100 = 250


def test_tenant_service_sums_intervals_of_a_preempted_pod() -> None:
    p = pod("a", 0, tenant="a", duration=100, intervals=((0.0, 30.0), (60.0, 130.0)))
    assert tenant_service([p], horizon=100)["a"] == pytest.approx((30 + 40) / 100)  # second interval cut at 100


@pytest.mark.parametrize(("used", "expected"), [
    ({"g0": 0, "g1": 0}, 0.0),               # all free, none partial
    ({"g0": 1000, "g1": 1000}, 0.0),         # nothing free
    ({"g0": 500, "g1": 0}, 500 / 1500),      # 500 free on a partial GPU out of 500 + 1000 free
    ({"g0": 250, "g1": 750}, 1.0),           # every free milli is on a partial GPU
])
def test_fragmentation(used: dict[str, int], expected: float) -> None:
    assert fragmentation(used) == pytest.approx(expected)


def test_ledger_samples_allocation_occupancy_and_fragmentation() -> None:
    ledger = GpuLedger({"g0": 16_000, "g1": 16_000})
    # a 0.3-GPU pod given a whole GPU: asked 300 of 2000 = 0.15; 1 of 2 GPUs occupied; g0 full -> frag 0
    ledger.bind(10.0, "p1", [("g0", 1000, 16_000)], asked_milli=300)
    # a 0.5-GPU pod on g1: asked 800 / 2000 = 0.4; both occupied; free 500, all on g1 (partial) -> 1
    ledger.bind(20.0, "p2", [("g1", 500, 8_000)], asked_milli=500)
    ledger.release(30.0, "p1")  # back to p2 alone: 0.25, 0.5 occupied, free 1500 of which 500 partial
    assert [(s.t, s.allocated, s.occupied) for s in ledger.samples] == [
        (10.0, 0.15, 0.5), (20.0, 0.4, 1.0), (30.0, 0.25, 0.5)]
    assert [s.fragmentation for s in ledger.samples] == pytest.approx([0.0, 1.0, 500 / 1500])
    assert ledger.violations == [] and ledger.release(40.0, "p1") is False


def test_ledger_catches_over_allocation_of_compute_and_memory() -> None:
    ledger = GpuLedger({"g0": 16_000})
    ledger.bind(1.0, "p1", [("g0", 600, 8_000)], asked_milli=600)
    ledger.bind(2.0, "p2", [("g0", 500, 4_000)], asked_milli=500)   # 600 + 500 = 1100 > 1000
    ledger.bind(3.0, "p3", [("g0", 0, 8_000)], asked_milli=0)      # memory 8000 + 4000 + 8000 > 16000
    assert [(v.t, v.milli, v.memory_mib, v.pod) for v in ledger.violations] == [
        (2.0, 1100, 12_000, "p2"), (3.0, 1100, 20_000, "p3")]
    assert [v.holders for v in ledger.violations] == [("p1", "p2"), ("p1", "p2", "p3")]  # whose release was missed


def test_ledger_records_unknown_gpus_without_failing() -> None:
    ledger = GpuLedger({"g0": 0})
    ledger.bind(1.0, "p", [("gX", 1000, 0)], asked_milli=1000)
    assert ledger.unknown_gpus == {"gX"}


@pytest.mark.parametrize(("times", "values", "t0", "t1", "expected"), [
    ([], [], 0, 10, 0.0),                          # the initial value throughout
    ([0.0], [1.0], 0, 10, 1.0),
    ([5.0], [1.0], 0, 10, 0.5),                    # 0 for 5 s, 1 for 5 s
    ([2.0, 6.0], [1.0, 0.5], 0, 10, 0.6),          # (0*2 + 1*4 + 0.5*4) / 10
    ([-5.0, 20.0], [0.4, 1.0], 0, 10, 0.4),        # a step before t0 sets the level; one after t1 is ignored
    ([1.0], [1.0], 5, 5, math.nan),                # empty interval
])
def test_time_weighted_mean(times: list[float], values: list[float], t0: float, t1: float, expected: float) -> None:
    got = time_weighted_mean(times, values, t0, t1)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(("arrivals", "length", "expected"), [
    ([], 10.0, 0.0),
    ([5.0], 10.0, 5.0),
    ([0.0, 100.0, 101.0, 105.0, 300.0], 10.0, 100.0),   # [100, 110) holds 3 arrivals, any other window fewer
    ([0.0, 1.0, 2.0, 50.0, 51.0], 10.0, 0.0),           # ties go to the earliest window
    ([9.0, 0.0, 5.0], 10.0, 0.0),                       # unsorted input; all three within 10 s of 0
])
def test_busiest_window(arrivals: list[float], length: float, expected: float) -> None:
    from gpuaware.cli.demo_analysis import busiest_window

    assert busiest_window(arrivals, length) == expected


@pytest.mark.parametrize(("samples", "gpus", "expected_buckets", "expected_mean"), [
    # one GPU of two at 100 % from t=0: 0.5 everywhere
    ([(0.0, "a", 100.0)], 2, [0.5, 0.5], 0.5),
    # a at 50 % from 5 s, b at 100 % from 10 s to 15 s then 0: bucket 1 (0-10) = (0.5*5)/(10*2) = 0.125;
    # bucket 2 (10-20) = (0.5*10 + 1.0*5)/(10*2) = 0.5; overall (2.5 + 10) / 40 = 0.3125
    ([(5.0, "a", 50.0), (10.0, "b", 100.0), (15.0, "b", 0.0)], 2, [0.125, 0.5], 0.3125),
    # readings before t0 set the starting level; values are clipped to 0..100 %
    ([(-3.0, "a", 150.0)], 1, [1.0, 1.0], 1.0),
])
def test_utilisation_series_holds_each_reading_until_the_next(samples, gpus, expected_buckets, expected_mean) -> None:
    starts, means, mean = utilisation_series(samples, gpus, 0.0, 20.0, 10.0)
    assert starts == [0.0, 10.0]
    assert means == pytest.approx(expected_buckets) and mean == pytest.approx(expected_mean)


def test_a_stretch_the_twin_jumped_over_is_a_gap_not_the_last_reading_held_flat() -> None:
    # a plot once read "flat at 0.10 from virtual hour 3 to 7": the twin skipped a quiet stretch, no wall
    # time passed, nothing was read, and the held value filled hours it never measured
    from gpuaware.sim.metrics import clock_jumps

    # wall 0..3 s at speed 100; between wall 1.0 and 1.5 virtual time jumped from 100 to 10,000
    clock = [(0.0, 0.0), (0.5, 50.0), (1.0, 100.0), (1.5, 10_000.0), (2.0, 10_050.0), (3.0, 10_150.0)]
    assert clock_jumps(clock, speed=100.0) == [(100.0, 10_000.0)]
    samples = [(0.0, "a", 10.0), (10_020.0, "a", 90.0)]
    _, means, mean = utilisation_series(samples, 1, 0.0, 10_150.0, 1_000.0, gaps=clock_jumps(clock, 100.0))
    assert len(means) == 11
    # 0..1,000 was measured for 100 s only and 1,000..10,000 not at all: gaps in the plot, not 10 %
    assert all(math.isnan(m) for m in means[:10])
    assert means[10] == pytest.approx((0.1 * 20 + 0.9 * 130) / 150)
    # the overall mean counts only what was measured (250 s), never the 9,900 s skipped
    assert mean == pytest.approx((0.1 * 120 + 0.9 * 130) / 250)
    # a bucket measured for at least half its length keeps its mean over the measured part
    _, coarse, _ = utilisation_series(samples, 1, 0.0, 10_150.0, 150.0, gaps=[(100.0, 120.0)])
    assert coarse[0] == pytest.approx(0.1)
    # without gaps the old behaviour: 10 % held across the jump
    _, held, _ = utilisation_series(samples, 1, 0.0, 10_150.0, 1_000.0)
    assert held[5] == pytest.approx(0.1)


def test_time_in_system_counts_unfinished_jobs_to_the_end_of_the_window():
    pods = [pod("done", 0.0, 10.0, 100.0, finished=100.0), pod("running", 50.0, 60.0, None),
            pod("waiting", 150.0), pod("late", 500.0)]
    assert time_in_system(pods, horizon=200.0) == [100.0, 150.0, 50.0]  # "late" arrived after the window
    assert jct(pods) == [100.0]  # the finished-only mean would hide the two still in the system
