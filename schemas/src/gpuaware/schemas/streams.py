"""The JetStream streams of the platform, as plain data (``libs/bus`` turns them into stream configs).

Why here and not in ``libs/bus``: which subjects are durable, and for how long, is part of the
contract every service and every tool relies on, like the subjects themselves. Keeping the
specs free of ``nats`` lets tests, Helm templating and other languages read them.

Rules the specs follow (and ``tests/schemas`` enforces):

* every event subject is captured by exactly one stream (NATS rejects overlapping streams, and an
  uncaptured event would be lost while its consumer is down);
* no stream captures a request/reply endpoint (``quota.admit``, ``placement.explain``,
  ``health.cordon``): JetStream would answer the request with a PubAck before the service could
  reply. That is why QUOTA takes ``quota.usage.>``, PLACEMENT ``placement.pod.>`` and ``placement.node.>`` and ALERTS
  ``health.gpu.>`` rather than ``quota.>``/``placement.>``/``health.>``;
* events that must not be lost (pending pods, decisions, bindings, preemptions, checkpoints,
  alerts) live in file-backed ``limits`` streams kept for days, read by durable consumers; the
  duplicate window (``Nats-Msg-Id`` dedupe) covers a publisher's retries after a timeout (a failed
  handler is retried within the consumers' longest back-off, 60 s) and a leader handover (seconds).
  It is not free: the server keeps every id of the window in memory (about 100 bytes each), so the
  busy loop streams keep NATS's default two minutes (bench/results/NOTES.md: what a longer window
  held in `make bench-soak`); consumers are idempotent past the window anyway;
* high-rate telemetry is bounded by age *and* bytes, discarding the oldest: it is a buffer in front
  of the collector, not the history (TimescaleDB is). Agents re-announce inventory well within
  ``max_age_s`` so a late reader always finds it.

Replicas are 1 here (the embedded single server); production runs R3: ``with_replicas(STREAMS, 3)``.
Sizes are 0/-1 for "unlimited", as in NATS.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gpuaware.schemas.deadletter import DEAD_LETTER_ALL, DEAD_LETTER_STREAM

__all__ = [
    "ALERTS",
    "BINDER",
    "DEADLETTER",
    "FORECAST",
    "PLACEMENT",
    "QUOTA",
    "STREAMS",
    "TELEMETRY",
    "StreamSpec",
    "stream_for",
    "subject_matches",
    "with_replicas",
]

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
GiB = 1024**3


class StreamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One JetStream stream: the subjects it captures and how long it keeps them."""

    name: Annotated[str, Meta(pattern=r"^[A-Z][A-Z0-9_-]*$")]
    subjects: tuple[str, ...]
    retention: Literal["limits", "workqueue", "interest"] = "limits"
    max_age_s: Annotated[float, Meta(ge=0)] = 0.0
    """0 = unlimited"""
    max_msgs: Annotated[int, Meta(ge=-1)] = -1
    max_bytes: Annotated[int, Meta(ge=-1)] = -1
    duplicate_window_s: Annotated[float, Meta(ge=0)] = 2 * MINUTE
    storage: Literal["file", "memory"] = "file"
    replicas: Annotated[int, Meta(ge=1, le=5)] = 1
    discard: Literal["old", "new"] = "old"
    description: str = ""


TELEMETRY = StreamSpec(
    name="TELEMETRY",
    subjects=("telemetry.>",),
    max_age_s=2 * HOUR,
    max_bytes=4 * GiB,
    duplicate_window_s=1 * MINUTE,
    description="inventory, samples and rollups; a bounded buffer in front of the collector",
)
BINDER = StreamSpec(
    name="BINDER",
    subjects=("binder.>",),
    max_age_s=7 * DAY,
    max_bytes=8 * GiB,
    duplicate_window_s=2 * MINUTE,
    description="pending pods, bindings, bind failures, preemptions, finishes, checkpoints",
)
PLACEMENT = StreamSpec(
    name="PLACEMENT",
    subjects=("placement.pod.>", "placement.node.>"),
    max_age_s=7 * DAY,
    max_bytes=8 * GiB,
    duplicate_window_s=2 * MINUTE,
    description="placement decisions, unschedulable pods, explanations, node-power recommendations",
)
ALERTS = StreamSpec(
    name="ALERTS",
    subjects=("alerts.>", "health.gpu.>"),
    max_age_s=30 * DAY,
    max_bytes=4 * GiB,
    duplicate_window_s=10 * MINUTE,
    description="alerts raised/resolved, GPU health scores and state changes",
)
FORECAST = StreamSpec(
    name="FORECAST",
    subjects=("forecast.>",),
    max_age_s=2 * DAY,
    max_bytes=2 * GiB,
    description="demand and per-GPU forecasts",
)
QUOTA = StreamSpec(
    name="QUOTA",
    subjects=("quota.usage.>",),
    max_age_s=7 * DAY,
    max_bytes=1 * GiB,
    description="per-queue quota usage snapshots (not quota.admit: that is request/reply)",
)
DEADLETTER = StreamSpec(
    name=DEAD_LETTER_STREAM,
    subjects=(DEAD_LETTER_ALL,),
    max_age_s=14 * DAY,
    max_bytes=2 * GiB,
    description="messages no consumer could decode or handle, with the reason in headers",
)

STREAMS: tuple[StreamSpec, ...] = (TELEMETRY, BINDER, PLACEMENT, ALERTS, FORECAST, QUOTA, DEADLETTER)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard match: ``*`` is one token, a final ``>`` is one or more tokens."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return i == len(p) - 1 and len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def stream_for(subject: str, streams: tuple[StreamSpec, ...] = STREAMS) -> StreamSpec | None:
    """The stream capturing ``subject``, or None when it is core NATS only."""
    for spec in streams:
        if any(subject_matches(pattern, subject) for pattern in spec.subjects):
            return spec
    return None


def with_replicas(streams: tuple[StreamSpec, ...], replicas: int) -> tuple[StreamSpec, ...]:
    """The same streams at another replication factor (R3 in a JetStream cluster)."""
    return tuple(msgspec.structs.replace(s, replicas=replicas) for s in streams)
