"""Typed publishing: JetStream for what must not be lost, core NATS for high-rate telemetry.

`publish` waits for the stream's ack, so when it returns the message is stored (and replicated);
its `Nats-Msg-Id` makes a retried publish (after a timeout, a crash between send and ack) land
once within the stream's duplicate window. `publish_async` pipelines many such publishes over one
connection and returns the ack future; `publish_core` is fire-and-forget for subjects whose
readers tolerate loss (or that a bounded stream captures anyway). All three carry trace context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext, api

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


async def publish_async(js: JetStreamContext, channel: Channel[T], msg: T, *, msg_id: str | None = None,
                        headers: Mapping[str, str] | None = None) -> asyncio.Future[PubAck]:
    """Send without waiting for the ack; await the returned future (or
    `js.publish_async_completed()`) to know it is stored. Blocks only when too many are pending."""
    payload, hdrs = _prepare(channel, msg, msg_id, headers)
    if tracing.recording():
        with tracing.send_span(channel.subject, hdrs):
            raw = await js.publish_async(channel.subject, payload, headers=hdrs or None)
    else:  # an agent's every sample: what the span would do without an SDK, minus its machinery
        tracing.inject(hdrs)
        raw = await js.publish_async(channel.subject, payload, headers=hdrs or None)
    done: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
    ident = hdrs.get(MSG_ID, "")

    def settle(f: asyncio.Future[api.PubAck]) -> None:
        if done.cancelled():
            return
        if f.cancelled():
            done.cancel()
        elif (exc := f.exception()) is not None:
            done.set_exception(exc)
        else:
            done.set_result(PubAck._of(f.result(), ident))

    raw.add_done_callback(settle)
    return done


async def publish_core(nc: Client, channel: Channel[T], msg: T, *,
                       headers: Mapping[str, str] | None = None) -> None:
    """Core NATS publish: at-most-once, no ack, no de-duplication id."""
    hdrs = copy_headers(headers)
    payload = channel.encode(msg)
    with tracing.send_span(channel.subject, hdrs):
        await nc.publish(channel.subject, payload, headers=hdrs or None)
