"""gpuaware.runtime: what every service process shares, and nothing service-specific.

Settings from a prefixed environment (`ServiceSettings`; `DatabaseSettings` for a service with a
database pool), structured logging with secrets scrubbed, OpenTelemetry set-up, signal handling and a graceful drain (`run_service`), a NATS
micro identity with stats for every instance, and Prometheus metrics on `metrics_port` (`metrics`).
"""

from gpuaware.runtime.logs import setup_logging
from gpuaware.runtime.metrics import Sample, consumer_samples, counter, counter_totals, gauge
from gpuaware.runtime.service import (
    Mount,
    ServiceContext,
    StreamsNotProvisioned,
    provision_streams,
    run_service,
)
from gpuaware.runtime.settings import DatabaseSettings, ServiceSettings, SettingsError, redact_url
from gpuaware.runtime.signals import stop_on_signals
from gpuaware.runtime.tracing import setup_tracing

__all__ = [
    "DatabaseSettings",
    "Mount",
    "Sample",
    "ServiceContext",
    "ServiceSettings",
    "SettingsError",
    "StreamsNotProvisioned",
    "consumer_samples",
    "counter",
    "counter_totals",
    "gauge",
    "provision_streams",
    "redact_url",
    "run_service",
    "setup_logging",
    "setup_tracing",
    "stop_on_signals",
]
