"""A 3-node NATS JetStream cluster on loopback (gpuaware.devstack.cluster): an R3 stream keeps taking
and serving messages when the node leading it is killed mid-stream, loses none and stores none twice,
and the killed node rejoins (issue 16: how gpuaware grows past one machine, on NATS's own clustering)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from gpuaware import bus
from gpuaware.devstack.cluster import start_nats_cluster

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


class Tick(msgspec.Struct, frozen=True):
    id: str


async def _retry(call, *, timeout: float = 30.0, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except Exception as exc:  # the cluster elects leaders: every failure is retried until the deadline
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout}s ({type(exc).__name__}: {exc})") from exc
            await asyncio.sleep(0.3)


async def test_an_r3_stream_survives_its_leader_being_killed_mid_stream(tmp_path: Path) -> None:
    cluster = start_nats_cluster(tmp_path / "cluster", size=3)
    channel = bus.Channel("fault.tick.v1", Tick, id_of=lambda t: t.id)
    spec = bus.SimpleStreamSpec(name="FAULT", subjects=("fault.>",), replicas=3, duplicate_window_s=120)
    try:
        async with bus.connected(cluster.urls, name="fault", initial_timeout=10) as nc:
            js = nc.jetstream(timeout=3.0)
            info = await _retry(lambda: bus.ensure_stream(js, spec), what="an R3 stream on a fresh cluster")
            assert info.config.num_replicas == 3

            async def send(i: int) -> None:
                await _retry(lambda: bus.publish(js, channel, Tick(id=f"t{i}"), timeout=3.0), what=f"publish {i}")

            for i in range(100):
                await send(i)
            leader = (await js.stream_info("FAULT")).cluster.leader
            victim = next(k for k, n in enumerate(cluster.nodes) if f"n{k}" == leader)
            cluster.kill(victim)  # mid-stream, with no goodbye
            for i in range(100, 200):
                await send(i)  # a retried publish carries the same id: stored once
            state = await _retry(lambda: js.stream_info("FAULT"), what="stream info after the kill")
            assert state.state.messages == 200 and state.cluster.leader != leader
            got: list[str] = []

            async def handle(t: Tick, _d: bus.Delivery) -> None:
                got.append(t.id)

            consumer = await _retry(lambda: bus.subscribe_durable(js, channel, "fault-reader", handle, ack_wait=5.0),
                                    what="a durable on the surviving nodes")
            deadline = time.monotonic() + 30
            while len(got) < 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await consumer.stop()
            assert sorted(got, key=lambda s: int(s[1:])) == [f"t{i}" for i in range(200)]  # none lost, none twice
            cluster.restart(victim)  # it rejoins and catches the stream up
            await _retry(lambda: _replicas_current(js), what="the restarted node back in the stream")
    finally:
        cluster.stop()


async def _replicas_current(js) -> None:
    info = await js.stream_info("FAULT")
    replicas = info.cluster.replicas or []
    assert len(replicas) == 2 and all(r.current for r in replicas), replicas


async def test_the_launcher_runs_a_three_node_cluster_with_replicated_streams_and_revives_a_lost_node(
        tmp_path: Path) -> None:
    # `gpuaware up --nats-cluster 3`: every node recorded, NATS_URL names them all, what a service creates
    # on it is R3 (bus.cluster_replicas) and never made R1 again by a service that asks for R1
    import os
    import signal

    from gpuaware.devstack import StackError, stack_down, stack_health, stack_up
    from gpuaware.devstack.processes import pid_alive
    from gpuaware.schemas.streams import BINDER

    data = tmp_path / "stack"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    with pytest.raises(StackError, match="odd number"):
        stack_up(data, nats_port=0, pg_port=0, env=env, nats_nodes=2)
    stack = stack_up(data, nats_port=0, pg_port=0, env=env, nats_nodes=3)
    try:
        state = stack.state
        assert [n["name"] for n in state.nats_nodes] == ["n0", "n1", "n2"] and not state.nats_external
        assert len(state.nats_url.split(",")) == 3
        async with bus.connected(state.nats_url, name="t", initial_timeout=10) as nc:
            js = nc.jetstream()
            assert bus.cluster_replicas(js) == 3
            info = await _retry(lambda: bus.ensure_stream(js, BINDER), what="create BINDER")  # the spec says R1
            assert info.config.num_replicas == 3
            again = await bus.ensure_stream(js, BINDER)  # ... and asking again does not lower it
            assert again.config.num_replicas == 3
        victim = state.nats_nodes[1]["pid"]
        os.kill(victim, signal.SIGKILL)
        await _retry(lambda: _dead(victim, pid_alive), timeout=10, what="node n1 dead")
        _, alive = stack_health(data)
        assert alive == {"nats-n0": True, "nats-n1": False, "nats-n2": True, "postgres": True}
        revived = stack_up(data, env=env)
        assert revived.restarted == ("nats-n1",)
        assert revived.state.nats_nodes[1]["port"] == state.nats_nodes[1]["port"]  # where it ran
        async with bus.connected(revived.state.nats_url, name="t", initial_timeout=10) as nc:
            js = nc.jetstream()
            info = await _retry(lambda: js.stream_info(BINDER.name), what="BINDER after the revival")
            assert info.config.num_replicas == 3
        assert all(stack_health(data)[1].values())
    finally:
        stopped = stack_down(data)
    assert set(stopped) == {"postgres", "nats-n0", "nats-n1", "nats-n2"}


async def _dead(pid: int, pid_alive) -> None:  # type: ignore[no-untyped-def]  # pid_alive: the function under test, passed in
    if pid_alive(pid):
        raise RuntimeError("still running")
