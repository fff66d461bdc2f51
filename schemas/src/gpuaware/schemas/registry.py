"""Subject -> type, in one place: what the bus, the dead-letter tooling and the generator look up.

``MESSAGES`` maps every event subject to its Struct and ``REQUESTS`` every request/reply endpoint
to its (request, reply) pair. Because an event's tag *is* its subject, ``subject_of(event)``
needs no table and ``decode_event`` decodes any event without knowing the subject first (a
tagged union: msgspec reads ``kind`` and dispatches). Tests check the two agree.

Subjects may carry routing suffixes after the version (``telemetry.gpu.sampled.v1.default.node-a``);
``struct_for`` strips them.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import msgspec

from gpuaware.schemas import (
    alerts,
    binder,
    checkpoint,
    forecast,
    health,
    inventory,
    placement,
    pods,
    quota,
    telemetry,
    usage,
    world,
)
from gpuaware.schemas.base import EVENT_SUBJECT_RE, Event, Reply, Request

__all__ = [
    "MESSAGES",
    "REQUESTS",
    "AnyEvent",
    "base_subject",
    "decode_event",
    "endpoint_for",
    "struct_for",
    "subject_of",
]

# each domain module lists what it defines (EVENTS, ENDPOINTS) next to the definitions; here they are joined
_EVENTS: tuple[type[Event], ...] = (
    *inventory.EVENTS, *telemetry.EVENTS, *usage.EVENTS, *forecast.EVENTS, *health.EVENTS, *alerts.EVENTS,
    *pods.EVENTS, *placement.EVENTS, *binder.EVENTS, *checkpoint.EVENTS, *quota.EVENTS,
)

MESSAGES: dict[str, type[Event]] = {event.__struct_config__.tag: event for event in _EVENTS}  # type: ignore[misc]  # every event's tag is its subject, a str

REQUESTS: dict[str, tuple[type[Request], type[Reply]]] = {
    **quota.ENDPOINTS, **placement.ENDPOINTS, **world.ENDPOINTS, **health.ENDPOINTS, **forecast.ENDPOINTS,
}

#: every event type, as one tagged union (decode with ``msgspec.json.decode(data, type=AnyEvent)``)
AnyEvent: Any = functools.reduce(operator.or_, MESSAGES.values())

_event_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(AnyEvent)


def decode_event(data: bytes) -> Event:
    """Decode any event by its ``kind`` tag; raises ``msgspec.ValidationError`` when invalid."""
    return _event_decoder.decode(data)


def subject_of(event: Event) -> str:
    """The subject an event is published on (without routing suffixes): its tag."""
    return type(event).__struct_config__.tag  # type: ignore[return-value]  # every event Struct's tag is its subject, a str


def base_subject(subject: str) -> str:
    """``telemetry.gpu.sampled.v1.default.node-a`` -> ``telemetry.gpu.sampled.v1``."""
    head = ".".join(subject.split(".")[:4])
    return head if EVENT_SUBJECT_RE.match(head) else subject


def struct_for(subject: str) -> type[Event]:
    """The event Struct published on ``subject`` (routing suffixes allowed); KeyError if unknown."""
    try:
        return MESSAGES[base_subject(subject)]
    except KeyError:
        raise KeyError(f"no event is registered for subject {subject!r}") from None


def endpoint_for(subject: str) -> tuple[type[Request], type[Reply]]:
    """The (request, reply) types of a request/reply endpoint; KeyError if unknown."""
    try:
        return REQUESTS[subject]
    except KeyError:
        raise KeyError(f"no request/reply endpoint is registered at {subject!r}") from None
