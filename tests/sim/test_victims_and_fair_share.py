"""What preemption costs its victims (preemptions, shrinks and grows read from pods' intervals, the
slowdown against the same job run without a stop) and what tenants feel hour by hour (Jain over
tenants with demand, the worst tenant's share of its fair share over contended hours), on small
hand-made runs."""

from __future__ import annotations

import pytest

from gpuaware.sim import (
    JobShape,
    PodRecord,
    TenantWindow,
    fair_share_over_windows,
    finish_time_fairness,
    job_lives,
    slowdown,
    tenant_windows,
    victim_costs,
)

H = 3600.0


def pod(uid: str, *intervals: tuple[float, float | None], arrival: float = 0.0, finished: float | None = None,
        work: float | None = 100.0, klass: str = "training", tenant: str = "a", gpus: float = 1.0) -> PodRecord:
    return PodRecord(uid=uid, klass=klass, tenant=tenant, gpu_milli_total=int(gpus * 1000), arrival=arrival,
                     intervals=tuple(intervals), finished=finished, duration=work)


# --- victims ---------------------------------------------------------------------------------------


def test_a_lone_pod_preempted_once_is_a_victim_slowed_by_its_wait_and_lost_work() -> None:
    # arrives 0, runs 10-50, preempted (40 s done, checkpoint kept 30), waits to 80, runs 80-150 (70 s)
    p = pod("p", (10, 50), (80, 150), finished=150.0)
    (life,) = job_lives([p], {}, horizon=1000.0)
    assert (life.preemptions, life.shrinks, life.grows, life.first_start, life.finished) == (1, 0, 0, 10.0, 150.0)
    assert life.ran_s == pytest.approx(110.0) and life.victim
    # without the stop: started at 10, done at 110 -> JCT 110; it took 150
    assert slowdown(life, 1000.0) == pytest.approx(150 / 110)


def test_a_pod_never_preempted_is_no_victim() -> None:
    (life,) = job_lives([pod("p", (10, 110), finished=110.0)], {}, horizon=1000.0)
    assert not life.victim and slowdown(life, 1000.0) == pytest.approx(1.0)
    assert victim_costs([life], 1000.0)["all"] == {"victims": 0, "finished": 0, "p50": None, "p95": None,
                                                   "max": None}


def test_an_elastic_job_grows_shrinks_and_stops_by_its_minimum() -> None:
    # 4 workers, min 2: two start at 0, a third joins at 10 and a fourth at 20 (grows), two are taken
    # back at 30 (a shrink: it runs on on two), both others at 40 (it stops: a preemption), two come
    # back at 60, and everything bound finishes at 200
    shape = JobShape("j", 2, 4)
    pods = [pod("w0", (0, 40), (60, 200), finished=200.0), pod("w1", (0, 40), (60, 200), finished=200.0),
            pod("w2", (10, 30)), pod("w3", (20, 30))]
    (life,) = job_lives(pods, dict.fromkeys(("w0", "w1", "w2", "w3"), shape), horizon=1000.0)
    assert (life.job, life.elastic, life.grows, life.shrinks, life.preemptions) == ("j", True, 2, 1, 1)
    assert (life.first_start, life.ran_s) == (0.0, pytest.approx(180.0))
    # w2 and w3 were never bound again, but every worker bound last finished: the job is done at 200
    assert life.finished == 200.0
    # progress at workers / 4: 10 s at 2, 10 at 3, 10 at 4, 10 at 2, then 140 at 2 -> 5 + 7.5 + 10 + 5 + 70
    assert life.progress_s == pytest.approx(97.5)
    # keeping its workers: 5 + 7.5 of its 100 s of work by 20, then full speed: done at 107.5
    assert life.alone_finish == pytest.approx(107.5)
    assert slowdown(life, 1000.0) == pytest.approx(200 / 107.5)


