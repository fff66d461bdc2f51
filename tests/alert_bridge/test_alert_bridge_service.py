"""The alert-bridge service against an embedded nats-server: a webhook notification whose cluster is
``prod.eu-west-1`` is published (routed by its subject token, the cluster kept as it is), a bad alert in
the same batch goes to its dead-letter subject with the reason while the rest is published, a repeated
notification is stored once, a body that is not a notification is refused whole, and the probes say
whether NATS and Alertmanager answer."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from alert_bridge_helpers import bridge_settings, get, post, running_bridge
from service_runner import eventually, streams_ready

from gpuaware.devstack import free_port
from gpuaware.schemas import (
    ALERT_RAISED,
    ALERT_RESOLVED,
    ALERTS,
    HEADER_ORIGINAL_SUBJECT,
    HEADER_REASON,
    AlertRaised,
    AlertResolved,
    subject_token,
)

START = "2026-09-21T12:00:00Z"


def alert(status: str, fp: str, **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "labels": {"alertname": "GpuawareSchedulerBacklog",
                                                        "severity": "warning", **labels},
                           "annotations": {"summary": "150 pods pending"}, "startsAt": START, "fingerprint": fp}
    if status == "resolved":
        out["endsAt"] = "2026-09-21T12:05:00Z"
    return out


@pytest.mark.timeout(90)
async def test_a_dotted_cluster_and_a_bad_alert_in_one_batch(nats_proc: Any) -> None:
    port = free_port()
    async with streams_ready(nats_proc.url, name="test") as nc:
        got: list[tuple[str, Any]] = []
        dead: list[Any] = []

        async def on_alert(msg: Any) -> None:
            got.append((msg.subject, msgspec.json.decode(msg.data, type=AlertRaised | AlertResolved)))

        async def on_dead(msg: Any) -> None:
            dead.append(msg)

        await nc.subscribe("alerts.gpu.>", cb=on_alert)
        await nc.subscribe("deadletter.>", cb=on_dead)
        await nc.flush()
        async with running_bridge(bridge_settings(nats_proc.url, listen_port=port, cluster="dflt")) as bridge:
            bad = {**alert("firing", "00000000000000bb"), "startsAt": "yesterday"}
            notification = {"receiver": "gpuaware", "status": "firing", "alerts": [
                alert("firing", "00000000000000aa", cluster="prod.eu-west-1", node="ip-10-0-1-2.ec2.internal"),
                bad,
                alert("resolved", "00000000000000cc")]}
            status, answer = await post(f"http://127.0.0.1:{port}/webhook", notification)
            assert status == 200, answer
            assert answer["published"] == 2 and answer["refused"] == 1 and answer["dead_lettered"] == 1
            assert answer["refusals"] == [{"index": 1, "reason": "alerts[1].startsAt is not an RFC 3339 timestamp: "
                                                                 "'yesterday'"}]
            await eventually(lambda: len(got) == 2 and len(dead) == 1, what="two alerts and one dead letter")
            (raised_subject, raised), (resolved_subject, resolved) = sorted(got, key=lambda g: g[0])
            assert raised_subject == f"{ALERT_RAISED}.{subject_token('prod.eu-west-1')}"
            assert raised.cluster == "prod.eu-west-1" and raised.node == "ip-10-0-1-2.ec2.internal"
            assert resolved_subject == f"{ALERT_RESOLVED}.dflt" and isinstance(resolved, AlertResolved)
            assert dead[0].subject == f"deadletter.{ALERT_RAISED}"
            assert "RFC 3339" in dead[0].headers[HEADER_REASON]
            assert dead[0].headers[HEADER_ORIGINAL_SUBJECT] == ALERT_RAISED
            assert msgspec.json.decode(dead[0].data) == bad
            # Alertmanager sends the same notification again (repeat_interval, a retry): stored once
            js = nc.jetstream()
            before = (await js.stream_info(ALERTS.name)).state.messages
            status, again = await post(f"http://127.0.0.1:{port}/webhook", notification)
            assert status == 200 and again["published"] == 2
            assert (await js.stream_info(ALERTS.name)).state.messages == before == 2
            # a body that is not a notification: refused whole, nothing published
            status, answer = await post(f"http://127.0.0.1:{port}/webhook", b"{not json")
            assert status == 400 and "not JSON" in answer["error"]
            assert bridge.stats.bad_notifications == 1 and bridge.stats.refused == 2
            assert await get(f"http://127.0.0.1:{port}/readyz") == (
                200, {"ready": True, "nats": True, "alertmanager": None})
            assert await get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")


@pytest.mark.timeout(60)
async def test_not_ready_while_alertmanager_does_not_answer(nats_proc: Any) -> None:
    port, nobody = free_port(), free_port()
    settings = bridge_settings(nats_proc.url, listen_port=port, webhook=False,
                               alertmanager_url=f"http://127.0.0.1:{nobody}", post_timeout_s=1.0, catch_up_s=5.0)
    async with streams_ready(nats_proc.url, name="test"), running_bridge(settings):
        assert await get(f"http://127.0.0.1:{port}/readyz") == (
            503, {"ready": False, "nats": True, "alertmanager": False})
        status, _ = await post(f"http://127.0.0.1:{port}/webhook", {"alerts": []})
        assert status == 404  # the webhook is off: only the probes are served


@pytest.mark.parametrize("env, message", [
    ({}, "nothing to do"),
    ({"GPUAWARE_ALERT_BRIDGE_ALERTMANAGER_URL": "alertmanager:9093"}, "must be an http:// or https:// URL"),
    ({"GPUAWARE_ALERT_BRIDGE_LISTEN_PORT": "70000"}, "LISTEN_PORT must be 0"),
    ({"GPUAWARE_ALERT_BRIDGE_LISTEN_PORT": "9095", "GPUAWARE_ALERT_BRIDGE_RESEND_S": "0"}, "RESEND_S must be positive"),
])
def test_settings_refuse_what_cannot_work(env: dict[str, str], message: str) -> None:
    from gpuaware.runtime import SettingsError
    from gpuaware.services.alert_bridge.settings import AlertBridgeSettings

    with pytest.raises(SettingsError, match=message):
        AlertBridgeSettings.from_env(env)

