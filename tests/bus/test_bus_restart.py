"""NATS restarts: the client reconnects by itself and JetStream keeps what was published."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bus_helpers import Sample, eventually

from gpuaware import bus
from gpuaware.devstack import start_nats

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


async def test_messages_survive_a_server_restart_and_the_client_reconnects(tmp_path: Path) -> None:
    server = start_nats(tmp_path / "nats")
    try:
        policy = bus.ReconnectPolicy(base=0.05, cap=0.5)
        async with bus.connected(server.url, name="restart-test", policy=policy, initial_timeout=5) as nc:
            js = nc.jetstream()
            await bus.ensure_stream(js, bus.SimpleStreamSpec(name="RESTART", subjects=("restart.>",)))
            channel = bus.Channel("restart.sampled.v1", Sample, id_of=lambda s: s.id)
            # a second durable that consumes nothing until after the restart
            await bus.ensure_consumer(js, "RESTART", bus.ConsumerSpec(durable="late", ack_wait=1.0))
            live: list[str] = []

            async def handle(msg: Sample, ctx: bus.Delivery) -> None:
                live.append(msg.id)

            async with await bus.subscribe_durable(js, channel, "live", handle, ack_wait=1.0, poll=0.2) as consumer:
                await bus.publish(js, channel, Sample(id="before", gpu="g", util=1.0))
                await eventually(lambda: live == ["before"], what="message before restart")

                server = await asyncio.to_thread(server.restart)
                await eventually(lambda: nc.stats["reconnects"] >= 1 and nc.is_connected, timeout=10,
                                 what="reconnect")

                await bus.publish(js, channel, Sample(id="after", gpu="g", util=2.0), timeout=5)
                await eventually(lambda: live == ["before", "after"], timeout=10,
                                 what="the same consumer serving after the restart")
                assert consumer.running

            late: list[str] = []

            async def handle_late(msg: Sample, ctx: bus.Delivery) -> None:
                late.append(msg.id)

            async with await bus.subscribe_durable(js, channel, "late", handle_late, ack_wait=1.0):
                await eventually(lambda: late == ["before", "after"], what="stored messages after restart")
    finally:
        server.stop()


async def test_a_publish_unacknowledged_across_a_reconnect_fails_at_once_not_after_the_ack_timeout(
        tmp_path: Path) -> None:
    """A cluster node dies with pipelined publishes in flight: their replies were to come through it.
    Each such future fails soon after the reconnect (the caller resends; its msg id dedupes), not
    after the 30-s ack timeout, which stalled the placement loop's pipeline in the cluster drill."""
    server = start_nats(tmp_path / "nats")
    try:
        policy = bus.ReconnectPolicy(base=0.05, cap=0.5)
        async with bus.connected(server.url, name="reconnect-ack-test", policy=policy, initial_timeout=5) as nc:
            js = nc.jetstream()
            await bus.ensure_stream(js, bus.SimpleStreamSpec(name="ACKS", subjects=("acks.stored",)))
            silent = bus.Channel("acks.silent", Sample, id_of=lambda s: s.id)  # heard, never answered

            async def ignore(_msg: object) -> None:  # read, so that closing drains at once
                return None

            await nc.subscribe(silent.subject, cb=ignore)
            await nc.flush()
            stranded = [await bus.publish_async(js, silent, Sample(id=f"s{i}", gpu="g", util=1.0))
                        for i in range(3)]
            await asyncio.sleep(0.2)
            assert not any(f.done() for f in stranded)

            server = await asyncio.to_thread(server.restart)
            restarted = asyncio.get_running_loop().time()
            for fut in stranded:
                with pytest.raises(ConnectionError, match="re-established"):
                    await asyncio.wait_for(fut, 10)
            assert asyncio.get_running_loop().time() - restarted < 10  # the ack timeout is 30 s

            stored = bus.Channel("acks.stored", Sample, id_of=lambda s: s.id)
            ack = await asyncio.wait_for(await bus.publish_async(js, stored, Sample(id="a", gpu="g", util=1.0)), 10)
            assert (ack.stream, ack.seq, ack.duplicate) == ("ACKS", 1, False)
    finally:
        server.stop()


async def test_initial_connect_gives_up_after_initial_timeout() -> None:
    from gpuaware.devstack import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await bus.connect(url, name="nobody-home", initial_timeout=0.5)
    except TimeoutError:
        pass
    else:
        raise AssertionError("connected to a closed port")
    assert loop.time() - started < 2.0
