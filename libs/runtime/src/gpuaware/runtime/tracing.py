"""OpenTelemetry set-up: one TracerProvider per process named after the service.

The bus injects and extracts W3C trace context, so a pod's path from pending to bound is one
trace across services; this module only decides where spans go: nowhere, the console, an in-memory
exporter that tests read, or OTLP over HTTP (``otlp``: to a collector, Jaeger, Tempo...; where is the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, batching the standard
``OTEL_BSP_*``). ``shutdown_tracing`` flushes what is batched when the service stops.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def setup_tracing(service: str, exporter: str = "none", instance_id: str = "") -> InMemorySpanExporter | None:
    """Install the global TracerProvider; returns the in-memory exporter when `exporter == "memory"`.

    With `exporter == "none"` no SDK is installed: spans that go nowhere would still cost their
    creation on every message (a quarter of the collector's CPU at telemetry rates), while the API's
    no-op tracer keeps propagating the callers' trace context through the bus headers unchanged.
    """
    if exporter == "none":
        return None
    resource = Resource.create({"service.name": service, "service.instance.id": instance_id or service})
    provider = TracerProvider(resource=resource)
    memory: InMemorySpanExporter | None = None
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "memory":
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        raise ValueError(f"unknown OpenTelemetry exporter {exporter!r}: use none, console, memory or otlp")
    trace.set_tracer_provider(provider)
    return memory


def shutdown_tracing() -> None:
    """Export what the batch processor still holds (the service is stopping)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(5_000)
