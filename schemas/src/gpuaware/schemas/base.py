"""The shape every message shares, and the constrained scalar types the contract is built from.

Why it looks like this:

* Every event, request and reply is a frozen, keyword-only msgspec Struct tagged on ``kind``.
  The tag of an event is its subject (``"telemetry.gpu.sampled.v1"``), so a payload is
  self-describing wherever it ends up (dead-letter stream, TimescaleDB, a log line) and a single
  union decoder can dispatch on it. A breaking change makes a new Struct with a new ``vN`` subject,
  hence a new tag; the old one keeps decoding.
* Evolution rule: a field added to an existing version always has a default. Old readers ignore
  fields they do not know (msgspec's default), new readers fill the default when it is missing.
  Unknown fields are therefore never forbidden.
* Constraints live in the types (``Annotated[int, Meta(ge=0)]``) so decoding *is* validation:
  ``msgspec.json.decode(data, type=...)`` raises ``ValidationError`` naming the offending path.
  Cross-field rules go in ``__post_init__``, which msgspec also runs while decoding.
* Collections are tuples (immutable, like the Struct holding them); timestamps are Unix epoch
  seconds as floats; memory is MiB; a GPU fraction is thousandths of one GPU ("milli", 0..1000),
  the same unit the placement engine and quota ledger count in.
* ``gc=False``: messages hold only scalars, strings, tuples, dicts and other messages, never
  cycles, so the garbage collector need not track the millions a telemetry stream allocates.

Subjects read ``<domain>.<entity>.<event>.v<N>`` and may carry routing suffixes
(``telemetry.gpu.sampled.v1.<cluster>.<node>``); request/reply endpoints read ``<domain>.<verb>``.
Each subject is a module-level constant right beside its Struct.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
from msgspec import Meta

__all__ = [
    "ENDPOINT_RE",
    "EVENT_SUBJECT_RE",
    "Event",
    "GpuIndex",
    "Label",
    "MiB",
    "Milli",
    "Name",
    "NonNegFloat",
    "NonNegInt",
    "Percent",
    "Reply",
    "Request",
    "Score",
    "Seconds",
    "Text",
    "Timestamp",
]

#: ``<domain>.<entity>.<event>.v<N>`` — lower-case words, underscores allowed inside a word.
EVENT_SUBJECT_RE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.v[1-9][0-9]*$")
#: ``<domain>.<verb>`` — a NATS micro request/reply endpoint.
ENDPOINT_RE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")

# --- constrained scalars -----------------------------------------------------------------------
Timestamp = Annotated[float, Meta(ge=0, description="Unix epoch seconds")]
Seconds = Annotated[float, Meta(ge=0, description="a duration in seconds")]
NonNegInt = Annotated[int, Meta(ge=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
MiB = Annotated[int, Meta(ge=0, description="mebibytes")]
Milli = Annotated[int, Meta(ge=0, le=1000, description="thousandths of one GPU; 1000 = a whole GPU")]
Percent = Annotated[float, Meta(ge=0, le=100, description="percent, 0..100")]
Score = Annotated[float, Meta(ge=0, le=100, description="score, 0 (worst) .. 100 (best)")]
GpuIndex = Annotated[int, Meta(ge=0, le=255, description="NVML index of the GPU on its node")]
Name = Annotated[str, Meta(min_length=1, max_length=253)]
Label = Annotated[str, Meta(max_length=253)]
"""a short optional string (may be empty): bounded like a Kubernetes name, so a 900 KB value is refused"""
Text = Annotated[str, Meta(max_length=4096)]
"""words for people (a reason, a message, a summary): bounded too; every string of the contract is
(tests/schemas checks it), so a message cannot smuggle megabytes into a decision or a database row"""


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """Base of every published fact. Subclasses set ``tag=<their subject>``."""

    source: Name
    """who emitted it: service name and instance, e.g. ``placement/0`` or ``agent/node-a``"""
    emitted_at: Timestamp
    cluster: Name = "default"


class Request(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """Base of a request on a NATS micro endpoint. Subclasses set ``tag="<endpoint>.request"``."""

    source: Name
    emitted_at: Timestamp
    cluster: Name = "default"


class Reply(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """Base of a reply. Errors travel as NATS micro service errors (headers), never as a Reply."""

    source: Name
    emitted_at: Timestamp
    cluster: Name = "default"
