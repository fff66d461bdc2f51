"""The demo's record of Alertmanager's notifications (one cluster's bus alerts, first firing and first
resolved), the report's line about it, and the reason given when the bridge cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaware.cli import demo_alerts
from gpuaware.cli.demo_alerts import DemoAlerting, Notifications, describe_alerting
from gpuaware.cli.demo_config import DemoConfig, RunSpec


def alert(status: str, fp: str | None, cluster: str = "run-gpuaware") -> dict:
    labels = {"alertname": "gpu_quarantined", "severity": "critical", "cluster": cluster, "gpu_uuid": "GPU-1"}
    if fp:
        labels["gpuaware_fingerprint"] = fp
    return {"status": status, "labels": labels}


def test_notifications_keep_the_run_clusters_bus_alerts() -> None:
    notes = Notifications("run-gpuaware")
    notes.record({"alerts": [alert("firing", "a"), alert("firing", "b", cluster="other"), alert("firing", None)]}, 10.0)
    notes.record({"alerts": [alert("firing", "a"), alert("resolved", "c")]}, 11.0)  # c: raised and resolved at once
    notes.record({"alerts": [alert("resolved", "a")]}, 12.0)
    assert notes.received == 3
    assert {fp: (a["fired_at"], a["resolved_at"]) for fp, a in notes.alerts.items()} == {
        "a": (10.0, 12.0), "c": (None, 11.0)}


@pytest.mark.parametrize("am, line", [
    (None, "not started"),
    ({"status": "skipped: Alertmanager is not installed"}, "skipped: Alertmanager is not installed"),
    ({"status": "took part", "fired": 3, "resolved": 2, "active_at_end": 1, "bridge": {"alerts_posted": 7.0}},
     "took part (gpuaware run: 3 alerts notified firing by Alertmanager, 2 resolved, 1 active at the end; "
     "7 alerts posted by the bridge)"),
])
def test_the_report_line(am: dict | None, line: str) -> None:
    assert describe_alerting(am) == line


async def test_without_alertmanager_the_bridge_is_skipped_with_the_reason(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_alerts, "alertmanager_binary", lambda: None)
    cfg = DemoConfig(out=tmp_path, run_id="demo-x", duration_s=10, window_s=200.0, speed=20.0, trace="generator",
                     nodes="default", default_nodes=4, load=0.8, seed=0, max_pods=0, slo_s=60.0)
    alerting = DemoAlerting(cfg, RunSpec(label="gpuaware", policy="gpuaware", cluster="run-gpuaware"))

    def never(*_args: object) -> None:
        raise AssertionError("no process may start")

    assert await alerting.start(never, "nats://127.0.0.1:4222") is None
    assert alerting.status.startswith("skipped: Alertmanager is not installed")
    assert await alerting.finish(set()) == {"status": alerting.status}
