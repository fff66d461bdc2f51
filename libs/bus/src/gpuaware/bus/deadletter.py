"""Dead letters: the raw bytes of a rejected message, the reason in headers, nothing lost.

A consumer that cannot use a message (undecodable, schema-violating, permanently failing, out of
retries) republishes it byte-for-byte to `deadletter.<original subject>` with
`gpuaware.schemas.deadletter`'s headers (reason, original subject, consumer, attempts) plus the
original headers (trace context included, so the rejection shows up in the producer's trace), and
only then acks/terms the original. If the dead letter cannot be sent, the original is left unacked
(the caller naks it), so a message is never dropped on the floor.

Dead letters go to JetStream when a stream captures them (`ensure_dead_letter_stream`) and to
core NATS otherwise, so tests and tools subscribing to `deadletter.>` see them
either way. Their `Nats-Msg-Id` is derived from (consumer, stream, sequence), so rejecting the same
delivery twice (a crash between dead-lettering and term) stores one dead letter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from gpuaware.bus.headers import MSG_ID, copy_headers, header_value
from gpuaware.bus.jetstream import StreamSpecLike, ensure_stream
from gpuaware.schemas import (
    DEADLETTER,
    HEADER_ATTEMPTS,
    HEADER_CONSUMER,
    HEADER_ORIGINAL_SUBJECT,
    HEADER_REASON,
    dead_letter_subject,
)

log = logging.getLogger(__name__)


async def ensure_dead_letter_stream(js: JetStreamContext, spec: StreamSpecLike = DEADLETTER) -> api.StreamInfo:
    """The stream keeping every `deadletter.>` message (the contract's `DEADLETTER` spec by default;
    pass `with_replicas(...)` of it for a clustered server)."""
    return await ensure_stream(js, spec)


def dead_letter_headers(original: Mapping[str, str] | None, *, subject: str, reason: str, consumer: str,
                        attempts: int) -> dict[str, str]:
    hdrs = copy_headers(original)
    hdrs.pop(MSG_ID, None)
    hdrs[HEADER_REASON] = header_value(reason)
    hdrs[HEADER_ORIGINAL_SUBJECT] = subject
    hdrs[HEADER_CONSUMER] = consumer
    hdrs[HEADER_ATTEMPTS] = str(attempts)
    return hdrs


class DeadLetters:
    """Sends dead letters; remembers for `ttl` seconds whether a stream captures each subject.

    Whether `deadletter.<subject>` is stored is asked of the server (not inferred from a publish
    failing: a core subscriber on the subject makes a JetStream publish time out instead of
    failing fast), and cached so a burst of bad messages costs one lookup.
    """

    def __init__(self, nc: Client, js: JetStreamContext | None = None, *, ttl: float = 30.0,
                 timeout: float = 2.0) -> None:
        self.nc = nc
        self.js = js if js is not None else nc.jetstream()
        self.ttl = ttl
        self.timeout = timeout
        self._stored: dict[str, tuple[bool, float]] = {}

    async def _is_stored(self, subject: str) -> bool:
        now = time.monotonic()
        cached = self._stored.get(subject)
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        try:
            await self.js.find_stream_name_by_subject(subject)
            stored = True
        except NotFoundError:
            stored = False
        self._stored[subject] = (stored, now)
        return stored

    async def send(self, *, subject: str, payload: bytes, headers: Mapping[str, str] | None, reason: str,
                   consumer: str, attempts: int, dedupe_id: str | None = None) -> None:
        """Republish `payload` to `deadletter.<subject>`; raises if it could not be sent."""
        dl_subject = dead_letter_subject(subject)
        hdrs = dead_letter_headers(headers, subject=subject, reason=reason, consumer=consumer,
                                   attempts=attempts)
        log.warning("dead-lettering message from %s (consumer %s, attempt %d): %s",
                    subject, consumer, attempts, hdrs[HEADER_REASON])
        if await self._is_stored(dl_subject):
            if dedupe_id is not None:
                hdrs[MSG_ID] = dedupe_id
            await self.js.publish(dl_subject, payload, timeout=self.timeout, headers=hdrs)
        else:
            await self.nc.publish(dl_subject, payload, headers=hdrs)
            await self.nc.flush(timeout=self.timeout)  # type: ignore[arg-type]  # nats-py says int; any float works
