"""gpuaware.runtime: what every service process shares, and nothing service-specific.

Settings from a prefixed environment (`ServiceSettings`; `DatabaseSettings` for a service with a
database pool), structured logging with secrets scrubbed, OpenTelemetry set-up, signal handling and a graceful drain (`run_service`), a NATS
micro identity with stats for every instance, and Prometheus metrics on `metrics_port` (`metrics`).
Long-running loops run supervised (`supervise`, `Supervisor`: restarted after a failure, the service
stopped non-zero when one keeps failing); a configuration reload that fails is told (`ReloadAlarm`).
"""

from gpuaware.runtime.logs import setup_logging
from gpuaware.runtime.metrics import Sample, consumer_samples, counter, counter_totals, gauge
from gpuaware.runtime.reloads import RELOAD_RULE, ReloadAlarm
from gpuaware.runtime.service import (
    Mount,
    ServiceContext,
    StreamsNotProvisioned,
    provision_streams,
    run_service,
)
from gpuaware.runtime.settings import DatabaseSettings, ServiceSettings, SettingsError, redact_url
from gpuaware.runtime.signals import stop_on_signals
from gpuaware.runtime.supervision import Supervisor, TaskGaveUp, supervise
from gpuaware.runtime.tracing import setup_tracing

__all__ = [
    "RELOAD_RULE",
    "DatabaseSettings",
    "Mount",
    "ReloadAlarm",
    "Sample",
    "ServiceContext",
    "ServiceSettings",
    "SettingsError",
    "StreamsNotProvisioned",
    "Supervisor",
    "TaskGaveUp",
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
    "supervise",
]