def test_an_elastic_job_never_taken_back_is_no_victim_though_it_ran_narrow() -> None:
    # min 1, max 2: one worker from 0, the second joins at 50; 100 s of work: 25 done by 50, done at 125
    shape = JobShape("j", 1, 2)
    pods = [pod("w0", (0, 125), finished=125.0), pod("w1", (50, 125), finished=125.0)]
    (life,) = job_lives(pods, {"w0": shape, "w1": shape}, horizon=1000.0)
    assert (life.grows, life.victim, life.alone_finish) == (1, False, pytest.approx(125.0))
    assert slowdown(life, 1000.0) == pytest.approx(1.0)


def test_members_finishing_one_by_one_neither_shrink_nor_stop_a_job() -> None:
    shape = JobShape("j", 1, 2)
    pods = [pod("w0", (0, 90), finished=90.0), pod("w1", (0, 100), finished=100.0)]
    (life,) = job_lives(pods, {"w0": shape, "w1": shape}, horizon=1000.0)
    assert (life.preemptions, life.shrinks, life.finished) == (0, 0, 100.0)


def test_a_fixed_gang_evicted_at_once_is_one_preemption_not_two() -> None:
    shape = JobShape("g", 2, 2)
    pods = [pod("g0", (0, 50), (70, 170), finished=170.0), pod("g1", (0, 50), (70, 170), finished=170.0)]
    (life,) = job_lives(pods, {"g0": shape, "g1": shape}, horizon=1000.0)
    assert (life.preemptions, life.shrinks, life.grows, life.elastic) == (1, 0, 0, False)


def test_an_unfinished_victim_counts_with_a_lower_bound() -> None:
    # runs 0-40, preempted, still waiting at the horizon 300: at least 300 + (100 - 40) against 100
    (life,) = job_lives([pod("p", (0, 40))], {}, horizon=300.0)
    assert life.finished is None and life.victim
    assert slowdown(life, 300.0) == pytest.approx(3.6)


def test_victims_distribution_per_class_and_preemptions_per_job() -> None:
    lives = job_lives([
        pod("t1", (0, 50), (60, 110), finished=110.0),                    # 110 / 100
        pod("t2", (0, 10), (20, 30), (40, 50), (60, 160), finished=160.0),  # three stops: 160 / 100
        pod("t3", (0, 100), finished=100.0),                              # untouched
        pod("i1", (0, 10), (30, 130), finished=130.0, klass="inference"),  # 130 / 100
    ], {}, horizon=1000.0)
    costs = victim_costs(lives, 1000.0)
    assert costs["all"]["victims"] == 3 and costs["all"]["finished"] == 3
    assert costs["by_class"]["training"] == {"victims": 2, "finished": 2, "p50": pytest.approx(1.35),
                                             "p95": pytest.approx(1.1 + 0.95 * 0.5), "max": pytest.approx(1.6)}
    assert costs["by_class"]["inference"]["p50"] == pytest.approx(1.3)
    assert (costs["preemptions"], costs["preemptions_per_job_max"], costs["jobs_preempted_more_than_twice"]) == (5, 3, 1)
    assert costs["resizes"] == {"grows": 0, "shrinks": 0, "elastic_jobs": 0, "elastic_jobs_resized": 0}


def test_finish_time_fairness_compares_each_job_with_its_private_slice() -> None:
    # 8 GPUs, two tenants: a slice of 4. a's 2-GPU job fits its slice: alone 100 s, took 150 -> 1.5;
    # b's 8-GPU job time-shares its slice: alone 100 x 8 / 4 = 200 s, took 100 -> 0.5; b's second job is
    # still waiting at the horizon 300 (arrived 100, 100 s of work): at least 300 / 100 = 3
    lives = job_lives([pod("a1", (50, 150), finished=150.0, tenant="a", gpus=2),
                       pod("b1", (0, 100), finished=100.0, tenant="b", gpus=8),
                       pod("b2", arrival=100.0, tenant="b"),
                       pod("svc", (0, None), tenant="b", work=None)], {}, horizon=300.0)
    f = finish_time_fairness(lives, 8, 300.0)
    assert (f["tenants"], f["jobs"], f["unfinished"]) == (2, 3, 1)
    assert (f["p50"], f["max"]) == (pytest.approx(1.5), pytest.approx(3.0))


