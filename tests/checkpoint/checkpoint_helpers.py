"""Checkpoint tests' side of the handshake: requests published as the binder publishes them, and the
workload's acknowledgements collected where the binder reads them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable

import msgspec
from nats.aio.msg import Msg
from service_runner import streams_ready

from gpuaware import bus
from gpuaware.schemas import CheckpointAcknowledged, CheckpointRequested
from gpuaware.schemas.checkpoint import CHECKPOINT_ACKNOWLEDGED, CHECKPOINT_REQUESTED

REQUESTED = bus.Channel(CHECKPOINT_REQUESTED, CheckpointRequested)


def request(pod: str, rid: str, deadline_s: float = 30.0, *, world_size: int | None = None) -> CheckpointRequested:
    """The binder's request to ``pod``: a resize to ``world_size`` workers where given, else a preemption."""
    now = time.time()
    return CheckpointRequested(source="binder/test", emitted_at=now, cluster="c1", request_id=rid, pod_uid=pod,
                               pod_name=pod, namespace="ns", node="n1",
                               reason="preemption" if world_size is None else "resize",
                               deadline_s=deadline_s, requested_at=now, world_size=world_size)


class Acks:
    """The acknowledgements published on the checkpoint subjects, with an event set by the first."""

    def __init__(self) -> None:
        self.received: list[CheckpointAcknowledged] = []
        self.arrived = asyncio.Event()

    async def on(self, msg: Msg) -> None:
        self.received.append(msgspec.json.decode(msg.data, type=CheckpointAcknowledged))
        self.arrived.set()


@contextlib.asynccontextmanager
async def watching_acks(nats_url: str) -> AsyncIterator[tuple[bus.JetStream, Acks]]:
    """A connection with every stream in place and the acknowledgements collected."""
    acks = Acks()
    async with streams_ready(nats_url, name="binder-test") as nc:
        js = nc.jetstream()
        await nc.subscribe(f"{CHECKPOINT_ACKNOWLEDGED}", cb=acks.on)
        await nc.subscribe(f"{CHECKPOINT_ACKNOWLEDGED}.>", cb=acks.on)
        await nc.flush()
        yield js, acks


async def publish_until(js: bus.JetStream, req: CheckpointRequested, done: Awaitable[object], *,
                        tries: int = 5, wait_s: float = 2.0) -> None:
    """Publish the binder's request again until ``done`` (the client saw it) completes.

    The client listens on core NATS, which delivers at most once: a request published moments after
    the client subscribed (and flushed) was now and then not delivered to it by the server, though
    stored by JetStream and seen by other subscribers. The binder repeats its request until answered
    for that reason; a test standing in for the binder does the same."""
    waiting = asyncio.ensure_future(done)
    try:
        for _ in range(tries):
            await bus.publish(js, REQUESTED.at(req.cluster, req.node), req)
            finished, _ = await asyncio.wait({waiting}, timeout=wait_s)
            if finished:
                return
        raise AssertionError(f"the client never saw request {req.request_id} ({tries} tries)")
    finally:
        if not waiting.done():
            waiting.cancel()
