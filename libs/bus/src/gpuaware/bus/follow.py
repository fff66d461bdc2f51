"""Following streams in order: the event-sourced views services keep (a ledger, a cluster view).

A durable consumer (consumer.py) shares work between replicas and acknowledges each message; a
*follower* is the opposite: every instance reads every message of some subjects, in stream order,
from a starting point, to rebuild and then keep a view. Examples: placement's allocation ledger from
`binder.pod.>` and `placement.pod.>`, the inventory from `telemetry.node.inventory.v1.>`.

How: a JetStream *ordered consumer* (ephemeral, push, no acks, memory storage, flow control and
idle heartbeats; removed by the server after `inactive_threshold` without a client). The client
checks every delivery's sequence; on a gap, a stall or a lost consumer it recreates the consumer
from the last stream sequence handled, so nothing is skipped or repeated. Push rather than pull
because a view follows every message of busy subjects (each pod's decision, binding and finish):
a pull `fetch` costs a request and a timer task per message in nats-py, a push delivery neither.
`caught_up` is set once the messages present when the follower started have been handled (the
consumer reports zero pending), which is how a service knows its view is complete before it acts
on it; `sync()` waits for everything stored until now.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from nats.js import JetStreamContext, api

from gpuaware.bus.codec import Channel, DecodeFailure
from gpuaware.bus.deadletter import DeadLetters
from gpuaware.bus.headers import MSG_ID
from gpuaware.bus.position import position

log = logging.getLogger(__name__)

__all__ = ["FollowDelivery", "Follower", "follow", "read_stored"]

_DELIVER = {"all": api.DeliverPolicy.ALL, "new": api.DeliverPolicy.NEW,
            "last_per_subject": api.DeliverPolicy.LAST_PER_SUBJECT}


class FollowDelivery(NamedTuple):
    """Where a followed message sits in its stream (a tuple: one is made for every followed message)."""

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
                 *, deliver: str, with_suffixes: bool, name: str, inactive_threshold: float,
                 heartbeat: float = 2.0, skip: Callable[[str | None], bool] | None = None) -> None:
        if deliver not in _DELIVER:
            raise ValueError(f"deliver must be one of {', '.join(_DELIVER)}")
        self.js = js
        self.stream = stream
        self.channels = tuple(channels)
        self.handler = handler
        self.deliver = deliver
        self.with_suffixes = with_suffixes
        self.name = name
        self.inactive_threshold = inactive_threshold
        self.heartbeat = heartbeat
        self.skip = skip
        self.yield_every = 32
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
        self._since_yield = 0
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
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, mem_storage=True, num_replicas=1,
            inactive_threshold=self.inactive_threshold, filter_subjects=list(self._subjects),
            deliver_policy=_DELIVER[self.deliver])
        self._psub = await self.js.subscribe(self._subjects[0], stream=self.stream, cb=self._on_msg,
                                             ordered_consumer=True, config=config,
                                             idle_heartbeat=self.heartbeat)
        info = await self._psub.consumer_info()
        self._consumer = info.name
        if self._done(info):
            self.caught_up.set()  # nothing to replay (what was delivered already sets it in _handle)

    def _done(self, info: api.ConsumerInfo) -> bool:
        """No message left to deliver, and every delivered one handled."""
        if info.num_pending:
            return False
        d = info.delivered
        return d is None or not d.consumer_seq or self.last_seq >= (d.stream_seq or 0)

    async def _start(self) -> None:
        await self._subscribe()

    @property
    def running(self) -> bool:
        return self._psub is not None and not self._stopping.is_set()

    async def sync(self, timeout: float = 5.0, interval: float = 0.01) -> bool:
        """Wait until everything stored so far on the followed subjects has been handled (e.g. before
        acting on the view after taking over). False when `timeout` passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                if self._done(await self._psub.consumer_info()):  # the current consumer, after any reset
                    return True
            except Exception as exc:  # the consumer is being recreated: try again
                log.debug("follower %s/%s: sync check failed (%s)", self.stream, self.name, exc)
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(interval)

    async def stop(self, *, delete: bool = True) -> None:
        """Stop delivering; ``delete=False`` leaves the consumer to the server, which removes it after
        ``inactive_threshold`` (for users that may not delete consumers on the stream)."""
        self._stopping.set()
        if self._psub is not None:
            with contextlib.suppress(Exception):
                name = (await self._psub.consumer_info()).name
                await self._psub.unsubscribe()
                if delete:
                    await self.js.delete_consumer(self.stream, name)

    async def _on_msg(self, msg: Any) -> None:
        if self._stopping.is_set():
            return
        await self._handle(msg)
        self._since_yield += 1
        if self._since_yield >= self.yield_every:
            # a burst sits in the subscription's queue and plain-function handlers never suspend:
            # give the rest of the service a turn now and then
            self._since_yield = 0
            await asyncio.sleep(0)

    async def _handle(self, msg: Any) -> None:
        at = position(msg)
        seq, pending = at.stream_seq, at.pending
        if seq <= self.last_seq:
            return  # a recreated consumer overlapped: already handled
        self.last_seq = seq
        replay = not self.caught_up.is_set()
        if replay and pending == 0:
            self.caught_up.set()
        channel = self._channel_for(msg.subject)
        if channel is None:
            return
        if self.skip is not None and self.skip((msg.headers or {}).get(MSG_ID)):
            self.stats["skipped"] = self.stats.get("skipped", 0) + 1
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
            if result is not None and inspect.isawaitable(result):
                await result
            self.stats["handled"] += 1
        except Exception:  # a cancellation is a BaseException: it propagates
            self.stats["handler_errors"] += 1
            log.exception("follower %s/%s: handler failed on %s seq %d (skipped)", self.stream, self.name,
                          msg.subject, seq)


async def follow(js: JetStreamContext, channels: Sequence[Channel[Any]], handler: FollowHandler, *,
                 stream: str | None = None, deliver: str = "all", with_suffixes: bool = False,
                 name: str = "follow", inactive_threshold: float = 60.0, heartbeat: float = 2.0,
                 skip: Callable[[str | None], bool] | None = None) -> Follower:
    """Follow `channels` (subjects of one stream) in order, calling `handler(msg, delivery)`.

    `deliver` is where to start: "all" (replay the stream), "last_per_subject" (the latest message
    of each subject, e.g. one inventory per node) or "new". `with_suffixes` also follows
    `<subject>.>` (routing tokens such as `.<cluster>.<node>`). `heartbeat` (seconds) is how soon a
    silent consumer (lost after a server restart) is noticed and recreated. `skip(msg_id)` returning
    True drops a message before decoding (a writer reading back what it already applied).
    """
    if not channels:
        raise ValueError("follow needs at least one channel")
    if stream is None:
        stream = await js.find_stream_name_by_subject(channels[0].subject)
    follower = Follower(js, stream, channels, handler, deliver=deliver, with_suffixes=with_suffixes,
                        name=name, inactive_threshold=inactive_threshold, heartbeat=heartbeat, skip=skip)
    await follower._start()
    return follower


async def read_stored(js: JetStreamContext, channel: Channel[Any], stream: str, seq: int) -> Any:
    """The message stored at `seq` of `stream`, decoded with `channel` (e.g. the original behind a
    duplicate PubAck, which names the sequence of the copy the stream kept)."""
    raw = await js.get_msg(stream, seq)
    return channel.decode(raw.data or b"")
