"""Declaring streams and durable consumers: idempotent, converging, safe to run at every start.

Every service declares the streams and consumers it needs when it starts (`ensure_*`), instead
of relying on an out-of-band setup step: the call creates what is missing, updates what differs
(logging the difference), and does nothing when the server already matches. What the server cannot
change in place (storage type, some retention moves) fails loudly with `StreamConfigError`
naming the field, rather than silently running on a config nobody asked for.

Streams are described by any object with the attributes of `gpuaware.schemas.streams.StreamSpec`
(`StreamSpecLike`), so the contract lives in `schemas/` and this module stays a translator.
Consumers are always durable pull consumers with explicit acks: pull lets each replica take work
at its own pace (scaling by adding replicas on the same durable), explicit acks are what make
redelivery after a crash possible.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from gpuaware.bus.errors import StreamConfigError, StreamPermissionError

log = logging.getLogger(__name__)

JetStream = JetStreamContext

_RETENTION = {"limits": api.RetentionPolicy.LIMITS, "workqueue": api.RetentionPolicy.WORK_QUEUE,
              "interest": api.RetentionPolicy.INTEREST}
_STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}


class StreamSpecLike(Protocol):
    """The attributes `ensure_stream` reads (what `gpuaware.schemas.streams.StreamSpec` has).

    Zero or negative limits mean "unlimited"; `duplicate_window_s` 0 means the server default (2 min).
    Optional attributes, read when present: `discard` ("old" | "new", default "old") and
    `description`.
    """

    @property
    def name(self) -> str: ...
    @property
    def subjects(self) -> Sequence[str]: ...
    @property
    def retention(self) -> str: ...
    @property
    def max_age_s(self) -> float | None: ...
    @property
    def max_msgs(self) -> int | None: ...
    @property
    def max_bytes(self) -> int | None: ...
    @property
    def duplicate_window_s(self) -> float | None: ...
    @property
    def storage(self) -> str: ...
    @property
    def replicas(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SimpleStreamSpec:
    """A StreamSpecLike for streams the bus itself owns (the dead-letter stream) and for tests."""

    name: str
    subjects: tuple[str, ...]
    retention: str = "limits"
    max_age_s: float | None = None
    max_msgs: int | None = None
    max_bytes: int | None = None
    duplicate_window_s: float | None = None
    storage: str = "file"
    replicas: int = 1
    discard: str = "old"
    description: str = ""


_DISCARD = {"old": api.DiscardPolicy.OLD, "new": api.DiscardPolicy.NEW}


def _limit(value: int | None) -> int:
    return int(value) if value is not None and value > 0 else -1


def stream_config(spec: StreamSpecLike) -> api.StreamConfig:
    """Translate a spec into the server's stream configuration."""
    try:
        retention = _RETENTION[spec.retention]
        storage = _STORAGE[spec.storage]
        discard = _DISCARD[getattr(spec, "discard", "old") or "old"]
    except KeyError as exc:
        raise ValueError(f"stream {spec.name}: unknown retention/storage/discard {exc.args[0]!r}") from None
    return api.StreamConfig(
        name=spec.name,
        description=getattr(spec, "description", None) or None,
        subjects=list(spec.subjects),
        retention=retention,
        storage=storage,
        discard=discard,
        max_age=float(spec.max_age_s) if spec.max_age_s and spec.max_age_s > 0 else 0.0,
        max_msgs=_limit(spec.max_msgs),
        max_bytes=_limit(spec.max_bytes),
        duplicate_window=float(spec.duplicate_window_s or 0.0),
        num_replicas=max(1, int(spec.replicas or 1)),
    )


