"""Durable consumers: plain typed handlers, errors that decide the message's fate.

A handler is `async def handle(msg: T, ctx: Delivery) -> None` and knows nothing of NATS. This
module pulls batches from a durable pull consumer, decodes each message with the channel's codec,
runs the handler inside a span continuing the producer's trace, and turns the outcome into the
JetStream acknowledgement:

    handler returns                   -> ack
    TransientError(reason, delay)     -> nak(delay); on the consumer's last delivery: dead letter + term
    any other exception (a bug)       -> like TransientError with the retry policy's backoff, logged
    PermanentError(reason)            -> dead letter + term
    undecodable / schema-violating    -> dead letter (raw bytes intact) + term; the consumer goes on
    consumer crashes before the ack   -> the server redelivers after ack_wait to any replica

Why pull and batches: replicas on one durable share the work without a queue group, each asks for
what it can handle (back-pressure for free), and a batch amortises the round trip at high rates.
Messages are handled in order one at a time unless `concurrency` > 1. On `stop()`, messages not
yet started are nak'd so another replica takes them now rather than after ack_wait; a pull
request still open at that moment may strand up to `batch` messages until their ack_wait expires
(nats-py cannot cancel a pull request), so keep `ack_wait` modest for latency-sensitive streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from opentelemetry.trace import Span, Status, StatusCode

from gpuaware.bus import tracing
from gpuaware.bus.codec import Channel, DecodeFailure
from gpuaware.bus.deadletter import DeadLetters
from gpuaware.bus.dedupe import Deduper
from gpuaware.bus.errors import PermanentError, TransientError
from gpuaware.bus.headers import MSG_ID
from gpuaware.bus.jetstream import ConsumerSpec, ensure_consumer
from gpuaware.bus.position import position
from gpuaware.bus.pull import Puller
from gpuaware.bus.retry import RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C", bound="DurableConsumer[Any]")


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a handler may know about the message it handles (never the NATS message itself)."""

    subject: str
    stream: str
    consumer: str
    stream_seq: int
    attempt: int
    """1 on the first delivery, 2 on the first redelivery, ..."""
    max_deliver: int
    """deliveries allowed by the consumer (<= 0: unlimited)"""
    msg_id: str | None
    headers: Mapping[str, str]
    _msg: Msg | None = field(default=None, repr=False, compare=False)

    @property
    def redelivered(self) -> bool:
        return self.attempt > 1

    @property
    def last_attempt(self) -> bool:
        return 0 < self.max_deliver <= self.attempt

    async def in_progress(self) -> None:
        """Tell the server the handler is still working: resets this message's ack_wait timer."""
        if self._msg is not None:
            await self._msg.in_progress()


Handler = Callable[[T, Delivery], Awaitable[None]]


class Settled(enum.Enum):
    """A message the consumer settled itself before any handler saw it."""

    HERE = enum.auto()


SETTLED = Settled.HERE


@dataclass(slots=True)
class ConsumerStats:
    """Counters of one running consumer (monotonic, since start)."""

    received: int = 0
    processed: int = 0
    """handler returned, message acked"""
    failed: int = 0
    """handler raised (every attempt counts)"""
    retried: int = 0
    """nak'd for redelivery after a failure"""
    dead_lettered: int = 0
    decode_errors: int = 0
    """undecodable or schema-violating (also counted in dead_lettered)"""
    duplicates: int = 0
    """skipped because the deduper had seen the message id"""
    pending: int = 0
    """messages still waiting for this consumer after the last one delivered (the server's count in
    that message's metadata): its lag"""


def _client_of(js: JetStreamContext) -> Client:
    # nats-py exposes no public accessor for the connection behind a JetStream context
    return js._nc


