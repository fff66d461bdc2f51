"""The binder service end to end against a real nats-server and the twin: pending pods published as
they arrive, decisions applied exactly once (duplicates, redeliveries after a restart), refusals
reported with their reason while the loop goes on, departures at the end of the work, preemptions
with the checkpoint handshake, an elastic job's grow through the resize handshake, and the world's
truth on request."""

from __future__ import annotations

import asyncio

import pytest
from binder_helpers import T0, Harness, decision, sim_pod, twin_world

from gpuaware import bus
from gpuaware.schemas import (
    WORLD_SNAPSHOT,
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    PlannedPreemption,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    QosClass,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.sim.workload_gen import SimPod


async def test_pending_pods_are_published_as_they_arrive(harness: Harness) -> None:
    world = twin_world(sim_pod("p0", at=0.0, milli=250, gmem=4096, priority=1000),
                       sim_pod("p1", at=2.0, ckpt=True), sim_pod("p2", at=4.0, queue="team-b"))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: len(rec.of(PodPending)) == 3)
    pending = rec.of(PodPending)
    # arrivals 0, 2, 4 virtual seconds after T0 (0.2 s apart at speed 10), published in that order
    assert [(p.pod_uid, p.submitted_at - T0, p.attempt) for p in pending] == [("p0", 0, 0), ("p1", 2, 0), ("p2", 4, 0)]
    assert all(p.emitted_at >= p.submitted_at for p in pending)
    p0, p1, p2 = pending
    assert (p0.gpu_milli, p0.gpu_memory_mib, p0.priority, p0.qos) == (250, 4096, 1000, QosClass.BEST_EFFORT)
    assert p1.checkpointable and p2.queue == "team-b"
    assert rec.ids[:3] == ["default/pending/p0/0", "default/pending/p1/0", "default/pending/p2/0"]
    await running.shutdown()


async def test_a_decision_binds_exactly_once_even_duplicated_or_redelivered(harness: Harness) -> None:
    world = twin_world(sim_pod("a"))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: rec.of(PodPending, "a"))
    d = decision(world, "d-1", "a", "n1", [(0, 1000, 15_000)])
    await harness.decide(d)
    (bound,) = await rec.wait_for(lambda: rec.of(PodBound, "a"))
    assert bound.decision_id == "d-1" and bound.node == "n1" and bound.slices == d.slices
    gpu = d.slices[0].gpu_uuid
    truth = (world.twin.generation, world.twin.gpu_used(gpu))
    assert truth[1] == (1000, 15_000)

    # the same decision published again under another message id: the stream stores it twice
    await harness.decide(d, msg_id="test/d-1/again")
    await rec.wait_for(lambda: running.binder.stats.decisions == 2)
    assert running.binder.stats.duplicates == 1
    await running.shutdown()

    # a crash before the acks: a new binder (empty memory) gets every decision again
    await harness.js.delete_consumer("PLACEMENT", "binder")
    again = await harness.start(world)
    await rec.wait_for(lambda: again.binder.stats.decisions == 2)
    assert again.binder.stats.duplicates == 2  # both caught by the world's truth this time
    await asyncio.sleep(0.3)
    assert len(rec.of(PodBound, "a")) == 1  # republished with the same msg id: stored once
    assert (world.twin.generation, world.twin.gpu_used(gpu)) == truth
    await again.shutdown()


