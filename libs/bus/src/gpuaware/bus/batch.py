"""Batch consumers: one handler call per pulled batch instead of one per message.

`subscribe_durable` pays, per message, a task (with `concurrency`), a handler call, a span and an
await for its result; at a collector's rate (hundreds of thousands of rows a second) that overhead,
not the database, is the limit. Here the handler takes the whole batch:

    failures = await handler(values, deliveries)   # the batch's decodable members, in stream order

and returns ``None`` when every member succeeded, or ``{index: exception}`` for the members that did
not; each such exception has its usual meaning (consumer.py: ``PermanentError`` dead-letters the member,
``TransientError`` naks it with its delay, anything else retries with backoff), and only those members
are affected: the good members of a batch are acknowledged, never redelivered because of a bad one.
A handler that *raises* gives every member of the batch that fate.

What stays as with the per-message API: at-least-once (a member is acked only after the handler
returned for it), undecodable or schema-violating members dead-lettered with the reason before the
handler sees the batch (it never does for them), the deduper (members already handled are acked and
skipped), redelivery counts in each `Delivery`, flow control through `batch` and `max_ack_pending`.
Acks are sent without waiting for each other (one flush per batch, on the connection's next write).

`concurrency` batches are handled at once (the next is pulled while earlier ones wait, e.g. for a
COPY to commit); 1 keeps the stream's order across batches. Tracing: one span per batch, linked to
each member's producer span (only when an OpenTelemetry SDK is installed; otherwise nothing is done).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar, Unpack, cast

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from gpuaware.bus import tracing
from gpuaware.bus.codec import Channel
from gpuaware.bus.consumer import SETTLED, ConsumerOptions, Delivery, DurableConsumer, start_consumer

log = logging.getLogger(__name__)

__all__ = ["BatchConsumer", "BatchHandler", "subscribe_batched"]

T = TypeVar("T")

BatchHandler = Callable[[Sequence[T], Sequence[Delivery]], Awaitable[Mapping[int, Exception] | None]]


class BatchConsumer(DurableConsumer[T]):
    """A `DurableConsumer` whose handler takes each pulled batch at once (module docstring)."""

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        if self._stopping.is_set():
            await self._give_back(msgs)
            return
        if self._concurrency <= 1:
            await self._guarded(msgs)
            return
        await self._in_background(self._guarded(msgs), limit=self._concurrency, name=f"batch {self._name}")

    async def _guarded(self, msgs: list[Msg]) -> None:
        try:
            await self._process(msgs)
        except Exception:  # not a cancellation (a BaseException): those stay unacked and come back
            log.exception("consumer %s: could not settle a batch", self._name)

    async def _process(self, msgs: list[Msg]) -> None:
        values: list[T] = []
        deliveries: list[Delivery] = []
        kept: list[Msg] = []
        for msg in msgs:
            delivery = self._received(msg)
            value = await self._decoded(msg, delivery)
            if value is SETTLED:
                continue
            values.append(value)
            deliveries.append(delivery)
            kept.append(msg)
        if not kept:
            return
        with tracing.receive_batch_span(self._name, [d.headers for d in deliveries]):
            try:
                failures = await cast(BatchHandler[T], self.handler)(values, deliveries)
            except Exception as exc:  # the whole batch shares the fate
                failures = dict.fromkeys(range(len(kept)), exc)
        failures = failures or {}
        for i, (msg, delivery) in enumerate(zip(kept, deliveries, strict=True)):
            error = failures.get(i)
            if error is not None:
                await self._settle_error(msg, delivery, error)
                continue
            await self._settle_ok(msg, delivery)


async def subscribe_batched(js: JetStreamContext, channel: Channel[T], durable: str, handler: BatchHandler[T], *,
                            batch: int = 256, concurrency: int = 1,
                            **options: Unpack[ConsumerOptions]) -> BatchConsumer[T]:
    """Like `subscribe_durable`, with a handler that takes each batch at once (module docstring)."""
    return await start_consumer(BatchConsumer, js, channel, durable, handler, batch=batch,
                                concurrency=concurrency, **options)