class DurableConsumer(Generic[T]):
    """A running durable subscription: `stats`, `stop()`, usable as an async context manager."""

    def __init__(self, js: JetStreamContext, channel: Channel[T], handler: Handler[T], *, stream: str,
                 spec: ConsumerSpec, manage: bool, batch: int, poll: float, concurrency: int,
                 retry: RetryPolicy, deduper: Deduper | None) -> None:
        self.js = js
        self.nc = _client_of(js)
        self.channel = channel
        self.handler = handler
        self.stream = stream
        self.spec = spec
        self.durable = spec.durable
        self.max_deliver = spec.max_deliver
        self.stats = ConsumerStats()
        self._manage = manage
        self._batch = batch
        self._poll = poll
        self._concurrency = concurrency
        self._retry = retry
        self._deduper = deduper
        self._puller: Puller | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        """batches handled while the next is pulled (batch and pipelined consumers); `stop` waits for them"""
        self._name = f"{stream}/{spec.durable}"
        self._dead_letters = DeadLetters(self.nc, js)

    async def _start(self) -> None:
        if self._manage:
            info = await ensure_consumer(self.js, self.stream, self.spec)
        else:
            info = await self.js.consumer_info(self.stream, self.durable)
        self.max_deliver = info.config.max_deliver or -1
        self._puller = await Puller(self.nc, self.stream, self.durable, api_prefix=self.js._prefix).start()
        self._task = asyncio.create_task(self._run(), name=f"consumer {self._name}")
        self._task.add_done_callback(self._report_end)

    def _report_end(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            log.warning("consumer %s: cancelled; unacked messages return after ack_wait", self._name)
        elif (exc := task.exception()) is not None:
            log.error("consumer %s: stopped by %s: %s", self._name, type(exc).__name__, exc, exc_info=exc)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Finish the message in hand, give back the rest of the batch, unsubscribe, then wait for the
        batches still handled in the background."""
        self._stopping.set()
        if self._puller is not None:
            self._puller.interrupt()  # a fetch waiting for messages returns now
        if self._task is not None:
            await asyncio.wait([self._task])  # an abnormal end was already logged by _report_end
        if self._background:
            await asyncio.wait(self._background)

    async def _in_background(self, work: Coroutine[Any, Any, None], *, limit: int, name: str) -> None:
        """Run ``work`` as a task once fewer than ``limit`` are running, so the next batch can be pulled."""
        while len(self._background) >= limit:
            await asyncio.wait(self._background, return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def __aenter__(self) -> DurableConsumer[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        failures = 0
        puller = self._puller
        assert puller is not None
        try:
            while not self._stopping.is_set():
                if self.nc.is_closed:
                    log.warning("consumer %s: connection closed, stopping", self._name)
                    break
                try:  # `stop()` wakes a waiting fetch: no task around it to cancel
                    msgs = await puller.fetch(self._batch, timeout=self._poll)
                except (TimeoutError, NatsTimeoutError):
                    continue  # nothing to do within `poll`, or a fetch lost in a reconnect
                except ConnectionClosedError:
                    break
                except Exception as exc:
                    failures += 1
                    log.warning("consumer %s: fetch failed (%s: %s)", self._name, type(exc).__name__, exc)
                    await self._recover(failures)
                    continue
                failures = 0
                await self._handle_batch(msgs)
        finally:
            await self._unsubscribe()

    async def _recover(self, failures: int) -> None:
        """After a fetch error (consumer deleted, server restarting): wait, then re-declare."""
        await asyncio.sleep(min(5.0, 0.1 * 2**failures))
        if self._manage and self.nc.is_connected:
            try:
                await ensure_consumer(self.js, self.stream, self.spec)
            except Exception as exc:
                log.warning("consumer %s: cannot re-declare (%s)", self._name, exc)

    async def _unsubscribe(self) -> None:
        if self.nc.is_closed or self._puller is None:
            return
        with contextlib.suppress(Exception):
            await self._give_back(self._puller.take_buffered())  # delivered, never handled: another takes them now
            await self._puller.stop()
            await self.nc.flush(timeout=2)  # acks/naks of the last batch leave before we return

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        if self._concurrency <= 1:
            for i, msg in enumerate(msgs):
                if self._stopping.is_set():
                    await self._give_back(msgs[i:])
                    return
                await self._handle(msg)
            return
        limit = asyncio.Semaphore(self._concurrency)

        async def one(msg: Msg) -> None:
            async with limit:
                if self._stopping.is_set():
                    await self._give_back([msg])
                else:
                    await self._handle(msg)

        async with asyncio.TaskGroup() as tg:
            for msg in msgs:
                tg.create_task(one(msg))

    async def _give_back(self, msgs: list[Msg]) -> None:
        for msg in msgs:
            with contextlib.suppress(Exception):
                await msg.nak()

    async def _handle(self, msg: Msg) -> None:
        try:
            await self._handle_unguarded(msg)
        except Exception:
            # only ack/nak/dead-letter I/O gets here (handler errors are dispositions); the server
            # redelivers the unacked message after ack_wait, as it does one cancelled mid-way
            log.exception("consumer %s: could not settle a message", self._name)

    def _received(self, msg: Msg) -> Delivery:
        """Count a message in and read what its handler may know of it."""
        self.stats.received += 1
        at = position(msg)
        self.stats.pending = at.pending
        headers = msg.headers or {}
        return Delivery(subject=msg.subject, stream=at.stream, consumer=at.consumer, stream_seq=at.stream_seq,
                        attempt=at.delivered, max_deliver=self.max_deliver, msg_id=headers.get(MSG_ID),
                        headers=headers, _msg=msg)

    def _receive_span(self, msg: Msg, delivery: Delivery) -> contextlib.AbstractContextManager[Span]:
        """The span handling one message runs in, continuing the producer's trace."""
        return tracing.receive_span(msg.subject, delivery.headers, attributes={
            "messaging.consumer.group.name": self.durable,
            "messaging.message.id": delivery.msg_id or "",
            "messaging.nats.delivery_attempt": delivery.attempt,
        })

    async def _decoded(self, msg: Msg, delivery: Delivery, span: Span | None = None) -> T | Settled:
        """The message's value for the handler, or ``SETTLED`` when it was settled here: undecodable
        (dead-lettered with the reason, the raw bytes intact) or a duplicate the deduper has seen (acked)."""
        try:
            value = self.channel.decode_on(msg.subject, msg.data)
        except DecodeFailure as exc:
            self.stats.decode_errors += 1
            if span is not None:
                _fail(span, exc)
            await self._dead_letter(msg, delivery, f"decode error: {exc}")
            return SETTLED
        if self._deduper is not None and delivery.msg_id and self._deduper.seen(delivery.msg_id):
            self.stats.duplicates += 1
            await msg.ack()
            return SETTLED
        return value

    async def _handle_unguarded(self, msg: Msg) -> None:
        delivery = self._received(msg)
        with self._receive_span(msg, delivery) as span:
            value = await self._decoded(msg, delivery, span)
            if value is SETTLED:
                return
            try:
                await self.handler(value, delivery)
            except Exception as exc:
                _fail(span, exc)
                await self._settle_error(msg, delivery, exc)
            else:
                await self._settle_ok(msg, delivery)

    async def _settle_ok(self, msg: Msg, delivery: Delivery) -> None:
        """The handler succeeded: remember the message id (if deduplicating) and ack."""
        if self._deduper is not None and delivery.msg_id:
            self._deduper.remember(delivery.msg_id)
        await msg.ack()
        self.stats.processed += 1

    async def _settle_error(self, msg: Msg, delivery: Delivery, exc: Exception) -> None:
        """A handler's error as the message's fate (the module docstring's table)."""
        self.stats.failed += 1
        if isinstance(exc, PermanentError):
            await self._dead_letter(msg, delivery, f"permanent: {exc.reason}")
        elif isinstance(exc, TransientError):
            await self._retry_later(msg, delivery, exc.reason, exc.delay)
        else:
            log.error("consumer %s: handler failed on %s seq %d (attempt %d): %s: %s", self._name, msg.subject,
                      delivery.stream_seq, delivery.attempt, type(exc).__name__, exc, exc_info=exc)
            await self._retry_later(msg, delivery, f"{type(exc).__name__}: {exc}", None)

    async def _retry_later(self, msg: Msg, delivery: Delivery, reason: str, delay: float | None) -> None:
        if delivery.last_attempt:
            await self._dead_letter(msg, delivery, f"gave up after {delivery.attempt} attempts: {reason}")
            return
        wait = self._retry.delay(delivery.attempt) if delay is None else delay
        log.info("consumer %s: retrying %s seq %d in %.3gs (attempt %d): %s", self._name, msg.subject,
                 delivery.stream_seq, wait, delivery.attempt, reason)
        await msg.nak(delay=wait)
        self.stats.retried += 1

    async def _dead_letter(self, msg: Msg, delivery: Delivery, reason: str) -> None:
        try:
            await self._dead_letters.send(subject=msg.subject, payload=msg.data,
                                   headers=msg.headers, reason=reason, consumer=self._name,
                                   attempts=delivery.attempt,
                                   dedupe_id=f"{self._name}/{delivery.stream_seq}")
        except Exception as exc:
            # never drop it: leave it in the stream, try again later
            log.error("consumer %s: dead letter for seq %d failed (%s); message kept for retry",
                      self._name, delivery.stream_seq, exc)
            await msg.nak(delay=self._retry.delay(delivery.attempt))
            return
        await msg.term()
        self.stats.dead_lettered += 1


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc)))


