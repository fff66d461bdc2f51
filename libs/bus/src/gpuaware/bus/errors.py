"""Errors that say what happens next.

A handler never acks, naks or terms a message itself: it returns (done, ack) or raises, and the
exception's type decides the message's fate (kopf's and FastStream's idea, in our words):

- `TransientError`  -> the message is redelivered after `delay` (nak with delay); once the
  consumer's `max_deliver` attempts are used up it is dead-lettered with the last reason.
- `PermanentError`  -> retrying cannot help: dead-lettered at once, then terminated.
- any other exception -> a bug or an unforeseen failure: treated as transient (logged with its
  traceback), so a fix deployed within the retry budget still processes the message.

`ServiceError` is the request/reply counterpart: raised by an endpoint handler it becomes a typed
micro-service error reply (code + description); raised by `request()` it is that reply, seen by
the caller. The bus never leaks `nats` exceptions for these cases, so callers need not import nats.
"""

from __future__ import annotations

from typing import Any


class BusError(Exception):
    """Base of every error raised by gpuaware.bus."""


class TransientError(BusError):
    """Retry later: the message stays in the stream and comes back after `delay` seconds.

    `delay=None` lets the consumer's retry policy choose (exponential backoff by attempt).
    """

    def __init__(self, reason: str, delay: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class PermanentError(BusError):
    """Never retry: the message is dead-lettered with `reason` and terminated."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServiceError(BusError):
    """A typed error reply of a request/reply endpoint (HTTP-like `code`, human `description`)."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(f"{code}: {description}")
        self.code = code
        self.description = description


class RequestTimeout(BusError, TimeoutError):
    """No reply arrived within the request's timeout."""


class NoResponders(ServiceError):
    """Nobody listens on the requested subject (NATS answers at once instead of timing out)."""

    def __init__(self, subject: str) -> None:
        super().__init__(503, f"no responders on {subject}")
        self.subject = subject


class StreamConfigError(BusError):
    """The server refused to create or update a stream/consumer to the wanted configuration."""


class StreamPermissionError(StreamConfigError):
    """This user may not create or update a stream (least-privilege service users; an admin
    provisions streams). `info` is the server's stream info (None when the stream is missing) and
    `diff` the fields that differ from the wanted configuration: {field: (want, have)}."""

    def __init__(self, message: str, *, stream: str, info: Any, diff: dict[str, tuple[Any, Any]]) -> None:
        super().__init__(message)
        self.stream = stream
        self.info = info
        self.diff = diff