def stream_diff(want: api.StreamConfig, have: api.StreamConfig) -> dict[str, tuple[Any, Any]]:
    """Fields whose wanted value differs from the server's: {field: (want, have)}.

    A zero duplicate window means "server default", so it is not compared.
    """
    diff: dict[str, tuple[Any, Any]] = {}
    pairs: list[tuple[str, Any, Any]] = [
        ("subjects", sorted(want.subjects or []), sorted(have.subjects or [])),
        ("retention", want.retention, have.retention),
        ("storage", want.storage, have.storage),
        ("discard", want.discard or "old", have.discard or "old"),
        ("description", want.description or "", have.description or ""),
        ("max_age", want.max_age or 0.0, have.max_age or 0.0),
        ("max_msgs", want.max_msgs, have.max_msgs),
        ("max_bytes", want.max_bytes, have.max_bytes),
        ("num_replicas", want.num_replicas or 1, have.num_replicas or 1),
    ]
    if want.duplicate_window:
        pairs.append(("duplicate_window", want.duplicate_window, have.duplicate_window))
    for name, w, h in pairs:
        if isinstance(w, float) or isinstance(h, float):
            if abs(float(w) - float(h or 0)) > 1e-6:
                diff[name] = (w, h)
        elif w != h:
            diff[name] = (w, h)
    return diff


#: differences a service can live with when it may not fix them (limits, description, replicas may
#: differ; what the stream captures and how it keeps it may not)
INCOMPATIBLE_FIELDS = frozenset({"subjects", "retention", "storage"})


def stream_compatible(diff: dict[str, tuple[Any, Any]]) -> bool:
    """Whether a stream differing from its spec by `diff` (`stream_diff`) still serves the contract."""
    return not (INCOMPATIBLE_FIELDS & set(diff))


def refused(js: JetStreamContext, subject: str) -> bool:
    """True when the server's last error on this connection refused publishing to `subject`
    (a user without the permission: the server answers with an error, the request times out)."""
    err = getattr(js._nc, "last_error", None)  # nats-py keeps the last -ERR; it lower-cases it
    text = str(err or "").lower()
    return "permissions violation" in text and f'"{subject.lower()}"' in text


