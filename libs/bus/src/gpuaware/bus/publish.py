"""Typed publishing: JetStream for what must not be lost, core NATS for high-rate telemetry.

`publish` waits for the stream's ack, so when it returns the message is stored (and replicated);
its `Nats-Msg-Id` makes a retried publish (after a timeout, a crash between send and ack) land
once within the stream's duplicate window. `publish_async` pipelines many such publishes over one
connection and returns the ack future; `publish_core` is fire-and-forget for subjects whose
readers tolerate loss (or that a bounded stream captures anyway). All three carry trace context.

`publish_async` does not use nats-py's `JetStreamContext.publish_async`. That one does much work per
message (a semaphore taken through `asyncio.wait_for`, a random token read from the OS, the reply
parsed by `json` into a dataclass, two futures and a callback settled): the largest bus cost of a
placement decision (bench/results/NOTES.md has the measurement). It also leaves the future pending forever when the stream answers
with an error (its parser raises inside the reply callback). Here one reply subscription per
connection (`_AckInbox`, under the connection's inbox prefix, so per-service permissions hold) maps
a counter token to one future, and msgspec decodes the reply. An error reply fails the future with
nats-py's own exception types; no stream, with `NoStreamResponseError`; and no reply within
`ack_timeout_s`, with `TimeoutError`; sent before the connection was re-established (the reply
was routed through a server that is gone, or lost in the reconnect), with `ConnectionError` at the
next sweep after the reconnect, so a pipelined caller retries within a second instead of stalling for
the whole ack timeout (its `Nats-Msg-Id` lands a resent message once).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NoStreamResponseError

from gpuaware.bus import tracing
from gpuaware.bus.codec import Channel
from gpuaware.bus.headers import MSG_ID, copy_headers

T = TypeVar("T")



@dataclass(frozen=True, slots=True)
class PubAck:
    """The stream's receipt: where the message is stored, and whether it was already there."""

    stream: str
    seq: int
    duplicate: bool
    msg_id: str
    """"" when the channel sends none (``dedupe=False``)"""

    @classmethod
    def _of(cls, ack: api.PubAck, msg_id: str) -> PubAck:
        return cls(stream=ack.stream, seq=ack.seq, duplicate=bool(ack.duplicate), msg_id=msg_id)


def _prepare(channel: Channel[T], msg: T, msg_id: str | None,
             headers: Mapping[str, str] | None) -> tuple[bytes, dict[str, str]]:
    payload = channel.encode(msg)
    hdrs = copy_headers(headers)
    if msg_id is not None or channel.dedupe:
        hdrs[MSG_ID] = msg_id if msg_id is not None else channel.msg_id(msg, payload)
    return payload, hdrs


async def publish(js: JetStreamContext, channel: Channel[T], msg: T, *, msg_id: str | None = None,
                  headers: Mapping[str, str] | None = None, timeout: float | None = None) -> PubAck:
    """Store `msg` in the stream bound to the channel's subject; `ack.duplicate` is True when the
    stream had already stored this msg id."""
    payload, hdrs = _prepare(channel, msg, msg_id, headers)
    with tracing.send_span(channel.subject, hdrs):
        ack = await js.publish(channel.subject, payload, timeout=timeout, headers=hdrs or None)
    return PubAck._of(ack, hdrs.get(MSG_ID, ""))


