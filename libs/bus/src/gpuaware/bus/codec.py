"""Typed channels: a subject bound to one msgspec type, with its codec built once.

msgspec encoders/decoders are cheap to call and comparatively costly to build, and a decoder is
specific to its type; so a `Channel` is declared once (beside the subject constant, or at import
time of a service) and every publish/consume on it reuses the same pair. Decoders are also cached
per type, so `Channel.at(cluster, node)` for per-cluster/per-node subjects costs nothing; `at` makes
each name one token by the contract's rule (``subject_token``), so no caller builds a subject from a name
itself.

Message ids (`Nats-Msg-Id`, JetStream's de-duplication key) are derived from the message unless
the publisher gives one: by `id_of(msg)` when the channel declares it (an event id field is the
best key), otherwise by a hash of subject + encoded bytes, so publishing the same event twice
within the stream's duplicate window stores it once. A channel declared with ``dedupe=False``
sends none: for high-rate messages whose publisher never retries and whose consumer stores them
idempotently by a natural key (GPU samples: the collector's (gpu_uuid, ts)), an id dedupes
nothing and its header costs both ends per message (bench-telemetry: ~30 % of the agents' CPU).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from gpuaware.schemas import subject_token

T = TypeVar("T")
E = TypeVar("E", bound=msgspec.Struct)

#: one shared encoder: msgspec.json.Encoder is type-agnostic and thread-safe for encoding.
ENCODER = msgspec.json.Encoder()

DecodeFailure = (msgspec.DecodeError, msgspec.ValidationError)
_VERSION = re.compile(r"^v[0-9]+$")
"""What decoding raises for garbage bytes (DecodeError) or schema-violating JSON (ValidationError,
a subclass of DecodeError, listed for clarity)."""


@functools.lru_cache(maxsize=512)
def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(type_)


def decoder_for(type_: type[T]) -> msgspec.json.Decoder[T]:
    """The JSON decoder of `type_`, built once per type."""
    key: Any = type_  # a type is hashable; mypy cannot tell through a type variable
    return _decoder(key)


def content_id(subject: str, payload: bytes) -> str:
    """A stable id for a payload on a subject (128-bit BLAKE2b, hex)."""
    h = hashlib.blake2b(payload, digest_size=16)
    h.update(b"\0")
    h.update(subject.encode())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Channel(Generic[T]):
    """A subject carrying messages of one type.

    `id_of` returns the de-duplication id of a message (e.g. `lambda e: e.event_id`); without it
    the id is a content hash. `Channel(SUBJECT, GpuSampled).at(cluster, node)` extends the subject
    with the names' tokens and keeps the codec.
    """

    subject: str
    type: type[T]
    id_of: Callable[[T], str] | None = None
    dedupe: bool = True
    """publishes carry a `Nats-Msg-Id` (module docstring)"""
    decoder: msgspec.json.Decoder[T] = field(init=False, repr=False, compare=False)
    _version: tuple[int, str] | None = field(init=False, repr=False, compare=False)
    """where the subject's version token is, and the token (checked for every message received)"""

    def __post_init__(self) -> None:
        if not self.subject or " " in self.subject:
            raise ValueError(f"invalid subject {self.subject!r}")
        object.__setattr__(self, "decoder", decoder_for(self.type))
        at = self._version_at()
        object.__setattr__(self, "_version", None if at is None else (at, self.subject.split(".")[at]))

    def at(self, *names: str) -> Channel[T]:
        """The same channel on ``subject.<token>.<token>...``, one token per name (a cluster, a node): each
        made by the contract's rule, ``gpuaware.schemas.subject_token``, so a dotted node name or a
        wildcard character stays inside its token; a token that rule already made is kept as it is."""
        return Channel(_joined(self.subject, names), self.type, self.id_of, self.dedupe)

    def under(self, *names: str) -> Channel[T]:
        """Every subject below ``at(*names)`` (``subject.<token>....>``): what a consumer filters on to
        read, say, one cluster's messages from every node. Not for publishing."""
        return Channel(_joined(self.subject, names) + ".>", self.type, self.id_of, self.dedupe)

    def _version_at(self) -> int | None:
        """Where the subject's version token is: the first ``v<N>`` (the contract's ``<base>.v<N>``; a
        cluster or node token after it that happens to read ``v2`` is a name, not a version)."""
        return next((i for i, t in enumerate(self.subject.split(".")) if _VERSION.match(t)), None)

    @property
    def any_version(self) -> str:
        """The subject with its version token (``v1``) as a wildcard: what a durable consumer filters
        on, so a message of another version reaches the consumer and is dead-lettered with the reason
        instead of lying in the stream unread (no version token: the subject itself)."""
        at = self._version_at()
        if at is None:
            return self.subject
        tokens = self.subject.split(".")
        tokens[at] = "*"
        return ".".join(tokens)

    def foreign_version(self, subject: str) -> str | None:
        """Why a message on ``subject`` is not this channel's version, or None when it is."""
        if self._version is None:
            return None
        at, mine = self._version
        theirs = subject.split(".", at + 1)
        if at < len(theirs) and theirs[at] != mine and theirs[at] != "*":
            return (f"version {theirs[at]} of {'.'.join(theirs[:at])} is not supported here "
                    f"(this consumer reads {mine})")
        return None

    def decode_on(self, subject: str, payload: bytes) -> T:
        """``decode`` for a message received on ``subject``: another version raises ValidationError."""
        why = self.foreign_version(subject)
        if why is not None:
            raise msgspec.ValidationError(why)
        return self.decoder.decode(payload)

    def encode(self, msg: T) -> bytes:
        return ENCODER.encode(msg)

    def decode(self, payload: bytes) -> T:
        """Raises msgspec.DecodeError (garbage) or msgspec.ValidationError (wrong shape)."""
        return self.decoder.decode(payload)

    def msg_id(self, msg: T, payload: bytes) -> str:
        if self.id_of is not None:
            return str(self.id_of(msg))
        return content_id(self.subject, payload)


def _joined(subject: str, names: tuple[str, ...]) -> str:
    return ".".join((subject, *(subject_token(n) for n in names)))


def event_channel(event_type: type[E], *, id_of: Callable[[E], str] | None = None,
                  dedupe: bool = True) -> Channel[E]:
    """The channel an event type is published on. A contract event's tag is its subject (what
    ``gpuaware.schemas.subject_of`` reads), so the subject is not named a second time beside its type."""
    subject = event_type.__struct_config__.tag
    if not isinstance(subject, str):
        raise TypeError(f"{event_type.__name__} has no subject: it is not a tagged event")
    return Channel(subject, event_type, id_of, dedupe)
