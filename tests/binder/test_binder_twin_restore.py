"""A killed binder must not take the simulated cluster with it (issue 16's fault suite found the twin
replaying the day from its start after a binder restart, and GPUs over-allocated in the event replay):
``TwinWorld.restore`` rebuilds a fresh twin from the events the killed binder published."""

from __future__ import annotations

from typing import Any

from binder_helpers import NODES, T0, decision, sim_pod

from gpuaware.schemas import CheckpointRequested, Event, PlannedPreemption, PodFinished, PodPending
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim.clock import AcceleratedClock
from gpuaware.sim.twin import ElasticJob, Twin
from gpuaware.sim.workload_gen import SimPod

PODS = (sim_pod("a", at=0, dur=100), sim_pod("b", at=10, dur=1000, ckpt=True), sim_pod("c", at=20, dur=None),
        sim_pod("d", at=30, dur=60))


class Wall:
    """A wall clock the test moves (the world's clock runs at speed 1 on it)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def world(wall: Wall) -> TwinWorld:
    twin = Twin(NODES, PODS, start=T0, seed=1, checkpoint_delay_s=(2.0, 4.0), fleet=False)
    return TwinWorld(twin, AcceleratedClock(speed=1.0, start=T0, wall=wall), source="binder/test", skip_idle=False)


def drain(w: TwinWorld, published: list[Event]) -> None:
    w._sync()
    published.extend(e for e, _ in w._outbox)
    w._outbox.clear()


def state_of(w: TwinWorld) -> dict[str, Any]:
    t = w.twin
    return {uid: (t.state(uid), t.attempt(uid), None if t.binding(uid) is None else
                  (t.binding(uid).node, tuple((s.gpu_uuid, s.gpu_milli) for s in t.binding(uid).slices)))
            for uid in "abcd"}


async def test_a_restarted_binder_finds_its_twin_as_the_killed_one_left_it() -> None:
    wall = Wall()
    before, published = world(wall), []
    wall.t = 5
    drain(before, published)
    published.append(await before.bind(decision(before, "d-a", "a", "n1", [(0, 1000, 0)])))
    wall.t = 25
    drain(before, published)
    published.append(await before.bind(decision(before, "d-b", "b", "n2", [(0, 1000, 0)])))
    published.append(await before.bind(decision(before, "d-c", "c", "n1", [(1, 1000, 0)])))
    wall.t = 40
    drain(before, published)
    d = decision(before, "d-d", "d", "n1", [(1, 1000, 0)], preemptions=(
        PlannedPreemption(pod_uid="c", pod_name="c", namespace="t", node="n1", reason="priority"),))
    preempted, requeued = await before.evict(d.preemptions[0], checkpointed=False, decision=d)
    published += [preempted, requeued]
    published.append(await before.bind(d))
    wall.t = 150  # a (bound at 5 for 100 s) and d (bound at 40 for 60 s) finish
    drain(before, published)
    finished = [e for e in published if isinstance(e, PodFinished)]
    assert sorted(e.pod_uid for e in finished) == ["a", "d"]
    # the binder was killed after publishing a's departure but before d's
    lost = next(e for e in finished if e.pod_uid == "d")
    published.remove(lost)

    after = world(Wall())
    counts = after.restore(published)

    assert state_of(after) == state_of(before)
    assert counts["diverged"] == 0 and counts["bound"] == 4 and counts["evicted"] == 1
    # the departure the killed binder never published goes out now, under its own message id
    assert [(type(e).__name__, e.pod_uid, m) for e, m in after._outbox] == [
        ("PodFinished", "d", f"{after.cluster}/finished/d")]
    assert after.now() >= T0 + 100  # its clock goes on from the last event, not from the day's start
    # nothing already published comes out again: c's requeued attempt 1 was on the stream
    assert not [e for e, _ in after._outbox if isinstance(e, PodPending)]


async def test_a_pending_pod_whose_arrival_was_never_published_is_announced_after_a_restore() -> None:
    wall = Wall()
    before, published = world(wall), []
    wall.t = 25
    drain(before, published)  # a, b, c arrive
    published.append(await before.bind(decision(before, "d-a", "a", "n1", [(0, 1000, 0)])))
    c_arrival = next(e for e in published if isinstance(e, PodPending) and e.pod_uid == "c")
    published.remove(c_arrival)  # killed before c's arrival reached the stream

    after = world(Wall())
    counts = after.restore(published)
    assert counts["diverged"] == 0
    out = [(e.pod_uid, e.attempt) for e, _ in after._outbox if isinstance(e, PodPending)]
    assert out == [("c", 0)]
    assert state_of(after) == state_of(before)


def test_an_event_the_replay_cannot_reproduce_is_counted_not_applied() -> None:
    w = world(Wall())
    bogus = PodFinished(source="binder/test", emitted_at=T0 + 5, cluster=w.cluster, pod_uid="a", pod_name="a",
                        namespace="t", outcome="Succeeded", finished_at=T0 + 5, node="n1", started_at=T0)
    counts = w.restore([bogus])
    assert counts["diverged"] == 1
    assert w.twin.state("a") == "pending"


async def test_an_elastic_jobs_progress_and_resizes_are_restored() -> None:
    def elastic(uid: str) -> SimPod:
        return SimPod(uid=uid, name=uid, namespace="t", arrival_s=0.0, duration_s=300.0, cpu_milli=1000,
                      memory_mib=2048, num_gpu=1, checkpointable=True, gang_id="e", gang_min_members=1,
                      gang_max_members=3)

    def elastic_world() -> TwinWorld:
        twin = Twin(NODES, [elastic(f"e-{i}") for i in range(3)], start=T0, seed=1, checkpoint_delay_s=(2.0, 4.0),
                    fleet=False)
        return TwinWorld(twin, AcceleratedClock(speed=1.0, start=T0, wall=wall), source="binder/test",
                         skip_idle=False)

    wall = Wall()
    before, published = elastic_world(), []
    wall.t = 5
    drain(before, published)
    published.append(await before.bind(decision(before, "d-0", "e-0", "n1", [(0, 1000, 0)])))
    wall.t = 15
    ask = CheckpointRequested(source="binder/test", emitted_at=before.now(), cluster=before.cluster,
                              request_id="d-1/resize/e-0", pod_uid="e-0", pod_name="e-0", namespace="t", node="n1",
                              reason="resize", deadline_s=60.0, requested_at=before.now(), world_size=2)
    await before.request_checkpoint(ask)
    published.append(ask)
    wall.t = 20
    drain(before, published)  # the answer
    published.append(await before.bind(decision(before, "d-1", "e-1", "n1", [(1, 1000, 0)])))   # a grow
    wall.t = 100
    d = decision(before, "d-2", "e-2", "n2", [(0, 1000, 0)], preemptions=(
        PlannedPreemption(pod_uid="e-1", pod_name="e-1", namespace="t", node="n1", reason="shrink"),))
    published += [e for e in await before.evict(d.preemptions[0], checkpointed=True, decision=d) if e is not None]
    published.append(await before.bind(d))   # a shrink, then a grow
    wall.t = 120
    drain(before, published)

    after = elastic_world()
    counts = after.restore(published)
    assert counts["diverged"] == 0
    job, again = before.twin.elastic_job("e-0"), after.twin.elastic_job("e-0")
    assert job is not None and again is not None

    def progress(j: ElasticJob) -> tuple[object, ...]:
        return (dict(j.running), j.grows, j.shrinks, round(j.done_s, 6), round(j.saved_s, 6), j.paused_until,
                round(j.restart_s, 6))

    assert progress(again) == progress(job) and (job.grows, job.shrinks) == (2, 1)
    assert after.twin.next_event_at() == before.twin.next_event_at()   # the job ends at the same instant