class _Reply(msgspec.Struct):
    """A JetStream publish reply: the receipt, or `error` ({code, err_code, description})."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_REPLY = msgspec.json.Decoder(_Reply)
_NO_RESPONDERS = "503"


class _AckInbox:
    """The replies to one connection's pipelined publishes: token -> (future, msg id, sent at,
    the connection's reconnect count when sent)."""

    max_pending = 4000
    """publishes awaiting their reply before `publish_async` waits for room (nats-py's default too)"""
    ack_timeout_s = 30.0
    sweep_s = 1.0

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.prefix = ""
        self.pending: dict[str, tuple[asyncio.Future[PubAck], str, float, int]] = {}
        self._tokens = itertools.count()
        self._room = asyncio.Event()
        self._room.set()
        self._sweep: asyncio.TimerHandle | None = None
        self._ready: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_task(self._subscribe())
        task = self._ready
        try:
            await asyncio.shield(task)
        except Exception:
            if self._ready is task and task.done():
                self._ready = None  # the next publish tries to subscribe again
            raise

    async def _subscribe(self) -> None:
        prefix = self.nc.new_inbox() + "."
        await self.nc.subscribe(prefix + "*", cb=self._on_reply)
        self.prefix = prefix

    async def send(self, subject: str, payload: bytes, hdrs: dict[str, str]) -> asyncio.Future[PubAck]:
        while len(self.pending) >= self.max_pending:
            self._room.clear()
            await self._room.wait()
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PubAck] = loop.create_future()
        self.pending[token] = (fut, hdrs.get(MSG_ID, ""), time.monotonic(), self.nc.stats["reconnects"])
        try:
            await self.nc.publish(subject, payload, reply=self.prefix + token, headers=hdrs or None)
        except BaseException:
            self.pending.pop(token, None)
            raise
        if self._sweep is None:
            self._sweep = loop.call_later(self.sweep_s, self._expire)
        return fut

    async def _on_reply(self, msg: Any) -> None:
        got = self.pending.pop(msg.subject[len(self.prefix):], None)
        if got is None:
            return  # expired already
        self._made_room()
        fut, ident = got[0], got[1]
        if fut.done():
            return
        if msg.headers and msg.headers.get(api.Header.STATUS) == _NO_RESPONDERS:
            fut.set_exception(NoStreamResponseError())
            return
        try:
            reply = _REPLY.decode(msg.data)
        except msgspec.DecodeError as exc:
            fut.set_exception(APIError(description=f"undecodable publish reply: {exc}"))
            return
        if reply.error is not None:
            try:
                APIError.from_error(reply.error)  # raises the matching subclass
            except APIError as exc:
                fut.set_exception(exc)
            except Exception as exc:  # a reply error without the usual fields
                fut.set_exception(APIError(description=str(reply.error)[:200] or repr(exc)))
            return
        fut.set_result(PubAck(reply.stream, reply.seq, reply.duplicate, ident))

    def _made_room(self) -> None:
        if not self._room.is_set() and len(self.pending) < self.max_pending:
            self._room.set()

    def _expire(self) -> None:
        """Fail the publishes no reply will come for: the connection closed or was re-established
        since they were sent, or the ack timeout passed (a server that never answers)."""
        self._sweep = None
        cutoff = time.monotonic() - self.ack_timeout_s
        closed = self.nc.is_closed
        epoch = self.nc.stats["reconnects"]
        for token, (fut, _, sent, sent_epoch) in list(self.pending.items()):
            if sent > cutoff and sent_epoch == epoch and not closed:
                break  # in sending order: the rest are younger, and sent on this connection
            del self.pending[token]
            if fut.done():
                continue
            if closed:
                fut.set_exception(TimeoutError("the connection closed before the stream acknowledged"))
            elif sent_epoch != epoch:
                fut.set_exception(ConnectionError(
                    "the connection to NATS was re-established before the stream acknowledged"))
            else:
                fut.set_exception(TimeoutError(
                    f"no acknowledgement from the stream within {self.ack_timeout_s:g} s"))
        self._made_room()
        if self.pending:
            self._sweep = asyncio.get_running_loop().call_later(self.sweep_s, self._expire)


_INBOXES: weakref.WeakKeyDictionary[Client, _AckInbox] = weakref.WeakKeyDictionary()


async def _ack_inbox(js: JetStreamContext) -> _AckInbox:
    nc = js._nc
    box = _INBOXES.get(nc)
    if box is None:
        box = _INBOXES[nc] = _AckInbox(nc)
    if not box.prefix:
        await box.ready()
    return box


async def publish_async(js: JetStreamContext, channel: Channel[T], msg: T, *, msg_id: str | None = None,
                        headers: Mapping[str, str] | None = None) -> asyncio.Future[PubAck]:
    """Send without waiting for the ack; await the returned future to know it is stored (it fails
    when the stream refuses, no stream takes the subject, or no ack came within 30 s). Blocks only
    when too many are pending on the connection."""
    payload, hdrs = _prepare(channel, msg, msg_id, headers)
    box = await _ack_inbox(js)
    if tracing.recording():
        with tracing.send_span(channel.subject, hdrs):
            return await box.send(channel.subject, payload, hdrs)
    tracing.inject(hdrs)  # an agent's every sample: what the span would do without an SDK, minus its machinery
    return await box.send(channel.subject, payload, hdrs)


async def publish_core(nc: Client, channel: Channel[T], msg: T, *,
                       headers: Mapping[str, str] | None = None) -> None:
    """Core NATS publish: at-most-once, no ack, no de-duplication id."""
    hdrs = copy_headers(headers)
    payload = channel.encode(msg)
    with tracing.send_span(channel.subject, hdrs):
        await nc.publish(channel.subject, payload, headers=hdrs or None)
