"""ServiceMetrics: one registry per process, sources read on the service's loop at scrape time, the
process's labels on every series, a broken source costing only its own series."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gpuaware.runtime.metrics import ServiceMetrics, consumer_samples, counter, gauge


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


class Stats:
    received, processed, dead_lettered, decode_errors, pending = 10, 9, 1, 1, 42


class Consumer:
    stream, durable, stats = "BINDER", "binder", Stats()


async def test_sources_histograms_and_labels_over_http() -> None:
    m = ServiceMetrics("placement", "1.2.3", "c1", "p1")
    ticks = {"n": 0}

    def source():
        ticks["n"] += 1  # read at every scrape, on the loop
        assert asyncio.get_running_loop() is loop
        yield gauge("gpuaware_placement_leader", "leads", 1)
        yield counter("gpuaware_placement_decisions", "decided", 7)
        yield gauge("gpuaware_placement_pods", "by phase", 3, phase="pending")
        yield gauge("gpuaware_placement_pods", "by phase", 5, phase="holding")

    def broken():
        raise RuntimeError("boom")

    loop = asyncio.get_running_loop()
    m.source(source)
    m.source(broken)
    m.source(lambda: consumer_samples([Consumer()]))
    latency = m.histogram("gpuaware_placement_decision_latency_seconds", "pending -> decided")
    for v in (0.004, 0.004, 0.3):
        latency.observe(v)
    port = m.serve(0)
    try:
        got = await asyncio.to_thread(scrape, port)
    finally:
        await m.stop()
    base = {"service": "placement", "cluster": "c1", "instance": "p1"}
    assert got["gpuaware_service_info"] == [({**base, "version": "1.2.3"}, 1.0)]
    assert got["gpuaware_placement_leader"] == [(base, 1.0)]
    assert got["gpuaware_placement_decisions_total"] == [(base, 7.0)]
    assert sorted((lab["phase"], v) for lab, v in got["gpuaware_placement_pods"]) == [("holding", 5.0), ("pending", 3.0)]
    assert got["gpuaware_bus_consumer_lag_messages"] == [({**base, "consumer": "BINDER/binder"}, 42.0)]
    assert got["gpuaware_bus_dead_letters_total"] == [({**base, "consumer": "BINDER/binder"}, 1.0)]
    assert dict((lab["le"], v) for lab, v in got["gpuaware_placement_decision_latency_seconds_bucket"])["0.005"] == 2.0
    assert got["gpuaware_placement_decision_latency_seconds_count"] == [(base, 3.0)]
    assert ticks["n"] == 1


async def test_a_stuck_loop_costs_the_sources_not_the_endpoint(monkeypatch) -> None:
    from gpuaware.runtime import metrics as module

    monkeypatch.setattr(module, "SCRAPE_TIMEOUT_S", 0.2)
    m = ServiceMetrics("quota", "0", "c", "q")
    release = threading.Event()

    def stuck():  # the service's loop is busy (here: in this very source) when Prometheus scrapes
        release.wait(10)
        return [gauge("gpuaware_quota_jain_index", "jain", 0.9)]

    m.source(stuck)
    h = m.histogram("gpuaware_x_seconds", "x")
    h.observe(1.0)
    port = m.serve(0)

    def scrape_then_release():
        try:
            return scrape(port)
        finally:
            release.set()

    try:
        got = await asyncio.to_thread(scrape_then_release)
    finally:
        await m.stop()
    assert "gpuaware_quota_jain_index" not in got  # the sources could not be read on the stuck loop
    assert got["gpuaware_x_seconds_count"][0][1] == 1.0  # the histograms still answer
