"""Pipelined durable consumption: decide in order, publish without waiting, ack once stored.

`subscribe_durable` runs a handler per message and acknowledges when it returns, so a handler that
must not ack before its own output is stored (placement: the pending pod is acked only once its
decision is in the PLACEMENT stream) has to wait for a PubAck per message: one round trip each,
or a task per message to overlap them. Here the handler is split in two:

    completion = await handler(msg, delivery)   # in stream order, one at a time: decide, *send*
    ...                                         # (the rest of the batch is handled the same way)
    await completion                            # then, per message: stored? -> ack / nak / term

so a batch of N pulled messages costs N in-order handler calls, N pipelined publishes and one wait
for the slowest PubAck. The handler returns None when there is nothing to wait for. Errors keep
their meaning (consumer.py): raised by the handler or by the completion, `TransientError` naks with
its delay (dead letter on the last delivery), `PermanentError` dead-letters, anything else retries
with backoff. Each message is still handled inside its own span continuing the producer's trace.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Unpack, cast

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from gpuaware.bus.codec import Channel
from gpuaware.bus.consumer import SETTLED, ConsumerOptions, Delivery, DurableConsumer, _fail, start_consumer

log = logging.getLogger(__name__)

__all__ = ["PipelinedConsumer", "PipelinedHandler", "subscribe_pipelined"]

T = TypeVar("T")

PipelinedHandler = Callable[[T, Delivery], Awaitable[Awaitable[Any] | None]]


class PipelinedConsumer(DurableConsumer[T]):
    """A `DurableConsumer` whose handler returns a completion to await after the whole batch.

    The completions of a batch are settled in the background while the next batch is pulled and
    handled (at most `max_inflight_batches` batches unsettled at once), so waiting for the stream's
    acknowledgements never leaves the consumer idle.
    """

    max_inflight_batches = 4

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        pending: list[tuple[Msg, Delivery, Awaitable[Any]]] = []
        for i, msg in enumerate(msgs):
            if self._stopping.is_set():
                await self._give_back(msgs[i:])
                break
            try:
                got = await self._start_one(msg)
            except Exception:
                log.exception("consumer %s: could not settle a message", self._name)
                continue
            if got is not None:
                pending.append(got)
        if not pending:
            return
        await self._in_background(self._settle_batch(pending), limit=self.max_inflight_batches,
                                  name=f"settle {self._name}")

    async def _settle_batch(self, pending: list[tuple[Msg, Delivery, Awaitable[Any]]]) -> None:
        for msg, delivery, completion in pending:
            try:
                await self._finish(msg, delivery, completion)
            except Exception:
                log.exception("consumer %s: could not settle a message", self._name)

    async def _start_one(self, msg: Msg) -> tuple[Msg, Delivery, Awaitable[Any]] | None:
        delivery = self._received(msg)
        with self._receive_span(msg, delivery) as span:
            value = await self._decoded(msg, delivery, span)
            if value is SETTLED:
                return None
            try:
                completion = await cast(PipelinedHandler[T], self.handler)(value, delivery)
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    raise
                _fail(span, exc)
                await self._settle_error(msg, delivery, exc)
                return None
        if completion is None:
            await self._settle_ok(msg, delivery)
            return None
        return msg, delivery, completion

    async def _finish(self, msg: Msg, delivery: Delivery, completion: Awaitable[Any]) -> None:
        try:
            await completion
        except Exception as exc:
            await self._settle_error(msg, delivery, exc)
            return
        await self._settle_ok(msg, delivery)



async def subscribe_pipelined(js: JetStreamContext, channel: Channel[T], durable: str,
                              handler: PipelinedHandler[T], *, batch: int = 128,
                              **options: Unpack[ConsumerOptions]) -> PipelinedConsumer[T]:
    """Like `subscribe_durable`, with a two-step handler (see the module docstring)."""
    return await start_consumer(PipelinedConsumer, js, channel, durable, handler, batch=batch, concurrency=1,
                                **options)