def test_a_job_shape_refuses_a_maximum_below_its_minimum() -> None:
    with pytest.raises(ValueError, match="members"):
        JobShape("j", 3, 2)


# --- fair share hour by hour ----------------------------------------------------------------------


def test_tenant_windows_split_held_and_wanted_gpu_seconds_by_hour() -> None:
    pods = [pod("a", (0.5 * H, 1.5 * H), arrival=0.0, finished=1.5 * H, tenant="a", gpus=2),
            pod("b", (1.5 * H, None), arrival=1.0 * H, tenant="b", gpus=0.5)]
    w = tenant_windows(pods, horizon=2.5 * H)
    assert [(x.start, x.end) for x in w] == [(0.0, H), (H, 2 * H), (2 * H, 2.5 * H)]
    assert w[0].held == {"a": pytest.approx(2 * 0.5 * H)} and w[0].asked == {"a": pytest.approx(2 * H)}
    assert w[1].held == {"a": pytest.approx(H), "b": pytest.approx(0.25 * H)}
    assert w[1].asked == {"a": pytest.approx(H), "b": pytest.approx(0.5 * H)}
    assert w[2].held == {"b": pytest.approx(0.25 * H)} and w[2].asked == {"b": pytest.approx(0.25 * H)}


def test_the_worst_tenant_is_judged_over_contended_hours_only() -> None:
    # 4 GPUs. Hour 0: a wants 4, b wants 4 (contended, fair 2 each): a holds 3, b 1.
    # Hour 1: a wants 4, b wants 4, b holds 2, a 2 (fair).  Hour 2: only b, wants 1, holds 0 (not contended).
    windows = [TenantWindow(0, H, {"a": 3 * H, "b": 1 * H}, {"a": 4 * H, "b": 4 * H}),
               TenantWindow(H, 2 * H, {"a": 2 * H, "b": 2 * H}, {"a": 4 * H, "b": 4 * H}),
               TenantWindow(2 * H, 3 * H, {}, {"b": 1 * H})]
    f = fair_share_over_windows(windows, capacity_gpus=4)
    # shares hour 0: a min(1, 3/2) = 1, b 1/2 -> Jain 1.5^2 / (2 * 1.25) = 0.9; hour 1: 1, 1 -> 1
    assert f.jain_contended_mean == pytest.approx(0.95) and f.jain_mean == pytest.approx(0.95)
    assert (f.windows, f.contended_windows, f.tenants) == (2, 2, 2)
    assert f.share_of_fair_share == {"a": pytest.approx(1.0), "b": pytest.approx(0.75)}
    assert (f.worst_tenant, f.worst_share) == ("b", pytest.approx(0.75))  # b's starved hour 2 is not contended


def test_a_tenant_asking_less_than_its_even_split_is_entitled_to_what_it_asks() -> None:
    # 4 GPUs: a wants 1 and holds 1, b wants 6 and holds 3: b's fair share is 3 (water-filled), both at 1
    f = fair_share_over_windows([TenantWindow(0, H, {"a": H, "b": 3 * H}, {"a": H, "b": 6 * H})], 4)
    assert f.share_of_fair_share == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert f.jain_contended_mean == pytest.approx(1.0)


def test_no_contended_hour_leaves_the_worst_tenant_unmeasured() -> None:
    f = fair_share_over_windows([TenantWindow(0, H, {"a": H}, {"a": H, "b": H})], 4)
    assert f.contended_windows == 0 and f.worst_tenant is None and f.worst_share is None
    assert f.jain_mean == pytest.approx(0.5) and f.jain_contended_mean is None
