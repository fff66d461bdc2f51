"""DemandBook: running + pending GPUs per queue, one row per closed minute of the events' own clock."""

from __future__ import annotations

import pytest

from gpuaware.forecast.demand import TOTAL, DemandBook, class_key
from gpuaware.schemas import PodPending


def test_demand_counts_pending_and_running_until_the_pod_leaves() -> None:
    book = DemandBook()
    assert book.pending("a", "team-a", 4.0, 0.0) == []  # opens minute 0
    book.pending("b", "team-b", 2.0, 30.0)
    rows = book.left("a", 150.0)  # closes minutes 0 and 60 (a still counted in both), then a leaves
    assert [r.start for r in rows] == [0.0, 60.0]
    assert rows[0].demand == {TOTAL: 6.0, "team-a": 4.0, "team-b": 2.0}
    assert rows[1].demand == rows[0].demand
    rows = book.advance(185.0)
    assert [r.start for r in rows] == [120.0]
    assert rows[0].demand == {TOTAL: 2.0, "team-a": 0.0, "team-b": 2.0}


def test_repeats_and_requeues_are_counted_once() -> None:
    book = DemandBook()
    book.pending("a", "q", 2.0, 0.0)
    book.pending("a", "q", 2.0, 1.0)  # redelivered
    book.left("a", 2.0, requeued=True)  # preempted and requeued: still wanted
    book.pending("a", "q", 2.0, 3.0)  # its next attempt
    assert book.queues[TOTAL] == 2.0
    book.left("a", 4.0)
    book.left("a", 4.5)  # a repeat of the finish
    book.pending("a", "q", 2.0, 5.0)  # a stale redelivery of the first pending, after the finish
    assert book.queues == {TOTAL: 0.0, "q": 0.0}


def test_a_pod_counts_in_its_groups_too_once_and_until_it_leaves() -> None:
    latency = class_key("latency-sensitive")
    book = DemandBook()
    book.pending("inf", "team-a", 0.5, 0.0, (latency,))
    book.pending("inf", "team-a", 0.5, 1.0, (latency,))  # redelivered
    book.pending("train", "team-a", 4.0, 2.0)
    assert book.queues == {TOTAL: 4.5, "team-a": 4.5, latency: 0.5}  # the group is not added to the total
    book.left("inf", 3.0)
    assert book.queues == {TOTAL: 4.0, "team-a": 4.0, latency: 0.0}


def test_unknown_pods_leaving_change_nothing() -> None:
    book = DemandBook()
    book.pending("a", "q", 1.0, 0.0)
    book.left("never-seen", 10.0)
    assert book.queues[TOTAL] == 1.0


def test_a_quiet_stretch_is_filled_and_a_long_jump_restarts() -> None:
    book = DemandBook(max_fill_minutes=10)
    book.pending("a", "q", 1.0, 0.0)
    rows = book.advance(5 * 60.0 + 1)
    assert len(rows) == 5 and all(r.demand[TOTAL] == 1.0 for r in rows)
    assert book.advance(5 * 60.0 + 30) == []  # same minute
    assert book.advance(3 * 3600.0) == []  # 3 h: beyond max_fill -> no invented rows
    assert book.restarts == 1 and book.open == 3 * 3600.0
    assert book.advance(float("nan")) == []


def test_the_gpus_a_pending_pod_asks() -> None:  # what the service books for each pod (the contract's count)
    def gpus(num_gpu: int, gpu_milli: int) -> float:
        return PodPending(source="t", emitted_at=0.0, pod_uid="u", pod_name="p", namespace="n", submitted_at=0.0,
                          num_gpu=num_gpu, gpu_milli=gpu_milli).gpu_milli_total / 1000.0

    assert gpus(2, 1000) == 2.0
    assert gpus(1, 250) == 0.25
    assert gpus(0, 1000) == 0.0


def test_step_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        DemandBook(step_s=0)
