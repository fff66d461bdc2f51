"""The alert-bridge service against a real Alertmanager (Debian's `prometheus-alertmanager`): an alert raised
on the bus shows firing in Alertmanager and resolved when the bus resolves it; an alert Prometheus would
fire, routed to the bridge's webhook, arrives on the bus (and back out as resolved); the bus's own alerts
coming back through the webhook are not published twice; a bad notification is refused with the reason;
the bridge is ready once Alertmanager answers."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import pytest
from alert_bridge_helpers import bridge_settings, get, running_bridge
from service_runner import streams_ready

from gpuaware import bus
from gpuaware.alerting import FINGERPRINT_LABEL, OpenAlerts, from_webhook, to_alertmanager
from gpuaware.devstack import ALERTMANAGER_MISSING, alertmanager_binary, free_port, start_alertmanager
from gpuaware.schemas import AlertRaised, AlertResolved, Severity, fingerprint

T0 = time.time()


def raised(rule: str = "gpu_quarantined", **kw: Any) -> AlertRaised:
    labels = {"cluster": "c1", "gpu": "GPU-1"}
    base = {"source": "health-scoring/h1", "emitted_at": time.time(), "cluster": "c1",
            "fingerprint": fingerprint(rule, labels), "rule": rule, "severity": Severity.CRITICAL,
            "summary": "GPU-1 quarantined: XID 79", "started_at": T0, "node": "node-a", "gpu_uuid": "GPU-1",
            "labels": {"model": "H100"}, "value": 79.0}
    return AlertRaised(**{**base, **kw})


def test_translation_both_ways() -> None:
    ev = raised()
    am = to_alertmanager(ev, generator_url="http://x")
    assert am["labels"] == {"alertname": "gpu_quarantined", "severity": "critical", "cluster": "c1", "node": "node-a",
                            "gpu_uuid": "GPU-1", "model": "H100", FINGERPRINT_LABEL: ev.fingerprint}
    assert am["annotations"] == {"summary": "GPU-1 quarantined: XID 79", "value": "79"} and "endsAt" not in am
    done = AlertResolved(source="h", emitted_at=T0 + 60, cluster="c1", fingerprint=ev.fingerprint, rule=ev.rule,
                         severity=ev.severity, started_at=T0, resolved_at=T0 + 60)
    assert to_alertmanager(done)["endsAt"].endswith("Z")
    book = OpenAlerts()  # a resolution carries its raised alert's labels: Alertmanager matches on them
    book.apply(ev)
    assert book.apply(done)["labels"] == am["labels"] and book.open == {}
    assert book.apply(raised(source="alertmanager/gpuaware")) is None and book.open == {}  # no loop
    note = {"receiver": "gpuaware", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "GpuawareSchedulerBacklog", "severity": "warning", "cluster": "c9"},
         "annotations": {"summary": "150 pods pending"}, "startsAt": "2026-11-26T01:00:00Z",
         "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "0123456789abcdef"},
        {"status": "firing", "labels": am["labels"], "annotations": {}, "startsAt": "2026-11-26T01:00:00Z",
         "fingerprint": "fedcba9876543210"}]}
    batch = from_webhook(note, cluster="c1", now=T0)
    (ev2,) = batch.events  # the bus's own alert is left out
    assert batch.own == 1 and batch.refused == []
    assert isinstance(ev2, AlertRaised) and ev2.rule == "GpuawareSchedulerBacklog" and ev2.cluster == "c9"
    assert ev2.source == "alertmanager/gpuaware" and ev2.summary == "150 pods pending"
    msgspec.json.decode(msgspec.json.encode(ev2), type=AlertRaised)  # valid by the contract


def _post(url: str, body: Any) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


async def _until(check: Any, what: str, timeout: float = 30.0, detail: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(check)
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f": {detail()}" if detail else ""))
        await asyncio.sleep(0.3)


@pytest.mark.timeout(120)
@pytest.mark.skipif(alertmanager_binary() is None, reason=ALERTMANAGER_MISSING)
async def test_bridge_with_a_real_alertmanager(tmp_path: Path, nats_proc: Any) -> None:
    hook = free_port()
    am = await asyncio.to_thread(start_alertmanager, tmp_path / "am",
                                   webhook_urls=[f"http://127.0.0.1:{hook}/webhook"])
    url = am.url
    try:
        async with streams_ready(nats_proc.url, name="test") as nc:
            js = nc.jetstream()
            got: list[AlertRaised | AlertResolved] = []

            async def on(msg: Any) -> None:
                got.append(msgspec.json.decode(msg.data, type=AlertRaised | AlertResolved))

            await nc.subscribe("alerts.gpu.>", cb=on)
            ev = raised()
            await bus.publish(js, bus.Channel("alerts.gpu.raised.v1", AlertRaised).at("c1"), ev)  # open before start
            settings = bridge_settings(nats_proc.url, alertmanager_url=url, listen_port=hook, cluster="c1",
                                       resend_s=2.0)
            async with running_bridge(settings) as bridge:
                assert await get(f"http://127.0.0.1:{hook}/readyz") == (
                    200, {"ready": True, "nats": True, "alertmanager": True})
                # out: the bus's alert, raised before the bridge started, fires in Alertmanager
                firing = await _until(lambda: [a for a in am.alerts()
                                               if a["labels"].get(FINGERPRINT_LABEL) == ev.fingerprint], "our alert")
                assert firing[0]["status"]["state"] == "active" and firing[0]["labels"]["alertname"] == "gpu_quarantined"
                assert firing[0]["annotations"]["summary"] == ev.summary
                # ... Alertmanager notified the webhook of it, and the bridge did not publish it back
                await _until(lambda: bridge.stats.skipped_own >= 1 or None, "the notification of our alert")
                assert not [e for e in got if e.source.startswith("alertmanager/")]
                # resolved on the bus -> resolved in Alertmanager
                await bus.publish(js, bus.Channel("alerts.gpu.resolved.v1", AlertResolved).at("c1"), AlertResolved(
                    source="health-scoring/h1", emitted_at=time.time(), cluster="c1", fingerprint=ev.fingerprint,
                    rule=ev.rule, severity=ev.severity, started_at=ev.started_at, resolved_at=time.time()))
                await _until(lambda: not [a for a in am.alerts()
                                          if a["labels"].get(FINGERPRINT_LABEL) == ev.fingerprint
                                          and a["status"]["state"] == "active"] or None, "our alert resolved",
                             detail=lambda: (bridge.stats, bridge.forwarder.alerts.open, am.alerts()))
                assert bridge.forwarder.alerts.open == {}
                # in: an alert as Prometheus fires it, for a cluster with dots in its name, routed to the
                # bridge's webhook, lands on the bus
                prom = {"labels": {"alertname": "GpuawareSchedulerBacklog", "severity": "warning",
                                   "cluster": "prod.eu-west-1"},
                        "annotations": {"summary": "150 pods pending in cluster prod.eu-west-1"},
                        "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                status, _ = await asyncio.to_thread(_post, f"{url}/api/v2/alerts", [prom])
                assert status == 200
                arrived = await _until(lambda: [e for e in got if isinstance(e, AlertRaised)
                                                and e.rule == "GpuawareSchedulerBacklog"], "the Prometheus alert on the bus")
                assert arrived[0].source == "alertmanager/gpuaware" and arrived[0].severity == Severity.WARNING
                assert arrived[0].cluster == "prod.eu-west-1"
                prom["endsAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                await asyncio.to_thread(_post, f"{url}/api/v2/alerts", [prom])
                await _until(lambda: [e for e in got if isinstance(e, AlertResolved)
                                      and e.rule == "GpuawareSchedulerBacklog"], "its resolution on the bus")
                # ... and what came from Alertmanager is not sent back to it
                assert [a["labels"]["alertname"] for a in await asyncio.to_thread(am.alerts)
                        if FINGERPRINT_LABEL in a["labels"] and a["labels"]["alertname"].startswith("Gpuaware")] == []
                # a bad notification is refused with the reason, nothing published
                before = len(got)
                status, body = await asyncio.to_thread(_post, f"http://127.0.0.1:{hook}/webhook", {"alerts": 3})
                assert status == 400 and "no `alerts` list" in body["error"]
                assert len(got) == before and bridge.stats.bad_notifications == 1
    finally:
        am.stop()
