"""The alert bridge under least privilege: the real service, logged in as ``alert-bridge`` on an auth-enabled
server whose streams an admin provisioned, publishes a webhook's alerts (a dotted cluster included) and
dead-letters a bad one, follows the alerts health-scoring raises and posts them to a real Alertmanager; its
user may not publish anything else or administer streams."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from permissions_helpers import assert_publish_refused, assert_stream_admin_refused
from service_runner import eventually, in_process, quiet_settings

from gpuaware import bus
from gpuaware.devstack import ALERTMANAGER_MISSING, alertmanager_binary, free_port, start_alertmanager
from gpuaware.schemas import (
    ALERT_RAISED,
    GPU_STATE_CHANGED,
    PLACEMENT_DECIDED,
    POD_BOUND,
    AlertRaised,
    AlertResolved,
    Severity,
    subject_token,
)
from gpuaware.schemas.permissions import ADMIN, ALERT_BRIDGE, HEALTH_SCORING
from gpuaware.services.alert_bridge.handlers import make_mount
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings

CLUSTER = "default"  # the devstack renders the permissions for the default cluster


@contextlib.asynccontextmanager
async def bridge_as_its_user(provisioned: Any, **values: Any) -> AsyncIterator[Any]:
    user, password = provisioned.credentials()[ALERT_BRIDGE]
    settings = quiet_settings(AlertBridgeSettings, nats_url=provisioned.url, nats_user=user, nats_password=password,
                              cluster=CLUSTER, instance_id="auth1", **values)
    async with in_process(settings, make_mount, what="the alert bridge") as bridge:
        yield bridge


async def test_the_webhook_publishes_and_dead_letters_as_its_own_user(provisioned: Any, connect_as: Any) -> None:
    port = free_port()
    async with connect_as(ADMIN) as admin, bridge_as_its_user(provisioned, listen_port=port):
        got: list[Any] = []

        async def keep(msg: Any) -> None:
            got.append(msg)

        await admin.subscribe(f"{ALERT_RAISED}.>", cb=keep)
        await admin.subscribe(f"deadletter.{ALERT_RAISED}", cb=keep)
        await admin.flush()
        note = {"receiver": "ops", "alerts": [
            {"status": "firing", "labels": {"alertname": "GpuawareSchedulerBacklog", "cluster": "prod.eu-west-1"},
             "startsAt": "2026-09-21T12:00:00Z", "fingerprint": "0123456789abcdef"},
            {"status": "firing", "labels": {"alertname": "Broken"}, "startsAt": "2026-09-21T12:00:00Z",
             "fingerprint": "short"}]}
        async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/webhook", json=note) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json()
        assert answer["published"] == 1 and answer["dead_lettered"] == 1
        await eventually(lambda: len(got) == 2, what="the alert and the dead letter")
        subjects = sorted(m.subject for m in got)
        assert subjects == [f"{ALERT_RAISED}.{subject_token('prod.eu-west-1')}", f"deadletter.{ALERT_RAISED}"]
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/readyz") as resp:
            assert resp.status == 200 and (await resp.json())["nats"] is True


@pytest.mark.timeout(120)
@pytest.mark.skipif(alertmanager_binary() is None, reason=ALERTMANAGER_MISSING)
async def test_health_scoring_alerts_reach_alertmanager_through_its_user(provisioned: Any, connect_as: Any,
                                                                          tmp_path: Path) -> None:
    am = await asyncio.to_thread(start_alertmanager, tmp_path / "am")
    now = time.time()
    ev = AlertRaised(source="health-scoring/t", emitted_at=now, cluster=CLUSTER, fingerprint="00000000000000ab",
                     rule="gpu_quarantined", severity=Severity.CRITICAL, summary="XID 79", started_at=now,
                     node="ip-10-0-1-2.ec2.internal", gpu_uuid="GPU-1")
    done = AlertResolved(source="health-scoring/t", emitted_at=now + 1, cluster=CLUSTER, fingerprint=ev.fingerprint,
                         rule=ev.rule, severity=ev.severity, started_at=now, resolved_at=now + 1)

    def states() -> list[str]:
        return [a["status"]["state"] for a in am.alerts() if a["labels"].get("gpuaware_fingerprint") == ev.fingerprint]

    try:
        async with connect_as(HEALTH_SCORING) as health, bridge_as_its_user(provisioned, alertmanager_url=am.url):
            js = health.jetstream()
            await bus.publish(js, bus.event_channel(AlertRaised).at(subject_token(CLUSTER)), ev)
            await eventually(lambda: states() == ["active"], timeout=30, what="the alert firing in Alertmanager")
            await bus.publish(js, bus.event_channel(AlertResolved).at(subject_token(CLUSTER)), done)
            await eventually(lambda: "active" not in states(), timeout=30, what="the alert resolved in Alertmanager")
    finally:
        am.stop()


async def test_the_alert_bridge_may_publish_nothing_else(connect_as: Any) -> None:
    async with connect_as(ALERT_BRIDGE) as nc:
        for subject in (f"{POD_BOUND}.{CLUSTER}.n1", PLACEMENT_DECIDED, f"{GPU_STATE_CHANGED}.{CLUSTER}.n1"):
            await assert_publish_refused(nc, subject)
        await assert_stream_admin_refused(nc)
