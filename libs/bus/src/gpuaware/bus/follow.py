"""Following streams in order: the event-sourced views services keep (a ledger, a cluster view).

A durable consumer (consumer.py) shares work between replicas and acknowledges each message; a
*follower* is the opposite: every instance reads every message of some subjects, in stream order,
from a starting point, to rebuild and then keep a view. Examples: placement's allocation ledger from
`binder.pod.>` and `placement.pod.>`, the inventory from `telemetry.node.inventory.v1.>`.

How: an ephemeral pull consumer without acks (`AckPolicy.NONE`, memory storage, removed by the
server after `inactive_threshold` without a client), fetched in batches. The follower remembers the
last stream sequence it handled; if the consumer disappears (server restart, inactivity after a long
disconnect) it creates a new one starting right after it, so nothing is skipped or repeated: the
ordered-consumer idea, pull-based. `caught_up` is set once the messages present when the follower
started have been handled (the consumer reports zero pending), which is how a service knows its
view is complete before it acts on it.

Messages are decoded with the channel whose subject matches (exactly, or as a prefix followed by
routing tokens when `with_suffixes`); undecodable ones are dead-lettered once (by stream sequence)
and skipped, so one bad event never stalls a view. Handlers may be plain functions (cheapest, for
in-memory state) or coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext, api

from gpuaware.bus.codec import Channel, DecodeFailure
from gpuaware.bus.deadletter import DeadLetters

log = logging.getLogger(__name__)

__all__ = ["FollowDelivery", "Follower", "follow", "read_stored"]

_DELIVER = {"all": api.DeliverPolicy.ALL, "new": api.DeliverPolicy.NEW,
            "last_per_subject": api.DeliverPolicy.LAST_PER_SUBJECT}


@dataclass(frozen=True, slots=True)
class FollowDelivery:
    """Where a followed message sits in its stream."""

    subject: str
    stream_seq: int
    pending: int
    """messages after this one in the consumer's view when it was delivered"""
    headers: Mapping[str, str]
    replay: bool
    """True while catching up with what was stored before the follower started"""


FollowHandler = Callable[[Any, FollowDelivery], Awaitable[None] | None]


