"""W3C trace context crosses the bus: a handler continues the producer's trace."""

from __future__ import annotations

import msgspec
from bus_helpers import Names, Sample
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from service_runner import eventually

from gpuaware import bus

# a private provider: the test must not install a global one other tests would inherit
tracer = TracerProvider().get_tracer("bus-tests")


def current_ids() -> tuple[int, int]:
    ctx = trace.get_current_span().get_span_context()
    return ctx.trace_id, ctx.span_id


async def test_consumer_handler_sees_producer_trace(js, stream, channel, names: Names) -> None:
    seen: list[tuple[int, int, str]] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        trace_id, _ = current_ids()
        seen.append((trace_id, msg.util, ctx.headers.get("traceparent", "")))

    with tracer.start_as_current_span("schedule pod") as producer:
        await bus.publish(js, channel, Sample(id="t1", gpu="g", util=1.0))
    await bus.publish(js, channel, Sample(id="t2", gpu="g", util=2.0))  # no active trace

    async with await bus.subscribe_durable(js, channel, names.durable(), handle) as consumer:
        await eventually(lambda: consumer.stats.processed == 2, what="2 processed")
    want = producer.get_span_context().trace_id
    assert seen[0][0] == want
    assert seen[0][2].startswith(f"00-{want:032x}-")
    assert seen[1][0] != want  # context does not leak from one message to the next


class Ask(msgspec.Struct, frozen=True):
    n: int


class Answer(msgspec.Struct, frozen=True):
    trace_id: int


async def test_service_handler_sees_caller_trace(nc, names: Names) -> None:
    async def where(req: Ask) -> Answer:
        return Answer(trace_id=current_ids()[0])

    svc = await bus.add_service(nc, f"tr-{names.token}", "0.1.0", [bus.Endpoint("where", f"{names.subject}.where", Ask, where)])
    try:
        with tracer.start_as_current_span("explain") as caller:
            answer = await bus.request(nc, f"{names.subject}.where", Ask(1), Answer)
    finally:
        await svc.stop()
    assert answer.trace_id == caller.get_span_context().trace_id


async def test_with_an_sdk_the_consumer_span_is_a_child_of_the_publish_span(
        js, stream, channel, names: Names, monkeypatch) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gpuaware.bus import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # as if the service had installed this provider globally (a global one would leak into other tests)
    monkeypatch.setattr(tracing, "_tracer", lambda: provider.get_tracer("gpuaware.bus"))

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        pass

    with provider.get_tracer("bus-tests").start_as_current_span("schedule pod"):
        await bus.publish(js, channel, Sample(id="sdk", gpu="g", util=1.0))
    async with await bus.subscribe_durable(js, channel, names.durable(), handle) as consumer:
        await eventually(lambda: consumer.stats.processed == 1, what="processed")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root, send, process = spans["schedule pod"], spans[f"publish {names.subject}"], spans[f"process {names.subject}"]
    assert send.parent.span_id == root.context.span_id and send.kind == trace.SpanKind.PRODUCER
    assert process.parent.span_id == send.context.span_id and process.kind == trace.SpanKind.CONSUMER
    assert process.context.trace_id == root.context.trace_id
    assert process.attributes["messaging.consumer.group.name"] == names.durable()


def test_a_message_without_context_leaves_the_handlers_context_alone() -> None:
    from opentelemetry import context as otel_context

    from gpuaware.bus import tracing

    with tracer.start_as_current_span("around"):  # e.g. a service task that runs inside a span
        outer = current_ids()
        before = otel_context.get_current()
        with tracing.receive_span("s", {}):
            assert current_ids() == outer and otel_context.get_current() is before  # nothing attached
        carried: dict[str, str] = {}
        with tracer.start_as_current_span("producer"):
            tracing.inject(carried)
            producer = current_ids()
        with tracing.receive_span("s", {"Nats-Msg-Id": "x", **carried}):
            assert current_ids() == producer  # the producer's context is current
        assert current_ids() == outer


def test_recording_follows_the_global_provider_without_reading_the_environment_each_time(monkeypatch) -> None:
    from gpuaware.bus import tracing

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    assert not tracing.recording()  # no SDK, none named in the environment
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", TracerProvider())
    assert tracing.recording()  # a service installed one after importing the bus
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", trace.ProxyTracerProvider())
    assert not tracing.recording()
    # one named in the environment is loaded by the API on first use: asked for while none is set
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(tracing, "_PROVIDER_FROM_ENV", True)
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    assert tracing.recording()
