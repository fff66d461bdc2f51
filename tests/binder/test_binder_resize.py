"""The binder resizes elastic jobs through the checkpoint handshake: one ``resize`` request per running
worker, carrying the job's new world size, before a worker joins a running job (a grow) or leaves
one that keeps its minimum (a shrink); none for a fixed gang or for a job that falls below its
minimum (an ordinary preemption); nothing twice when a decision comes again. The twin answers the
requests, charges the restart, and ends the job once: bound workers finish, pending ones are
withdrawn. In process: the binder's logic over the twin, its outbox a dictionary by message id (as
the stream stores an id once) that hands checkpoint answers back to the binder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from binder_helpers import T0, decision

from gpuaware.placement import NodeSpec
from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    Event,
    PlacementDecided,
    PlannedPreemption,
    PodFinished,
    PodOutcome,
    PodPreempted,
)
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim.clock import AcceleratedClock
from gpuaware.sim.twin import RESIZE_RESTART_DELAY_S, Twin
from gpuaware.sim.workload_gen import SimPod

NODES = (NodeSpec("n1", 64_000, 262_144, 4, "A100"), NodeSpec("n2", 64_000, 262_144, 4, "A100"))


def worker(uid: str, gang: str, *, low: int = 1, high: int = 4, dur: float | None = None,
           priority: int = 0) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=0.0, duration_s=dur, cpu_milli=1000,
                  memory_mib=1024, num_gpu=1, checkpointable=True, priority=priority, gang_id=gang,
                  gang_min_members=low, gang_max_members=high)


def lone(uid: str, priority: int = 1000) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=0.0, duration_s=None, cpu_milli=1000,
                  memory_mib=1024, num_gpu=1, priority=priority)


@dataclass
class Stream:
    """Stores each message id once, in order; checkpoint answers wake the binder's waits."""

    stored: dict[str, Event] = field(default_factory=dict)
    binder: Binder | None = None

    async def publish(self, event: Event, msg_id: str) -> None:
        if msg_id in self.stored:
            return
        self.stored[msg_id] = event
        if isinstance(event, CheckpointAcknowledged) and self.binder is not None:
            self.binder.on_checkpoint_answer(event)

    def resizes(self) -> list[CheckpointRequested]:
        return [e for e in self.stored.values() if isinstance(e, CheckpointRequested) and e.reason == "resize"]

    def of(self, cls: type, uid: str) -> list[Event]:
        return [e for e in self.stored.values() if isinstance(e, cls) and getattr(e, "pod_uid", None) == uid]