async def test_refusals_carry_their_reason_and_the_loop_goes_on(harness: Harness) -> None:
    world = twin_world(sim_pod("a"), sim_pod("b", milli=500, gmem=4096))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: len(rec.of(PodPending)) == 2)

    await harness.decide(decision(world, "d-ghost", "ghost", "n1", [(0, 1000, 0)]))
    (ghost,) = await rec.wait_for(lambda: rec.of(PodBindFailed, "ghost"))
    assert (ghost.reason, ghost.transient, ghost.decision_id) == ("unknown_pod", False, "d-ghost")

    await harness.decide(decision(world, "d-a", "a", "n1", [(0, 1000, 15_000)]))
    await rec.wait_for(lambda: rec.of(PodBound, "a"))
    # GPU 0 of n1 is taken whole: 1000 + 500 > 1000
    await harness.decide(decision(world, "d-b1", "b", "n1", [(0, 500, 4096)]))
    (over,) = await rec.wait_for(lambda: rec.of(PodBindFailed, "b"))
    assert (over.reason, over.transient, over.node) == ("gpu_over_allocated", True, "n1")
    # transient: b waits again, as attempt 1
    requeued = await rec.wait_for(lambda: [p for p in rec.of(PodPending, "b") if p.attempt == 1])
    assert requeued[0].submitted_at == T0
    assert world.twin.gpu_used(world.twin.node_gpus["n1"][0].uuid) == (1000, 15_000)

    await harness.decide(decision(world, "d-b2", "b", "n1", [(1, 500, 4096)]))
    (bound,) = await rec.wait_for(lambda: rec.of(PodBound, "b"))
    assert bound.decision_id == "d-b2"
    world.twin.check()
    assert running.task.done() is False
    await running.shutdown()


async def test_a_pod_finishes_at_the_end_of_its_work(harness: Harness) -> None:
    world = twin_world(sim_pod("f", dur=3.0))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: rec.of(PodPending, "f"))
    await harness.decide(decision(world, "d-f", "f", "n2", [(0, 1000, 81_251)]))
    (bound,) = await rec.wait_for(lambda: rec.of(PodBound, "f"))
    assert not rec.of(PodFinished, "f")
    (finished,) = await rec.wait_for(lambda: rec.of(PodFinished, "f"))
    # 3 s of work from the bind: finished_at = bound_at + 3 exactly (virtual time)
    assert finished.finished_at == pytest.approx(bound.bound_at + 3.0)
    assert finished.started_at == bound.bound_at and finished.slices == bound.slices and finished.node == "n2"
    assert world.twin.state("f") == "finished" and world.twin.gpu_used(bound.slices[0].gpu_uuid) == (0, 0)
    await running.shutdown()


@pytest.mark.parametrize("victim_checkpoints", [True, False])
async def test_preemption_with_the_checkpoint_handshake(harness: Harness, victim_checkpoints: bool) -> None:
    world = twin_world(sim_pod("v", ckpt=victim_checkpoints, priority=0), sim_pod("p", priority=1000))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: len(rec.of(PodPending)) == 2)
    await harness.decide(decision(world, "d-v", "v", "n2", [(0, 1000, 81_251)]))
    await rec.wait_for(lambda: rec.of(PodBound, "v"))

    plan = PlannedPreemption(pod_uid="v", pod_name="v", namespace="t", node="n2", reason="priority",
                             checkpoint_first=True, grace_period_s=30.0)
    await harness.decide(decision(world, "d-p", "p", "n2", [(0, 1000, 81_251)], preemptions=(plan,)))
    await rec.wait_for(lambda: rec.of(PodBound, "p"))

    order = [(type(e).__name__, getattr(e, "pod_uid", None)) for e in rec.events[3:]]
    handshake = [("CheckpointRequested", "v"), ("CheckpointAcknowledged", "v")] if victim_checkpoints else []
    assert order == [*handshake, ("PodPreempted", "v"), ("PodPending", "v"), ("PodBound", "p")]
    (preempted,) = rec.of(PodPreempted, "v")
    assert preempted.checkpointed is victim_checkpoints and preempted.requeued
    assert (preempted.decision_id, preempted.preemptor_pod_uid, preempted.reason) == ("d-p", "p", "priority")
    assert preempted.slices[0].gpu_uuid == world.twin.node_gpus["n2"][0].uuid
    if victim_checkpoints:
        (req,) = rec.of(CheckpointRequested, "v")
        (ack,) = rec.of(CheckpointAcknowledged, "v")
        assert req.request_id == ack.request_id == "d-p/v" and ack.status is CheckpointStatus.COMPLETED
        # the twin answers 2..4 virtual seconds after the request
        assert 2.0 <= ack.acknowledged_at - req.requested_at <= 4.0 + 1.0
        assert running.binder.stats.checkpoints_completed == 1
    (requeued,) = [p for p in rec.of(PodPending, "v") if p.attempt == 1]
    assert requeued.submitted_at == T0 and requeued.checkpointable is victim_checkpoints
    assert world.twin.state("v") == "pending" and world.twin.state("p") == "bound"
    world.twin.check()
    await running.shutdown()


