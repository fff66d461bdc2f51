"""The twin's pace: the clock slows when the services lag it (pending -> first verdict, in the twin's
seconds), never under its floor, speeds up again when they catch up, and records each change; the
binder's twin world feeds it from what it publishes and what placement answers."""

from __future__ import annotations

import asyncio

import pytest

from gpuaware.placement import NodeSpec
from gpuaware.schemas import GpuSlice, PlacementDecided, PodUnschedulable
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim import AcceleratedClock, Pacer, Twin
from gpuaware.sim.workload_gen import SimPod

T0 = 1_767_225_600.0


def answer_all(p: Pacer, n: int, lag_wall_s: float, *, start: float = 0.0, attempt: int = 0) -> list[float | None]:
    """``n`` pods published one wall second apart, each answered ``lag_wall_s`` later."""
    out = []
    for i in range(n):
        p.published(f"p{i}", attempt, start + i)
        out.append(p.answered(f"p{i}", attempt, start + i + lag_wall_s))
    return out


def test_services_that_keep_up_leave_the_speed_alone() -> None:
    p = Pacer(576.0, window=4)
    # 0.1 wall s at 576x = 57.6 virtual s: under the 300 s that slows the twin
    assert answer_all(p, 12, 0.1) == [None] * 12 and p.speed == 576.0 and p.changes == []


def test_lagging_services_halve_the_speed_down_to_the_floor() -> None:
    p = Pacer(576.0, window=4, floor=0.25)
    # 2 wall s = 1,152 virtual s at 576x: over 300 -> 288x; then 576 s at 288x -> 144x (the floor, 576 / 4)
    changes = answer_all(p, 12, 2.0)
    assert [c for c in changes if c is not None] == [288.0, 144.0]
    assert p.at_floor and p.speed == 144.0
    assert [(c.speed, c.lag_virtual_s) for c in p.changes] == [(288.0, 1152.0), (144.0, 576.0)]
    summary = p.summary()
    assert summary["slowest"] == 144.0 and summary["changes"] == 2 and summary["at_floor"] is True


def test_the_speed_comes_back_when_the_services_catch_up() -> None:
    p = Pacer(576.0, window=4)
    answer_all(p, 4, 2.0)
    assert p.speed == 288.0
    # 0.05 wall s at 288x = 14.4 virtual s: under a minute -> 432x, then back to 576x (never above)
    assert [c for c in answer_all(p, 12, 0.05, start=100.0, attempt=1) if c is not None] == [432.0, 576.0]
    assert p.speed == 576.0


def test_a_pod_waiting_for_capacity_is_answered_by_its_unschedulable_verdict() -> None:
    """Only the first verdict on an attempt counts, and a verdict on a pending never seen changes nothing:
    a pod parked at once and decided an hour later is no lag."""
    p = Pacer(576.0, window=2)
    p.published("a", 0, 0.0)
    assert p.answered("a", 0, 0.1) is None  # unschedulable, at once
    assert p.answered("a", 0, 3600.0) is None  # its decision, an hour later: not timed again
    assert p.answered("ghost", 0, 1.0) is None and p.answered_count == 1


def test_settings_that_cannot_work_are_refused() -> None:
    for kwargs in ({"floor": 0.0}, {"floor": 1.5}, {"slow_above_s": 10.0, "resume_below_s": 20.0}):
        with pytest.raises(ValueError):
            Pacer(576.0, **kwargs)  # type: ignore[arg-type]  # each case sets one of the float options
    with pytest.raises(ValueError):
        Pacer(0.0)


def test_a_clock_changing_speed_goes_on_from_where_it_is() -> None:
    wall = [100.0]
    clock = AcceleratedClock(speed=576.0, start=T0, wall=lambda: wall[0])
    wall[0] += 1.0
    clock.skip_to(T0 + 1000.0)
    clock.set_speed(144.0)
    assert clock() == pytest.approx(T0 + 1000.0) and clock.skipped == pytest.approx(424.0)
    wall[0] += 2.0
    assert clock() == pytest.approx(T0 + 1000.0 + 288.0)
    assert clock.wall_delay(T0 + 1000.0 + 288.0 + 144.0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        clock.set_speed(0.0)


def test_the_twin_world_slows_its_clock_when_placement_answers_late() -> None:
    """The binder's world: pendings it publishes, decisions it binds and verdicts placement publishes
    feed the pacer; a change of speed reaches the world's clock."""
    nodes = (NodeSpec("n1", 32_000, 131_072, 2, "T4"),)
    pods = [SimPod(uid=f"p{i}", name=f"p{i}", namespace="t", arrival_s=0.0, duration_s=50.0, queue="q", cpu_milli=100,
                   memory_mib=128, num_gpu=1, gpu_milli=100) for i in range(4)]
    twin = Twin(nodes, pods, start=T0, seed=1)
    wall = [0.0]
    world = TwinWorld(twin, AcceleratedClock(speed=576.0, start=T0), pacer=Pacer(576.0, window=4),
                      pace_wall=lambda: wall[0])
    assert hasattr(world, "unschedulable")  # the binder then follows placement's verdicts for it
    twin.advance(T0 + 1.0)
    for p in twin.pending():
        world._pending_out(world._pending(p, 0, T0))
    wall[0] = 5.0  # every verdict 5 wall s late: 2,880 virtual s
    gpu = twin.node_gpus["n1"][0].uuid
    share = (GpuSlice(gpu_uuid=gpu, gpu_index=0, gpu_milli=100, memory_mib=0),)

    async def answers() -> None:
        for i in (0, 1):
            await world.bind(PlacementDecided(
                source="t", emitted_at=1.0, cluster=twin.cluster, decision_id=f"p{i}/0", pod_uid=f"p{i}",
                pod_name=f"p{i}", namespace="t", node="n1", slices=share, policy="P", score=1.0, decided_at=1.0))
        for i in (2, 3):
            await world.unschedulable(PodUnschedulable(
                source="t", emitted_at=1.0, cluster=twin.cluster, pod_uid=f"p{i}", pod_name=f"p{i}", namespace="t",
                reason="no_fit"))

    asyncio.run(answers())
    assert world.clock.speed == 288.0 and world.pacer is not None and len(world.pacer.changes) == 1
    assert twin.state("p0") == "bound" and twin.state("p1") == "bound"
    plain = TwinWorld(Twin(nodes, pods, start=T0, seed=1), AcceleratedClock(speed=576.0, start=T0))
    assert not hasattr(plain, "unschedulable") and plain.pacer is None
