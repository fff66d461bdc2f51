"""W3C trace context across NATS: one pod's path from pending to bound is one trace.

Only the OpenTelemetry *API* is used: it is a no-op until a service installs an SDK, yet the
`traceparent`/`tracestate` headers are still carried, because a non-recording span keeps its
parent's span context. So propagation works in every process, and traces appear as soon as any
process along the path exports them. The global propagator is used (W3C trace context + baggage
unless `OTEL_PROPAGATORS` says otherwise), so the bus agrees with HTTP instrumentation.

Producers open a PRODUCER (or CLIENT) span around the send and inject its context; consumers
extract it and run the handler inside a CONSUMER (or SERVER) span that is its child, so
`trace.get_current_span()` inside a handler continues the producer's trace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.trace import Link, Span, SpanKind

_TRACER_NAME = "gpuaware.bus"
_UNKNOWN = object()
_PROVIDER_FROM_ENV = OTEL_PYTHON_TRACER_PROVIDER in os.environ
"""a provider named in the environment is loaded by the API on first use (read once: the
environment of a running service does not change)"""


def _tracer() -> trace.Tracer | None:
    """The bus's tracer, or None while no SDK is installed.

    Looked up per use: a service may install its TracerProvider after importing the bus. Without
    one, a span would be a non-recording copy of its parent's context, so skipping it carries
    exactly the same headers and saves a span's cost on every message of the telemetry path.
    """
    return trace.get_tracer(_TRACER_NAME) if recording() else None


def recording() -> bool:
    """Whether spans are recorded (an SDK is installed); without, only the context is carried.

    Asked for every message. `trace.get_tracer_provider()` looks `OTEL_PYTHON_TRACER_PROVIDER` up in
    os.environ on each call while no provider is set (an environment lookup per message); the
    provider it would return is read directly while one is set, and asked for only while none is
    and that variable names one to load."""
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _PROVIDER_FROM_ENV:
        return False
    if provider is None or provider is _UNKNOWN:
        provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider)


def _fields() -> set[str]:
    """The header names the global propagator reads."""
    return propagate.get_global_textmap().fields


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current context (`traceparent`, `tracestate`, baggage) into `headers`."""
    propagate.inject(headers)
    return headers


def extract(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The context carried by `headers` (an empty context when there is none)."""
    return propagate.extract(dict(headers) if headers else {})


@contextmanager
def send_span(subject: str, headers: MutableMapping[str, str], *, kind: SpanKind = SpanKind.PRODUCER,
              operation: str = "publish") -> Iterator[Span]:
    """A span around one send whose context is injected into `headers`."""
    tracer = _tracer()
    if tracer is None:
        propagate.inject(headers)
        yield trace.get_current_span()
        return
    with tracer.start_as_current_span(
        f"{operation} {subject}", kind=kind,
        attributes={"messaging.system": "nats", "messaging.destination.name": subject,
                    "messaging.operation.type": "send" if operation == "publish" else operation},
    ) as span:
        propagate.inject(headers)
        yield span


@contextmanager
def receive_span(subject: str, headers: Mapping[str, str] | None, *, kind: SpanKind = SpanKind.CONSUMER,
                 operation: str = "process", attributes: Mapping[str, str | int] | None = None,
                 ) -> Iterator[Span]:
    """Make the producer's context current and open a child span for handling one message.

    A message that carries no context (none of the propagator's headers) while no SDK is installed
    has nothing to make current or record: the handler runs as it is."""
    if (not headers or _fields().isdisjoint(headers)) and _tracer() is None:
        yield trace.INVALID_SPAN
        return
    parent = extract(headers)
    token = otel_context.attach(parent)
    try:
        tracer = _tracer()
        if tracer is None:
            yield trace.get_current_span()
            return
        attrs: dict[str, str | int] = {"messaging.system": "nats", "messaging.destination.name": subject,
                                       "messaging.operation.type": operation}
        if attributes:
            attrs.update(attributes)
        with tracer.start_as_current_span(f"{operation} {subject}", kind=kind, attributes=attrs) as span:
            yield span
    finally:
        otel_context.detach(token)


@contextmanager
def receive_batch_span(consumer: str, headers: Sequence[Mapping[str, str] | None]) -> Iterator[Span | None]:
    """One span for handling a whole batch, linked to each member's producer span (a batch has many
    parents, so links rather than a parent). Nothing at all while no SDK is installed."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    links = [Link(ctx) for h in headers if (ctx := trace.get_current_span(extract(h)).get_span_context()).is_valid]
    with tracer.start_as_current_span(f"process batch {consumer}", kind=SpanKind.CONSUMER, links=links,
                                      attributes={"messaging.system": "nats",
                                                  "messaging.batch.message_count": len(headers)}) as span:
        yield span