def cluster_replicas(js: JetStreamContext) -> int:
    """How many replicas what we create should have on this server: 1 on a single server, the
    cluster's size up to 3 in a JetStream cluster (from the server's INFO: its cluster name and the
    client URLs of every node). So a stream or bucket a service creates on a cluster survives a lost
    node without any setting, and the same code runs unchanged on one server."""
    info = getattr(js._nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    return max(1, min(3, len(info.get("connect_urls") or ())))


async def ensure_stream(js: JetStreamContext, spec: StreamSpecLike) -> api.StreamInfo:
    """Create the stream, or update it when its configuration differs; return its info.

    Raises `StreamPermissionError` (carrying the server's info, None when the stream is missing, and
    the differences) when this user may not create or update it: least-privilege service users
    leave that to an admin (`gpuaware.schemas.permissions`).
    """
    want = stream_config(spec)
    want.num_replicas = max(want.num_replicas or 1, cluster_replicas(js))
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError:
        try:
            info = await js.add_stream(want)
        except APIError as exc:
            raise StreamConfigError(f"cannot create stream {spec.name}: {exc.description}") from exc
        except NatsTimeoutError:
            if refused(js, f"{js._prefix}.STREAM.CREATE.{spec.name}"):
                raise StreamPermissionError(
                    f"stream {spec.name} does not exist and this user may not create it "
                    f"(provision the streams as admin)", stream=spec.name, info=None, diff={}) from None
            raise
        log.info("stream %s created (subjects %s)", spec.name, list(spec.subjects))
        return info
    # never fewer replicas than the stream has: a service started without knowing of the cluster
    # (or an R1 spec) must not take an R3 stream's redundancy away
    want.num_replicas = max(want.num_replicas or 1, info.config.num_replicas or 1)
    diff = stream_diff(want, info.config)
    if not diff:
        return info
    log.info("stream %s differs, updating: %s", spec.name,
             ", ".join(f"{k}: {h!r} -> {w!r}" for k, (w, h) in diff.items()))
    try:
        return await js.update_stream(want)
    except APIError as exc:
        raise StreamConfigError(
            f"cannot update stream {spec.name} ({', '.join(diff)}): {exc.description}") from exc
    except NatsTimeoutError:
        if refused(js, f"{js._prefix}.STREAM.UPDATE.{spec.name}"):
            raise StreamPermissionError(
                f"stream {spec.name} differs ({', '.join(diff)}) and this user may not update it",
                stream=spec.name, info=info, diff=diff) from None
        raise


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer with explicit acks."""

    durable: str
    filter_subject: str | None = None
    """only these subjects of the stream (None: all of them)"""
    ack_wait: float = 30.0
    """seconds a delivered, unacked message waits before it is redelivered (a crashed consumer)"""
    max_deliver: int = 5
    """deliveries before the server stops redelivering; the bus dead-letters on the last one"""
    backoff: tuple[float, ...] = ()
    """redelivery delays after ack timeouts, by attempt (overrides ack_wait; len < max_deliver)"""
    max_ack_pending: int = 1000
    """unacked messages in flight across all replicas of this durable: the back-pressure bound"""
    deliver_policy: str = "all"
    """where a new durable starts: 'all' (replay the stream) or 'new'"""

    def config(self) -> api.ConsumerConfig:
        if self.max_deliver < 1:
            raise ValueError("max_deliver must be >= 1")
        if self.backoff and len(self.backoff) >= self.max_deliver and self.max_deliver > 0:
            raise ValueError("backoff must have fewer entries than max_deliver")
        return api.ConsumerConfig(
            durable_name=self.durable,
            deliver_policy=api.DeliverPolicy(self.deliver_policy),
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            backoff=list(self.backoff) or None,
            filter_subject=self.filter_subject,
            max_ack_pending=self.max_ack_pending,
        )


def consumer_diff(want: api.ConsumerConfig, have: api.ConsumerConfig) -> dict[str, tuple[Any, Any]]:
    """Fields whose wanted value differs from the server's: {field: (want, have)}."""
    diff: dict[str, tuple[Any, Any]] = {}
    pairs: list[tuple[str, Any, Any]] = [
        ("filter_subject", want.filter_subject or None, have.filter_subject or None),
        ("max_deliver", want.max_deliver, have.max_deliver),
        ("max_ack_pending", want.max_ack_pending, have.max_ack_pending),
        ("backoff", list(want.backoff or []), list(have.backoff or [])),
        ("ack_policy", want.ack_policy, have.ack_policy),
        ("deliver_policy", want.deliver_policy, have.deliver_policy),
    ]
    if not want.backoff:  # with a backoff list the server derives ack_wait from it
        pairs.append(("ack_wait", want.ack_wait, have.ack_wait))
    for name, w, h in pairs:
        if isinstance(w, float) or isinstance(h, float):
            if abs(float(w or 0) - float(h or 0)) > 1e-6:
                diff[name] = (w, h)
        elif isinstance(w, list):
            if [round(x, 6) for x in w] != [round(x, 6) for x in h]:
                diff[name] = (w, h)
        elif w != h:
            diff[name] = (w, h)
    return diff


async def ensure_consumer(js: JetStreamContext, stream: str, spec: ConsumerSpec) -> api.ConsumerInfo:
    """Create the durable consumer, or update it when its configuration differs; return its info."""
    want = spec.config()
    try:
        info: api.ConsumerInfo = await js.consumer_info(stream, spec.durable)
    except NotFoundError:
        try:
            info = await js.add_consumer(stream, want)
        except APIError as exc:
            raise StreamConfigError(
                f"cannot create consumer {stream}/{spec.durable}: {exc.description}") from exc
        log.info("consumer %s/%s created", stream, spec.durable)
        return info
    diff = consumer_diff(want, info.config)
    if not diff:
        return info
    log.info("consumer %s/%s differs, updating: %s", stream, spec.durable,
             ", ".join(f"{k}: {h!r} -> {w!r}" for k, (w, h) in diff.items()))
    try:
        # creating an existing durable with a new config updates it (create-or-update semantics)
        return await js.add_consumer(stream, want)
    except APIError as exc:
        raise StreamConfigError(
            f"cannot update consumer {stream}/{spec.durable} ({', '.join(diff)}): {exc.description}") from exc
