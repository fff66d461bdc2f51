"""Drain order: checkpointable first, then least work lost, then higher priority, then uid."""

from __future__ import annotations

import pytest
from health_helpers import GPU, no_risk, obs

from gpuaware.health import PodOnGpu, PodsOnGpus, drain_order, recommend_drain


@pytest.mark.parametrize("pods, expected", [
    # checkpointable pods lose nothing: they go first whatever they ran; then 60 s lost < 7,200 s lost
    ([PodOnGpu("train-long", running_s=7200), PodOnGpu("ckpt", checkpointable=True, running_s=86400),
      PodOnGpu("infer-new", running_s=60)],
     ["ckpt", "infer-new", "train-long"]),
    # equal work lost: the higher priority leaves first
    ([PodOnGpu("low", priority=0, running_s=100), PodOnGpu("high", priority=100, running_s=100)],
     ["high", "low"]),
    # two checkpointable pods: priority, then uid
    ([PodOnGpu("b", checkpointable=True), PodOnGpu("a", checkpointable=True),
      PodOnGpu("c", checkpointable=True, priority=5)],
     ["c", "a", "b"]),
    ([], []),
])
def test_drain_order(pods, expected) -> None:
    steps = drain_order(pods)
    assert [s.pod.uid for s in steps] == expected
    assert [s.order for s in steps] == list(range(len(expected)))
    for s in steps:
        assert s.work_lost_s == (0.0 if s.pod.checkpointable else s.pod.running_s)


PODS = [PodOnGpu("batch", checkpointable=True, running_s=500), PodOnGpu("critical", priority=1000, running_s=30)]


def test_recommendation_follows_the_state() -> None:
    b = no_risk()
    healthy = b.observe(obs(0.0))
    assert recommend_drain(healthy, PODS) is None
    # degraded (a pending row remap): only the work that does not tolerate failure moves, not urgently
    degraded = b.observe(obs(60.0, row_remap_pending=True))
    plan = recommend_drain(degraded, PODS)
    assert plan is not None and (plan.urgent, plan.uids) == (False, ["critical"])
    assert "row_remap_pending" in plan.reason
    # quarantined: everything, urgently, checkpointable first
    quarantined = b.observe(obs(120.0, xids=(79,)))
    plan = recommend_drain(quarantined, PODS)
    assert plan is not None and (plan.gpu_uuid, plan.urgent, plan.uids) == (GPU, True, ["batch", "critical"])
    assert recommend_drain(quarantined, []) is None


def test_pods_on_gpus_follows_placements_and_departures_in_any_order() -> None:
    book = PodsOnGpus(forget_after=2)
    assert book.place(PodOnGpu(uid="a"), ["G0", "G1"], started_at=100.0)
    assert book.place(PodOnGpu(uid="b", checkpointable=True), ["G0"], started_at=150.0)
    assert [(p.uid, p.running_s) for p in book.on("G0", 200.0)] == [("a", 100.0), ("b", 50.0)]
    assert book.remove("a") and [p.uid for p in book.on("G1", 200.0)] == []
    # gone before its decision was read (a replay across two streams): it stays gone
    assert not book.remove("c")
    assert not book.place(PodOnGpu(uid="c"), ["G0"], started_at=120.0)
    assert [p.uid for p in book.on("G0", 200.0)] == ["b"] and len(book) == 1
    # only the last forget_after departures are remembered
    book.remove("d")
    assert book.place(PodOnGpu(uid="a"), ["G2"], started_at=0.0)  # "a" was forgotten
