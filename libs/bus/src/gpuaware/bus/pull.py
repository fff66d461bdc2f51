"""Pull requests whose messages land in a callback: the cost of pulling paid per batch, not per message.

nats-py's ``fetch`` reads each message of a batch with a timed queue get, which in asyncio means a
task and a timer per message; profiled on the collector that was about a quarter of its CPU. A
`Puller` sends the pull request itself (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>``, the
request nats-py sends), receives the messages through a callback subscription on its own inbox,
and wakes the waiting ``fetch`` once per burst: the server sends whatever is available at once,
so a busy stream fills a batch in one wake-up, and a quiet one hands over each message as it comes.

A waiting ``fetch`` is one future and one timer (not a task per wait), and `interrupt()` ends it
early with what is buffered (a consumer stopping): the consumer awaits ``fetch`` directly, with no task
around it, which at a thousand messages a second in small bursts was measurable.

One request is outstanding at a time: ``batch`` messages, expiring after the fetch's ``timeout``.
While it is open, later fetches take what it delivers (messages that arrive after a fetch returned
wait in the buffer, already delivered: their ack wait runs). It ends when it delivered ``batch``,
when the server says it expired (408) or no more will come (404, 409), or, should that word be
lost in a reconnect, a second after its expiry. A 409 that says the consumer is gone and a 503
(no JetStream) are raised as `PullError`, for the caller to re-declare the consumer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["PullError", "Puller"]

_STATUS = "Status"
_DESCRIPTION = "Description"
_HEARTBEAT = "100"
_ENDS = ("404", "408", "409")
"""statuses that end a pull request: no messages, expired, or a limit/leadership change"""
_GRACE_S = 1.0


class PullError(Exception):
    """The server refused the pull: the consumer is gone (409) or JetStream is unavailable (503)."""


class Puller:
    """Pulls batches from one durable pull consumer (module docstring)."""

    def __init__(self, nc: Client, stream: str, durable: str, *, api_prefix: str = "$JS.API") -> None:
        self.nc = nc
        self.subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = ""
        self._sub: Any = None
        self._buffer: list[Msg] = []
        self._remaining = 0
        self._deadline = 0.0
        self._error: PullError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._interrupted = False

    async def start(self) -> Puller:
        self._inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(self._inbox, cb=self._on_msg, pending_msgs_limit=-1,
                                            pending_bytes_limit=-1)
        return self

    async def _on_msg(self, msg: Msg) -> None:
        status = msg.headers.get(_STATUS) if msg.headers else None
        if not status:
            self._buffer.append(msg)
            self._remaining -= 1
        elif status == _HEARTBEAT:
            return
        elif status in _ENDS:
            self._remaining = 0
            description = (msg.headers or {}).get(_DESCRIPTION, "")
            if status == "409" and "deleted" in description.lower():
                self._error = PullError(f"409 {description}")
        else:
            self._remaining = 0
            self._error = PullError(f"{status} {(msg.headers or {}).get(_DESCRIPTION, '')}".strip())
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def interrupt(self) -> None:
        """End a waiting `fetch` now, and keep later ones from waiting (the consumer is stopping)."""
        self._interrupted = True
        self._wake()

    @property
    def _open(self) -> bool:
        return self._remaining > 0 and time.monotonic() < self._deadline

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages: those waiting, else the next burst within ``timeout`` seconds.
        Raises `TimeoutError` when none came, `PullError` when the server refused."""
        if not self._buffer:
            self._raise_error()
            if not self._open:
                await self._request(batch, timeout)
            if not self._buffer and self._error is None and not self._interrupted:
                loop = asyncio.get_running_loop()
                waiter = self._waiter = loop.create_future()
                timer = loop.call_later(timeout, self._wake)
                try:
                    await waiter
                finally:
                    timer.cancel()
                    self._waiter = None
            self._raise_error()
            if not self._buffer:
                raise TimeoutError
        out, self._buffer = self._buffer[:batch], self._buffer[batch:]
        return out

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def _request(self, batch: int, timeout: float) -> None:
        request = {"batch": batch, "expires": int(timeout * 1e9)}
        self._remaining = batch
        self._deadline = time.monotonic() + timeout + _GRACE_S
        await self.nc.publish(self.subject, json.dumps(request).encode(), reply=self._inbox)

    def take_buffered(self) -> list[Msg]:
        """What was delivered and not handed out (to give back on stop)."""
        out, self._buffer = self._buffer, []
        return out

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