@dataclass
class Running:
    world: TwinWorld
    stream: Stream
    binder: Binder

    def place(self, uid: str, gpu: int, preemptions: tuple[PlannedPreemption, ...] = ()) -> PlacementDecided:
        node, index = NODES[gpu // 4].name, gpu % 4
        return decision(self.world, f"d-{uid}", uid, node, [(index, 1000, 0)], preemptions)

    async def decide(self, uid: str, gpu: int, preemptions: tuple[PlannedPreemption, ...] = ()) -> str:
        return await self.binder.on_decision(self.place(uid, gpu, preemptions))

    def fresh_binder(self) -> Binder:
        """A restarted binder: nothing in memory, the same world and stream."""
        self.binder = Binder(self.world, self.stream, source="binder/test", checkpoint_min_wait_s=0.2)
        self.stream.binder = self.binder
        return self.binder


@pytest.fixture
async def running(request: pytest.FixtureRequest) -> AsyncIterator[Running]:
    pods: tuple[SimPod, ...] = request.param
    twin = Twin(NODES, pods, start=T0, seed=2, checkpoint_delay_s=(2.0, 4.0), fleet=False)
    world = TwinWorld(twin, AcceleratedClock(speed=50.0, start=T0), source="binder/test", skip_idle=False,
                      tick_s=0.02)
    stream = Stream()
    r = Running(world, stream, Binder(world, stream, source="binder/test"))
    r.fresh_binder()
    stop = asyncio.Event()
    loop = asyncio.create_task(world.run(lambda e, m: r.binder.emit(e, m), stop))
    yield r
    stop.set()
    await asyncio.wait_for(loop, 5)


ELASTIC = (*(worker(f"job-{i}", "job") for i in range(4)), worker("fix-0", "fix", low=2, high=0),
           worker("fix-1", "fix", low=2, high=0), lone("hi"))


@pytest.mark.parametrize("running", [ELASTIC], indirect=True)
async def test_one_resize_request_per_running_worker_with_the_new_world_size(running: Running) -> None:
    r, stream = running, running.stream
    assert await r.decide("job-0", 0) == "bound"       # the job starts: nothing runs yet to resize
    assert stream.resizes() == []
    assert await r.decide("job-1", 1) == "bound"       # a grow: 1 -> 2
    assert [(q.pod_uid, q.world_size, q.request_id) for q in stream.resizes()] == [
        ("job-0", 2, "d-job-1/resize/job-0")]
    assert await r.decide("job-2", 2) == "bound"       # a grow: 2 -> 3
    grow = [q for q in stream.resizes() if q.decision_id == "d-job-2"]
    assert sorted((q.pod_uid, q.world_size) for q in grow) == [("job-0", 3), ("job-1", 3)]
    assert (r.binder.stats.grows, r.binder.stats.shrinks) == (2, 0)
    assert [type(e).__name__ for e in stream.of(CheckpointAcknowledged, "job-0")] == ["CheckpointAcknowledged"] * 2

    before = len(stream.resizes())
    assert await r.decide("fix-0", 4) == "bound"       # a fixed gang: never resized
    assert await r.decide("fix-1", 5) == "bound"
    assert len(stream.resizes()) == before

    shrink = PlannedPreemption(pod_uid="job-2", pod_name="job-2", namespace="t", node="n1", reason="shrink",
                               checkpoint_first=True, grace_period_s=30.0)
    assert await r.decide("hi", 2, (shrink,)) == "bound"   # a shrink: 3 -> 2, every worker asked
    down = [q for q in stream.resizes() if q.decision_id == "d-hi"]
    assert sorted((q.pod_uid, q.world_size) for q in down) == [("job-0", 2), ("job-1", 2), ("job-2", 2)]
    assert not [e for e in stream.stored.values() if isinstance(e, CheckpointRequested) and e.reason != "resize"]
    (preempted,) = stream.of(PodPreempted, "job-2")
    assert isinstance(preempted, PodPreempted) and preempted.checkpointed and preempted.reason == "shrink"
    assert (r.binder.stats.grows, r.binder.stats.shrinks) == (2, 1)
    job = r.world.twin.elastic_job("job-0")
    assert job is not None and (job.grows, job.shrinks, job.workers, job.lost_s) == (2, 1, 2, 0.0)
    # a resize during another's restart starts it over: at most one delay per resize
    assert RESIZE_RESTART_DELAY_S < job.restart_s <= 3 * RESIZE_RESTART_DELAY_S

    # the decisions again, to this binder (every one) and to a restarted one (those whose pod is still
    # bound by them: the world's truth): nothing is resized twice
    stored = dict(stream.stored)
    again = [r.place("job-1", 1), r.place("job-2", 2), r.place("fix-0", 4), r.place("hi", 2, (shrink,))]
    for d in again:
        assert await r.binder.on_decision(d) == "duplicate"
    assert (r.binder.stats.grows, r.binder.stats.shrinks, r.binder.stats.checkpoints_requested) == (2, 1, 1 + 2 + 3)
    restarted = r.fresh_binder()
    for d in (again[0], again[2], again[3]):
        assert await restarted.on_decision(d) == "duplicate"
    assert (restarted.stats.grows, restarted.stats.shrinks, restarted.stats.checkpoints_requested) == (0, 0, 0)
    assert stream.resizes() == [e for e in stored.values() if isinstance(e, CheckpointRequested)]
    assert (job.grows, job.shrinks) == (2, 1)
    r.world.twin.check()


@pytest.mark.parametrize("running", [(worker("a-0", "a", low=2, high=3), worker("a-1", "a", low=2, high=3),
                                      lone("hi"))], indirect=True)
async def test_a_job_falling_below_its_minimum_is_preempted_not_resized(running: Running) -> None:
    r = running
    assert await r.decide("a-0", 0) == "bound"
    assert await r.decide("a-1", 1) == "bound"         # the gang reaches its minimum: it starts, no resize
    victim = PlannedPreemption(pod_uid="a-1", pod_name="a-1", namespace="t", node="n1", reason="priority",
                               checkpoint_first=True, grace_period_s=30.0)
    assert await r.decide("hi", 1, (victim,)) == "bound"
    (asked,) = r.stream.of(CheckpointRequested, "a-1")
    assert isinstance(asked, CheckpointRequested) and (asked.reason, asked.world_size) == ("preemption", None)
    assert r.stream.resizes() == [] and (r.binder.stats.grows, r.binder.stats.shrinks) == (0, 0)


@pytest.mark.parametrize("running", [(worker("j-0", "j", high=2, dur=20.0), worker("j-1", "j", high=2, dur=20.0))],
                         indirect=True)
async def test_the_job_ends_once_its_pending_worker_withdrawn(running: Running) -> None:
    r = running
    assert await r.decide("j-0", 0) == "bound"

    async def both_finished() -> None:
        while len([e for e in r.stream.stored.values() if isinstance(e, PodFinished)]) < 2:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(both_finished(), 10)
    (ran,) = r.stream.of(PodFinished, "j-0")
    (withdrawn,) = r.stream.of(PodFinished, "j-1")
    assert isinstance(ran, PodFinished) and isinstance(withdrawn, PodFinished)
    assert ran.outcome is PodOutcome.SUCCEEDED and ran.node == "n1"
    assert ran.finished_at == pytest.approx(ran.started_at + 20.0 * 2)   # one of two workers: half the pace
    assert (withdrawn.outcome, withdrawn.node, withdrawn.finished_at) == (PodOutcome.DELETED, None, ran.finished_at)
    assert "default/finished/j-1" in r.stream.stored
