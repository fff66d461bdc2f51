"""NATS restarts: the client reconnects by itself and JetStream keeps what was published."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from bus_helpers import Sample
from service_runner import eventually

from gpuaware import bus
from gpuaware.devstack import start_nats

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


class OwnServer:
    """A nats-server of the test's own, which the test may restart (same port, same data)."""

    def __init__(self, path: Path) -> None:
        self.server = start_nats(path)

    @property
    def url(self) -> str:
        return self.server.url

    async def restart(self) -> None:
        self.server = await asyncio.to_thread(self.server.restart)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[OwnServer]:
    own = OwnServer(tmp_path / "nats")
    yield own
    own.server.stop()


def quick_reconnect(url: str, name: str) -> AbstractAsyncContextManager[bus.Client]:
    """A client that retries within 0.05-0.5 s, so a restarted server is back in the test's time."""
    return bus.connected(url, name=name, policy=bus.ReconnectPolicy(base=0.05, cap=0.5), initial_timeout=5)


async def test_messages_survive_a_server_restart_and_the_client_reconnects(own_server: OwnServer) -> None:
    async with quick_reconnect(own_server.url, "restart-test") as nc:
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

            await own_server.restart()
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


async def test_a_publish_unacknowledged_across_a_reconnect_fails_at_once_not_after_the_ack_timeout(
        own_server: OwnServer) -> None:
    """A cluster node dies with pipelined publishes in flight: their replies were to come through it.
    Each such future fails soon after the reconnect (the caller resends; its msg id dedupes), not
    after the 30-s ack timeout, which stalled the placement loop's pipeline in the cluster drill."""
    async with quick_reconnect(own_server.url, "reconnect-ack-test") as nc:
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

        await own_server.restart()
        restarted = asyncio.get_running_loop().time()
        for fut in stranded:
            with pytest.raises(ConnectionError, match="re-established"):
                await asyncio.wait_for(fut, 10)
        assert asyncio.get_running_loop().time() - restarted < 10  # the ack timeout is 30 s

        stored = bus.Channel("acks.stored", Sample, id_of=lambda s: s.id)
        ack = await asyncio.wait_for(await bus.publish_async(js, stored, Sample(id="a", gpu="g", util=1.0)), 10)
        assert (ack.stream, ack.seq, ack.duplicate) == ("ACKS", 1, False)


async def test_initial_connect_gives_up_after_initial_timeout() -> None:
    from gpuaware.devstack import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    # the client gives up by itself (its initial timeout), with TimeoutError, instead of retrying for
    # ever; the 30-s bound only keeps a broken client from hanging the suite
    attempt = asyncio.ensure_future(bus.connect(url, name="nobody-home", initial_timeout=0.5))
    done, _ = await asyncio.wait({attempt}, timeout=30)
    if not done:
        attempt.cancel()
        raise AssertionError("the connect attempt never gave up")
    assert isinstance(attempt.exception(), TimeoutError), attempt.exception()