class Follower:
    """A running follower: `caught_up` (event), `last_seq`, `stats`, `stop()`."""

    def __init__(self, js: JetStreamContext, stream: str, channels: Sequence[Channel[Any]], handler: FollowHandler,
                 *, deliver: str, with_suffixes: bool, batch: int, poll: float, name: str,
                 inactive_threshold: float) -> None:
        if deliver not in _DELIVER:
            raise ValueError(f"deliver must be one of {', '.join(_DELIVER)}")
        self.js = js
        self.stream = stream
        self.channels = tuple(channels)
        self.handler = handler
        self.deliver = deliver
        self.with_suffixes = with_suffixes
        self.batch = batch
        self.poll = poll
        self.name = name
        self.inactive_threshold = inactive_threshold
        self.last_seq = 0
        self.caught_up = asyncio.Event()
        self.stats = {"handled": 0, "decode_errors": 0, "handler_errors": 0, "resubscribed": 0}
        self._exact = {c.subject: c for c in self.channels}
        self._subjects: list[str] = []
        for c in self.channels:
            self._subjects.append(c.subject)
            if with_suffixes:
                self._subjects.append(c.subject + ".>")
        self._psub: Any = None
        self._consumer = ""
        self._floor = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._dead_letters = DeadLetters(js._nc, js)

    def _channel_for(self, subject: str) -> Channel[Any] | None:
        ch = self._exact.get(subject)
        if ch is not None or not self.with_suffixes:
            return ch
        for c in self.channels:
            if subject.startswith(c.subject + "."):
                return c
        return None

    async def _subscribe(self) -> None:
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
        self._consumer = f"{self.name}-{uuid.uuid4().hex[:10]}"
        config = api.ConsumerConfig(
            name=self._consumer, ack_policy=api.AckPolicy.NONE, mem_storage=True, num_replicas=1,
            inactive_threshold=self.inactive_threshold, filter_subjects=list(self._subjects),
            max_ack_pending=-1)
        if self.last_seq > 0:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self.last_seq + 1
        else:
            config.deliver_policy = _DELIVER[self.deliver]
        info = await self.js.add_consumer(self.stream, config)
        # where the consumer starts: a "new" or "last per subject" consumer may begin past seq 0
        self._floor = max(self._floor, info.delivered.stream_seq if info.delivered is not None else 0)
        if info.num_pending == 0 and not self.caught_up.is_set():
            self.caught_up.set()
        self._psub = await self.js.pull_subscribe_bind(consumer=self._consumer, stream=self.stream)

    async def _start(self) -> None:
        await self._subscribe()
        self._task = asyncio.create_task(self._run(), name=f"follow {self.stream}/{self.name}")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def sync(self, timeout: float = 5.0, interval: float = 0.01) -> bool:
        """Wait until everything stored so far on the followed subjects has been handled (e.g. before
        acting on the view after taking over). False when `timeout` passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                info = await self.js.consumer_info(self.stream, self._consumer)
                delivered = info.delivered.stream_seq if info.delivered is not None else 0
                if not info.num_pending and max(self.last_seq, self._floor) >= (delivered or 0):
                    return True
            except Exception as exc:  # the consumer is being recreated: try again
                log.debug("follower %s/%s: sync check failed (%s)", self.stream, self.name, exc)
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(self.stream, self._consumer)

    async def _run(self) -> None:
        failures = 0
        nc = self.js._nc
        while not self._stopping.is_set():
            if nc.is_closed:
                return
            try:
                msgs = await self._psub.fetch(self.batch, timeout=self.poll)
            except (TimeoutError, NatsTimeoutError):
                continue
            except ConnectionClosedError:
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.warning("follower %s/%s: fetch failed (%s: %s); resubscribing after seq %d",
                            self.stream, self.name, type(exc).__name__, exc, self.last_seq)
                await asyncio.sleep(min(5.0, 0.1 * 2 ** min(failures, 6)))
                with contextlib.suppress(Exception):
                    await self._subscribe()
                    self.stats["resubscribed"] += 1
                continue
            failures = 0
            for msg in msgs:
                await self._handle(msg)

    async def _handle(self, msg: Any) -> None:
        meta = msg.metadata
        seq = meta.sequence.stream
        if seq <= self.last_seq:
            return  # a resubscribe overlapped: already handled
        self.last_seq = seq
        pending = meta.num_pending
        replay = not self.caught_up.is_set()
        if replay and pending == 0:
            self.caught_up.set()
        channel = self._channel_for(msg.subject)
        if channel is None:
            return
        try:
            value = channel.decode(msg.data)
        except DecodeFailure as exc:
            self.stats["decode_errors"] += 1
            with contextlib.suppress(Exception):
                await self._dead_letters.send(subject=msg.subject, payload=msg.data, headers=msg.headers,
                                              reason=f"decode error: {exc}", consumer=f"follow:{self.name}",
                                              attempts=1, dedupe_id=f"follow:{self.name}/{self.stream}/{seq}")
            return
        delivery = FollowDelivery(msg.subject, seq, pending, msg.headers or {}, replay)
        try:
            result = self.handler(value, delivery)
            if inspect.isawaitable(result):
                await result
            self.stats["handled"] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats["handler_errors"] += 1
            log.exception("follower %s/%s: handler failed on %s seq %d (skipped)", self.stream, self.name,
                          msg.subject, seq)


async def follow(js: JetStreamContext, channels: Sequence[Channel[Any]], handler: FollowHandler, *,
                 stream: str | None = None, deliver: str = "all", with_suffixes: bool = False,
                 batch: int = 256, poll: float = 1.0, name: str = "follow",
                 inactive_threshold: float = 60.0) -> Follower:
    """Follow `channels` (subjects of one stream) in order, calling `handler(msg, delivery)`.

    `deliver` is where to start: "all" (replay the stream), "last_per_subject" (the latest message
    of each subject, e.g. one inventory per node) or "new". `with_suffixes` also follows
    `<subject>.>` (routing tokens such as `.<cluster>.<node>`).
    """
    if not channels:
        raise ValueError("follow needs at least one channel")
    if stream is None:
        stream = await js.find_stream_name_by_subject(channels[0].subject)
    follower = Follower(js, stream, channels, handler, deliver=deliver, with_suffixes=with_suffixes,
                        batch=batch, poll=poll, name=name, inactive_threshold=inactive_threshold)
    await follower._start()
    return follower


async def read_stored(js: JetStreamContext, channel: Channel[Any], stream: str, seq: int) -> Any:
    """The message stored at `seq` of `stream`, decoded with `channel` (e.g. the original behind a
    duplicate PubAck, which names the sequence of the copy the stream kept)."""
    raw = await js.get_msg(stream, seq)
    return channel.decode(raw.data or b"")
