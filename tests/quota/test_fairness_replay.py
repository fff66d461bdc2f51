"""bench-fairness decides on the production path: every job's start is a decision of the placement
service's planner (admitted by quota's ledger for the gpuaware policies), a preempted job is pending
again and restarts, and the replay keeps its books -- a job's time from first start to end is its work
plus exactly what preemption cost it (work lost, restarts, waiting again), which is what the bench's
preemption-cost figure divides. The bench is a script beside the repo's packages, imported by path."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after every package: bench has bus.py, health.py
import fairness

BENCH = Path(fairness.__file__).parent


def workload(b_priority: int = 1) -> list[fairness.Job]:
    """64 GPUs in 16 nodes of 4: tenant a borrows all of them with sixteen one-node 4-h jobs; ten
    minutes later tenant b, inside its guarantee (32), asks for one node for an hour."""
    n = fairness.GPUS_PER_NODE
    jobs = [fairness.Job(f"a{i}", "a", n, 0.0, 4 * 3600.0) for i in range(fairness.GPUS // n)]
    jobs.append(fairness.Job("b0", "b", n, 600.0, 3600.0, priority=b_priority))
    return jobs


def run(jobs: list[fairness.Job], policy: str) -> fairness.Replay:
    world = fairness.Replay(jobs, policy)
    world.run()
    return world


@pytest.mark.parametrize("policy", ["priority", "quota", "quota+turns"])
def test_a_preempted_job_runs_its_work_plus_what_preemption_cost_it(policy: str) -> None:
    world = run(workload(), policy)
    done = world.jobs
    preempted = [j for j in done if j.preemptions]
    assert len(preempted) == 1 and preempted[0].tenant == "a"
    for j in done:
        assert j.end - j.start == pytest.approx(j.duration + j.lost_s + j.requeued_s)
    v = preempted[0]
    assert v.requeued_s == pytest.approx(3600.0)  # it waits for b's hour
    if policy == "priority":  # stock preemption loses the 600 s since its start (no periodic checkpoint yet)
        assert v.lost_s == pytest.approx(600.0 + fairness.RESTART_S)
    else:  # the binder's checkpoint handshake: only the save is lost
        assert v.lost_s == pytest.approx(fairness.CHECKPOINT_SAVE_S + fairness.RESTART_S)
    # the bench's figure for it: everything its JCT holds beyond its work (it started on arrival)
    cost, _ = fairness.increases([v], None)
    assert cost is not None and v.start == v.submit
    assert cost[0] == pytest.approx((v.end - v.submit - v.duration) / v.duration)


@pytest.mark.parametrize("policy", fairness.POLICIES)
def test_every_start_is_a_decision_of_the_planner_bound_then(policy: str) -> None:
    world = run(workload(), policy)
    bound = {(uid, decision): t for t, uid, decision in world.log}
    for j in world.jobs:
        assert len(j.decisions) == 1 + j.preemptions  # one decision per start: a preempted job restarts
        # its first start is the time the planner's decision for its pod (attempt 0) was bound
        assert bound[(j.name, j.decisions[0])] == j.start and j.decisions[0] == f"{j.name}/0"
    counters = world.planner.counters
    assert counters.decided == sum(len(j.decisions) for j in world.jobs)
    # the victim's restart is the planner's decision for its next attempt
    for j in world.jobs:
        if j.preemptions:
            assert j.decisions[-1] == f"{j.name}/{j.preemptions}"
    if policy == "fifo":  # no preemption: b waits for the first of a's jobs to end
        assert counters.preemptions_planned == 0 and world.by_name["b0"].start == 4 * 3600.0
    else:
        assert counters.preemptions_planned == 1 and world.by_name["b0"].start == 600.0


def test_quota_reclaims_for_a_queue_inside_its_guarantee_where_priority_cannot() -> None:
    """b's job has a's priority: stock preemption leaves it waiting, quota's reclaim plan (asked about
    as the placement service asks, executed by the planner) starts it on arrival and admits it."""
    stock = run(workload(b_priority=0), "priority")
    assert stock.by_name["b0"].start == 4 * 3600.0 and stock.planner.counters.preemptions_planned == 0
    ours = run(workload(b_priority=0), "quota")
    assert ours.by_name["b0"].start == 600.0
    victim = next(j for j in ours.jobs if j.preemptions)
    assert victim.tenant == "a"
    assert ours.quota is not None and set(ours.quota.ledger.running) == set()  # every pod gone in the end


def test_a_job_wider_than_a_node_is_a_gang_placed_all_at_once() -> None:
    jobs = [fairness.Job("wide", "a", 10, 0.0, 3600.0), fairness.Job("one", "b", 1, 0.0, 3600.0)]
    world = run(jobs, "quota+turns")
    wide = world.by_name["wide"]
    assert wide.pods() == ["wide#0", "wide#1", "wide#2"] and wide.start == 0.0 and wide.end == 3600.0
    assert sorted(uid for _, uid, _ in world.log if uid.startswith("wide")) == wide.pods()
    assert world.planner.counters.gangs_placed == 1


def test_the_bench_has_no_scheduling_loop_of_its_own() -> None:
    """It decides through gpuaware.placement's planner (its Session) and quota's ledger: no queue order,
    reclaim plan, backfill or turn-taking of its own, and no private GPU pool."""
    tree = ast.parse((BENCH / "fairness.py").read_text())
    imported = {(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for a in node.names}
    assert ("gpuaware.placement", "Planner") in imported and ("gpuaware.quota", "QuotaLedger") in imported
    quota_names = {name for module, name in imported if module == "gpuaware.quota"}
    assert not quota_names & {"reclaim_plan", "fair_reclaim_plan", "easy_backfill", "TurnTaking", "OwedService"}
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    assert "Sim" not in classes
    source = (BENCH / "fairness.py").read_text()
    assert "order_key" not in source and "self.free -=" not in source  # no GPU pool of its own


def test_an_elastic_job_shrinks_for_a_newcomer_and_keeps_its_work() -> None:
    """Tenant a's elastic job (one-GPU workers, linear pace without a measured curve) runs on what quota
    lets it borrow; tenant b's eight one-node jobs arrive and take their guarantee: a shrinks (no stop),
    every b job starts at once, a grows back when they end, and a's work is done once."""
    a = fairness.Job("a", "a", fairness.GPUS, 0.0, 3600.0, elastic=True)
    bs = [fairness.Job(f"b{i}", "b", fairness.GPUS_PER_NODE, 600.0, 1800.0) for i in range(8)]
    run([a, *bs], "elastic")
    assert all(b.start == 600.0 and b.preemptions == 0 for b in bs)
    assert a.preemptions == 0 and a.shrinks >= 1 and a.grows >= 1 and a.end is not None
    # its work, at its pace on each stretch less the restarts, adds up to its duration (64 GPUs = pace 1)
    work = sum(w / fairness.GPUS * (end - start) for w, start, end in a.segments)
    assert work - a.resizes * fairness.RESIZE_S <= a.duration <= work
    # the GPU-hours it held are its segments' (what the segments CSV lets anyone recompute)
    assert sum(w * (end - start) for w, start, end in a.segments) <= fairness.GPUS * (a.end - a.start)
    assert a.lost_gpu_s > 0  # its restarts at a new world size cost GPU time


def test_the_reference_replay_preempts_nobody() -> None:
    jobs, _ = fairness.replay(workload(), "quota+turns", preempt=False)
    assert not any(j.preemptions for j in jobs)
    assert next(j for j in jobs if j.name == "b0").start == 4 * 3600.0  # b waits: nothing is taken back


@pytest.mark.parametrize("policy", [p for p in fairness.POLICIES if p not in ("fifo", "priority")])
def test_every_gpuaware_policy_runs_with_the_quota_service(policy: str) -> None:
    assert fairness.Replay(workload(), policy).quota is not None
    assert fairness.Replay(workload(), "priority").quota is None