class ConsumerOptions(TypedDict, total=False):
    """The keyword arguments every ``subscribe_*`` function takes (defaults: ``start_consumer``'s)."""

    stream: str | None
    ack_wait: float
    max_deliver: int
    backoff: tuple[float, ...]
    max_ack_pending: int
    deliver_policy: str
    manage: bool
    poll: float
    retry: RetryPolicy | None
    deduper: Deduper | None


async def subscribe_durable(js: JetStreamContext, channel: Channel[T], durable: str, handler: Handler[T], *,
                            batch: int = 32, concurrency: int = 1,
                            **options: Unpack[ConsumerOptions]) -> DurableConsumer[T]:
    """Consume `channel` through the durable pull consumer `durable` and return it running.

    `stream` defaults to the stream capturing the channel's subject. With `manage` the consumer is
    declared (created or updated, filtered on the channel's subject in any version, so another
    version is dead-lettered with the reason, not left unread) from the keyword arguments;
    without it an existing consumer is bound as is. `batch` messages are pulled at a time, waiting
    up to `poll` seconds; `concurrency` handlers run at once (1 keeps the stream's order).
    """
    return await start_consumer(DurableConsumer, js, channel, durable, handler, batch=batch,
                                concurrency=concurrency, **options)


async def start_consumer(cls: type[C], js: JetStreamContext, channel: Channel[Any], durable: str, handler: Any, *,
                         batch: int, concurrency: int, stream: str | None = None, ack_wait: float = 30.0,
                         max_deliver: int = 5, backoff: tuple[float, ...] = (), max_ack_pending: int = 1000,
                         deliver_policy: str = "all", manage: bool = True, poll: float = 1.0,
                         retry: RetryPolicy | None = None, deduper: Deduper | None = None) -> C:
    """Validate, find the stream, declare the consumer spec and start a `cls` consumer: what the
    public `subscribe_*` functions share (they differ in the handler, the consumer class and the
    default batch)."""
    if batch < 1 or concurrency < 1 or poll <= 0:
        raise ValueError("batch and concurrency must be >= 1 and poll > 0")
    if stream is None:
        stream = await js.find_stream_name_by_subject(channel.subject)
    spec = ConsumerSpec(durable=durable, filter_subject=channel.any_version, ack_wait=ack_wait,
                        max_deliver=max_deliver, backoff=tuple(backoff), max_ack_pending=max_ack_pending,
                        deliver_policy=deliver_policy)
    consumer = cls(js, channel, handler, stream=stream, spec=spec, manage=manage, batch=batch, poll=poll,
                   concurrency=concurrency, retry=retry or RetryPolicy(), deduper=deduper)
    await consumer._start()
    return consumer
