"""Alertmanager notifications become events one alert at a time: a bad alert is refused with its reason
(and the subject its dead letter goes to) while the rest of the batch is published; a dotted cluster is
kept as the event's cluster; the bus's own alerts are skipped; only a body that is not a notification is
refused whole. And the outbound side: what is posted when, and what a failed post keeps."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gpuaware.alerting import (
    FINGERPRINT_LABEL,
    Forwarder,
    WebhookError,
    from_webhook,
    parse_notification,
    to_alertmanager,
)
from gpuaware.schemas import ALERT_RAISED, ALERT_RESOLVED, AlertRaised, AlertResolved, Severity

T0 = 1_790_000_000.0
START = "2026-09-21T12:00:00Z"


def alert(status: str = "firing", **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "labels": {"alertname": "GpuawareSchedulerBacklog", "severity": "warning",
                                                        **labels},
                           "annotations": {"summary": "150 pods pending"}, "startsAt": START,
                           "fingerprint": "0123456789abcdef"}
    if status == "resolved":
        out["endsAt"] = "2026-09-21T12:05:00Z"
    return out


def note(*alerts: Any) -> dict[str, Any]:
    return {"receiver": "gpuaware", "status": "firing", "alerts": list(alerts)}


def test_one_bad_alert_is_refused_and_the_rest_of_the_batch_kept() -> None:
    bad = {**alert(), "fingerprint": "not-hex"}
    batch = from_webhook(note(alert(cluster="c1"), bad, alert("resolved", cluster="c2")), cluster="dflt", now=T0)
    assert [type(e) for e in batch.events] == [AlertRaised, AlertResolved]
    assert [e.cluster for e in batch.events] == ["c1", "c2"]
    (refused,) = batch.refused
    assert refused.index == 1 and "fingerprint 'not-hex' is not 16 hex digits" in refused.reason
    assert refused.subject == ALERT_RAISED and json.loads(refused.raw) == bad
    assert batch.reply(published=2, dead_lettered=1) == {
        "receiver": "gpuaware", "received": 3, "published": 2, "skipped_own": 0, "refused": 1, "dead_lettered": 1,
        "refusals": [{"index": 1, "reason": refused.reason}]}


@pytest.mark.parametrize("cluster, node", [
    ("prod.eu-west-1", "ip-10-0-1-2.ec2.internal"),  # the reported webhook: an ordinary dotted name
    ("a b*c>d", "node with spaces"),
    ("ünïcode.cluster", "n"),
])
def test_names_with_dots_or_odd_characters_are_events_not_errors(cluster: str, node: str) -> None:
    batch = from_webhook(note(alert(cluster=cluster, node=node)), cluster="dflt", now=T0)
    (ev,) = batch.events
    assert batch.refused == [] and ev.cluster == cluster and ev.node == node
    msgspec.json.decode(msgspec.json.encode(ev), type=AlertRaised)  # valid by the contract


@pytest.mark.parametrize("bad, reason, subject", [
    ({"status": "firing", "labels": {}, "startsAt": START, "fingerprint": "0" * 16}, "no alertname", ALERT_RAISED),
    ({**alert(), "startsAt": "yesterday"}, "not an RFC 3339", ALERT_RAISED),
    ({**alert(), "status": "odd"}, "neither firing nor resolved", ALERT_RAISED),
    ({**alert("resolved"), "endsAt": None}, "endsAt is not a timestamp", ALERT_RESOLVED),
    ({**alert(), "startsAt": "0001-01-01T00:00:00Z"}, "started_at", ALERT_RAISED),  # the contract refuses it
    ("not an object", "is not an object", ALERT_RAISED),
    ({**alert(), "labels": ["x"]}, "labels and annotations must be objects", ALERT_RAISED),
])
def test_each_refusal_says_why(bad: Any, reason: str, subject: str) -> None:
    batch = from_webhook(note(bad, alert()), cluster="c", now=T0)
    assert len(batch.events) == 1 and len(batch.refused) == 1
    assert reason in batch.refused[0].reason and batch.refused[0].subject == subject


def test_defaults_and_bounds() -> None:
    long = "x" * 5000
    (ev,) = from_webhook(note({**alert(severity="page", extra=long), "annotations": {}}), cluster="dflt",
                         now=T0).events
    assert isinstance(ev, AlertRaised)
    assert ev.cluster == "dflt" and ev.severity == Severity.WARNING and ev.summary == ev.rule
    assert ev.source == "alertmanager/gpuaware" and len(ev.labels["extra"]) == 253


def test_the_bus_own_alerts_are_skipped() -> None:
    own = alert()
    own["labels"][FINGERPRINT_LABEL] = "fedcba9876543210"
    batch = from_webhook(note(own, alert()), cluster="c", now=T0)
    assert batch.own == 1 and len(batch.events) == 1 and batch.refused == []


@pytest.mark.parametrize("body, reason", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"alerts": "x"}', "no `alerts` list"),
])
def test_a_body_that_is_no_notification_is_refused_whole(body: bytes, reason: str) -> None:
    with pytest.raises(WebhookError, match=reason):
        from_webhook(parse_notification(body), cluster="c", now=T0)


def raised(fp: str = "00000000000000aa", **kw: Any) -> AlertRaised:
    return AlertRaised(**{"source": "health-scoring/h", "emitted_at": T0, "cluster": "c1", "fingerprint": fp,
                          "rule": "gpu_quarantined", "severity": Severity.CRITICAL, "summary": "s", "started_at": T0,
                          **kw})


def resolved(fp: str = "00000000000000aa") -> AlertResolved:
    return AlertResolved(source="health-scoring/h", emitted_at=T0 + 60, cluster="c1", fingerprint=fp,
                         rule="gpu_quarantined", severity=Severity.CRITICAL, started_at=T0, resolved_at=T0 + 60)


def test_forwarder_posts_live_alerts_and_resends_what_is_open() -> None:
    fw = Forwarder()
    assert not fw.on_event(raised("00000000000000bb"), replay=True)  # replayed: tracked, not posted
    assert fw.on_event(raised(), replay=False)
    assert not fw.on_event(raised("00000000000000cc", source="alertmanager/x"), replay=False)  # no loop
    assert fw.take() == [to_alertmanager(raised())] and fw.take() == []
    fw.resend()
    assert {a["labels"][FINGERPRINT_LABEL] for a in fw.take()} == {"00000000000000aa", "00000000000000bb"}
    assert fw.stats.followed == 3


def test_a_failed_post_keeps_its_resolutions_for_the_next_one() -> None:
    fw = Forwarder(max_unsent=2)
    fw.on_event(raised(), replay=False)
    fw.on_event(resolved(), replay=False)
    batch = fw.take()
    assert ["endsAt" in a for a in batch] == [False, True]
    fw.done(batch, ok=False)
    assert fw.stats.post_failures == 1 and fw.waiting == 1
    again = fw.take()
    assert again == [batch[1]] and again[0]["labels"] == batch[0]["labels"]  # Alertmanager matches on labels
    fw.done(again, ok=True)
    assert fw.stats.posted == 1 and fw.waiting == 0 and fw.alerts.open == {}


def test_unsent_resolutions_are_bounded() -> None:
    fw = Forwarder(max_unsent=2)
    for i in range(3):
        fw.on_event(resolved(f"{i:016x}"), replay=False)
    fw.done(fw.take(), ok=False)
    assert [a["labels"][FINGERPRINT_LABEL] for a in fw.take()] == [f"{1:016x}", f"{2:016x}"]