async def test_snapshot_returns_the_worlds_truth_in_pages(harness: Harness) -> None:
    world = twin_world(sim_pod("a"), sim_pod("b", milli=500, gmem=4096), sim_pod("c"))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: len(rec.of(PodPending)) == 3)
    await harness.decide(decision(world, "d-a", "a", "n2", [(0, 1000, 81_251)]))
    await harness.decide(decision(world, "d-b", "b", "n1", [(1, 500, 4096)]))
    await rec.wait_for(lambda: len(rec.of(PodBound)) == 2)

    ask = WorldSnapshotRequest(source="placement/test", emitted_at=T0, limit=1)
    first = await bus.request(harness.nc, WORLD_SNAPSHOT, ask, WorldSnapshotReply)
    assert (first.world, first.total_nodes, first.total_pods, first.pending_pods) == ("twin", 2, 2, 1)
    assert (first.next_node_offset, first.next_pod_offset) == (1, 1)
    second = await bus.request(harness.nc, WORLD_SNAPSHOT, WorldSnapshotRequest(
        source="placement/test", emitted_at=T0, limit=1, node_offset=1, pod_offset=1), WorldSnapshotReply)
    assert (second.next_node_offset, second.next_pod_offset) == (None, None)
    assert second.generation == first.generation == world.twin.generation

    nodes = {n.name: n for n in (*first.nodes, *second.nodes)}
    assert [(g.index, g.model, g.memory_mib) for g in nodes["n1"].gpus] == [(0, "T4", 15360), (1, "T4", 15360)]
    assert [g.uuid for g in nodes["n2"].gpus] == [g.uuid for g in world.twin.node_gpus["n2"]]
    pods = {p.pod_uid: p for p in (*first.pods, *second.pods)}
    bound = {b.pod_uid: b for b in rec.of(PodBound)}
    assert {uid: (p.node, p.slices, p.decision_id) for uid, p in pods.items()} == {
        uid: (b.node, b.slices, b.decision_id) for uid, b in bound.items()}
    await running.shutdown()


async def test_a_grow_goes_through_the_resize_handshake_on_the_bus(harness: Harness) -> None:
    def elastic(uid: str) -> SimPod:
        return SimPod(uid=uid, name=uid, namespace="t", arrival_s=0.0, duration_s=None, queue="team-a",
                      cpu_milli=1000, memory_mib=2048, num_gpu=1, checkpointable=True, gang_id="job",
                      gang_min_members=1, gang_max_members=2)

    world = twin_world(elastic("w0"), elastic("w1"))
    running = await harness.start(world)
    rec = harness.recorder
    await rec.wait_for(lambda: len(rec.of(PodPending)) == 2)
    assert {p.gang_max_members for p in rec.of(PodPending)} == {2}
    await harness.decide(decision(world, "d-0", "w0", "n1", [(0, 1000, 15_000)]))
    await rec.wait_for(lambda: rec.of(PodBound, "w0"))
    await harness.decide(decision(world, "d-1", "w1", "n1", [(1, 1000, 15_000)]))
    await rec.wait_for(lambda: rec.of(PodBound, "w1"))
    (asked,) = rec.of(CheckpointRequested)
    (answer,) = rec.of(CheckpointAcknowledged)
    assert (asked.pod_uid, asked.reason, asked.world_size, asked.request_id) == ("w0", "resize", 2, "d-1/resize/w0")
    assert answer.request_id == asked.request_id and answer.status is CheckpointStatus.COMPLETED
    order = [type(e).__name__ for e in rec.events if getattr(e, "pod_uid", None) in ("w0", "w1")][-3:]
    assert order == ["CheckpointRequested", "CheckpointAcknowledged", "PodBound"]   # checkpoint, then the new world
    assert (running.binder.stats.grows, running.binder.stats.shrinks) == (1, 0)
    job = world.twin.elastic_job("w0")
    assert job is not None and (job.grows, job.workers) == (1, 2)
    await running.shutdown()
