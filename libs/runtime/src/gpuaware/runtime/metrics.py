"""Prometheus metrics of one service process: one registry, served over HTTP on ``metrics_port``.

Why a registry per process rather than prometheus_client's global one: registries have no import side
effects (house style), and a test can run several services in one process without their series
mixing. Two ways in:

* **read at scrape time** (``ServiceMetrics.source``): what a service counts already (the numbers of
  its stats endpoint, its ledger's phases, its lease) becomes gauges and counters when Prometheus
  scrapes, so the hot path pays nothing and the two views can never disagree;
* **observed where it happens** (``histogram`` / ``counter``): latencies, which need every observation.

Every series carries the process's ``service``, ``cluster`` and ``instance`` labels (Prometheus's
``instance`` target label is the scrape address; ours is the service's own id), and every process
exposes ``gpuaware_service_info{version} 1`` so a dashboard can count what runs. Names follow
Prometheus's conventions: ``gpuaware_<service>_<what>_<unit>``, ``_total`` for counters.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["Sample", "ServiceMetrics", "consumer_samples", "counter", "counter_totals", "gauge"]

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0

#: pending -> decided latencies and other request-scale timings, in seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class Sample:
    """One value read at scrape time: a gauge or a counter (``name`` without ``_total``)."""

    name: str
    kind: Literal["gauge", "counter"]
    doc: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


def gauge(name: str, doc: str, value: float, **labels: str) -> Sample:
    return Sample(name, "gauge", doc, float(value), labels)


def counter(name: str, doc: str, value: float, **labels: str) -> Sample:
    return Sample(name, "counter", doc, float(value), labels)


def counter_totals(text: str, names: Iterable[str]) -> dict[str, float]:
    """The counters ``names`` (without ``_total``) in a scraped ``/metrics`` text, each summed over its
    label sets; 0 for a counter the text lacks (a tool reading a service's counters, as the demo does)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = set(names)
    out = dict.fromkeys(wanted, 0.0)
    for family in text_string_to_metric_families(text):
        if family.name in wanted:
            out[family.name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def consumer_samples(consumers: Iterable[Any]) -> Iterable[Sample]:
    """Every durable consumer's counters (``bus.ConsumerStats``), labelled ``consumer="<stream>/<durable>"``:
    messages handled, dead-lettered, undecodable, and its lag (messages still waiting)."""
    for c in consumers:
        name, st = f"{c.stream}/{c.durable}", c.stats
        yield counter("gpuaware_bus_messages_received", "messages delivered to the consumer", st.received,
                      consumer=name)
        yield counter("gpuaware_bus_messages_processed", "messages handled and acked", st.processed, consumer=name)
        yield counter("gpuaware_bus_dead_letters", "messages sent to deadletter.<subject> with the reason",
                      st.dead_lettered, consumer=name)
        yield counter("gpuaware_bus_decode_errors", "undecodable or schema-violating messages", st.decode_errors,
                      consumer=name)
        yield gauge("gpuaware_bus_consumer_lag_messages", "messages still waiting for the consumer", st.pending,
                    consumer=name)


class _ScrapeTime:
    """A prometheus_client collector that asks the service's sources at each scrape, on the service's
    event loop (the state they read is the loop's: reading it from the HTTP server's thread could meet
    a dict changing size mid-iteration)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def _read(self) -> list[Sample]:
        out: list[Sample] = []
        for source in list(self.metrics.sources):
            try:
                out.extend(source())
            except Exception:  # a broken source must not take the scrape (and every other series) down
                log.exception("metrics source %r failed", source)
        return out

    def collect(self) -> Iterable[Metric]:
        loop = self.metrics.loop
        if loop is not None and loop.is_running():
            async def read() -> list[Sample]:
                return self._read()

            try:
                samples = asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=SCRAPE_TIMEOUT_S)
            except Exception as exc:  # the loop is stuck or stopping: the histograms still answer
                log.warning("metrics: the service's sources did not answer (%s)", type(exc).__name__)
                samples = []
        else:
            samples = self._read()
        families: dict[str, tuple[Any, list[str]]] = {}
        base = self.metrics.base_labels
        for s in samples:
            labels = {**base, **s.labels}
            if s.name not in families:
                cls = GaugeMetricFamily if s.kind == "gauge" else CounterMetricFamily
                families[s.name] = (cls(s.name, s.doc, labels=list(labels)), list(labels))
            family, order = families[s.name]
            family.add_metric([labels.get(k, "") for k in order], s.value)
        for family, _ in families.values():
            yield family

    def describe(self) -> Iterable[Metric]:
        return []


class ServiceMetrics:
    def __init__(self, service: str, version: str, cluster: str, instance: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.base_labels = {"service": service, "cluster": cluster, "instance": instance}
        self.version = version
        self.sources: list[Callable[[], Iterable[Sample]]] = [self._info]
        self.registry.register(_ScrapeTime(self))
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def _info(self) -> Iterable[Sample]:
        yield gauge("gpuaware_service_info", "1 for every running gpuaware service process", 1, version=self.version)

    def source(self, fn: Callable[[], Iterable[Sample]]) -> None:
        """Read ``fn()`` at every scrape (keep it cheap: it runs on the scrape's thread)."""
        self.sources.append(fn)

    def histogram(self, name: str, doc: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = LATENCY_BUCKETS) -> Histogram:
        """A histogram observed on the hot path, with the process's labels already applied when
        ``labels`` is empty (otherwise call ``.labels(...)`` with the base labels and yours)."""
        names = [*self.base_labels, *labels]
        h = Histogram(name, doc, names, buckets=buckets, registry=self.registry)
        return h.labels(**self.base_labels) if not labels else h

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``port`` (0: a free one); returns the port. Called on the service's
        event loop, where the sources are then read."""
        self.loop = asyncio.get_running_loop()
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", addr, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
