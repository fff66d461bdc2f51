"""bench-fairness's replay keeps its books: a job's time from first start to end is its work plus
exactly what preemption cost it (work lost, restarts, waiting again), which is what the bench's
preemption-cost figure divides. The bench is a script beside the repo's packages, imported by path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after every package: bench has bus.py, health.py
import fairness


def workload() -> list[fairness.Job]:
    """64 GPUs: tenant a borrows all of them with four 4-h jobs; ten minutes later tenant b, inside its
    guarantee (32), asks for 16 GPUs for an hour (high class, so that priority preempts too)."""
    jobs = [fairness.Job(f"a{i}", "a", 16, 0.0, 4 * 3600.0) for i in range(4)]
    jobs.append(fairness.Job("b0", "b", 16, 600.0, 3600.0, priority=1))
    return jobs


@pytest.mark.parametrize("policy", ["priority", "quota", "quota+turns"])
def test_a_preempted_job_runs_its_work_plus_what_preemption_cost_it(policy: str) -> None:
    done, _ = fairness.replay(workload(), policy)
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
