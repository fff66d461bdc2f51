"""Alerts between the bus and Alertmanager, both ways, so one routing tree pages people.

**Out** (``alerts.>`` -> ``POST /api/v2/alerts``): an ``AlertRaised`` becomes a firing alert labelled
``alertname`` (the rule), ``severity``, ``cluster``, ``node``/``gpu_uuid`` when set, its own labels and
``gpuaware_fingerprint`` (the condition's id on the bus); ``summary``, ``value``, ``threshold`` and
``runbook_url`` become annotations. The bus raises a condition once; Alertmanager forgets a firing
alert that is not re-sent within its ``resolve_timeout`` (5 minutes by default), so ``OpenAlerts``
keeps every open one for the bridge to post again periodically, until its ``AlertResolved`` arrives,
which is posted with ``endsAt`` = when it resolved. Replaying the alerts stream rebuilds it after a
restart.

**In** (an Alertmanager webhook notification -> ``AlertRaised``/``AlertResolved``): alerts fired by
Prometheus rules (deploy/prometheus/rules.yaml) or anything else routed to the receiver, for tools that
subscribe to the bus. Alerts carrying ``gpuaware_fingerprint`` came from the bus in the first place and
are not published again (no loop); events whose ``source`` starts with ``alertmanager/`` are not sent
out again either. Alertmanager's own fingerprint (16 hex digits) is the event's fingerprint, so a
re-notification of the same alert dedupes as the contract expects.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpuaware.schemas import AlertRaised, AlertResolved, Severity

__all__ = ["FINGERPRINT_LABEL", "SOURCE_PREFIX", "OpenAlerts", "WebhookError", "from_webhook", "to_alertmanager"]

FINGERPRINT_LABEL = "gpuaware_fingerprint"
SOURCE_PREFIX = "alertmanager/"
_SEVERITIES = {s.value for s in Severity}


class WebhookError(ValueError):
    """A webhook body that is not an Alertmanager notification: the message says what is wrong."""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _epoch(text: Any, what: str) -> float:
    if not isinstance(text, str) or not text:
        raise WebhookError(f"{what} is not a timestamp: {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise WebhookError(f"{what} is not an RFC 3339 timestamp: {text!r}") from None


def to_alertmanager(ev: AlertRaised | AlertResolved, *, generator_url: str = "") -> dict[str, Any]:
    """One alert of Alertmanager's API v2 (``postableAlert``)."""
    labels = {**(ev.labels if isinstance(ev, AlertRaised) else {}), "alertname": ev.rule,
              "severity": ev.severity.value, "cluster": ev.cluster, FINGERPRINT_LABEL: ev.fingerprint}
    if ev.node:
        labels["node"] = ev.node
    if ev.gpu_uuid:
        labels["gpu_uuid"] = ev.gpu_uuid
    annotations = {"summary": ev.summary} if ev.summary else {}
    alert: dict[str, Any] = {"labels": {k: str(v) for k, v in labels.items() if v != ""},
                             "startsAt": _iso(ev.started_at)}
    if isinstance(ev, AlertRaised):
        for key in ("value", "threshold", "runbook_url"):
            v = getattr(ev, key)
            if v is not None:
                annotations[key] = f"{v:g}" if isinstance(v, float) else str(v)
    else:
        alert["endsAt"] = _iso(ev.resolved_at)
    alert["annotations"] = annotations
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


class OpenAlerts:
    """The bus's open conditions by fingerprint: what the bridge keeps posting until it resolves."""

    def __init__(self) -> None:
        self.open: dict[str, AlertRaised] = {}

    def apply(self, ev: AlertRaised | AlertResolved) -> dict[str, Any] | None:
        """Track ``ev``; the Alertmanager alert to post for it (None: it came from Alertmanager)."""
        if ev.source.startswith(SOURCE_PREFIX):
            return None
        if isinstance(ev, AlertRaised):
            self.open[ev.fingerprint] = ev
            return to_alertmanager(ev)
        raised = self.open.pop(ev.fingerprint, None)
        if raised is None:  # raised before the replayed window: resolve what its own fields say
            return to_alertmanager(ev)
        # Alertmanager identifies an alert by its label set: the resolution is the raised alert, ended
        alert = to_alertmanager(raised)
        alert["endsAt"] = _iso(max(ev.resolved_at, raised.started_at))
        return alert

    def firing(self) -> list[AlertRaised]:
        return list(self.open.values())


def from_webhook(payload: Mapping[str, Any], *, cluster: str, now: float) -> list[AlertRaised | AlertResolved]:
    """The alerts of one webhook notification as events (those that came from the bus left out).

    Raises ``WebhookError`` for a body that is not a notification (the receiver answers 400 with it)."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("alerts"), list):
        raise WebhookError("not an Alertmanager webhook notification: no `alerts` list")
    receiver = str(payload.get("receiver") or "webhook")
    out: list[AlertRaised | AlertResolved] = []
    for i, a in enumerate(payload["alerts"]):
        if not isinstance(a, Mapping):
            raise WebhookError(f"alerts[{i}] is not an object")
        labels = a.get("labels") or {}
        annotations = a.get("annotations") or {}
        if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
            raise WebhookError(f"alerts[{i}]: labels and annotations must be objects")
        if FINGERPRINT_LABEL in labels:
            continue  # the bus's own alert, back from Alertmanager
        rule = str(labels.get("alertname") or "")
        if not rule:
            raise WebhookError(f"alerts[{i}] has no alertname label")
        severity = str(labels.get("severity", "warning")).lower()
        fp = str(a.get("fingerprint") or "")
        if len(fp) != 16 or any(c not in "0123456789abcdef" for c in fp):
            raise WebhookError(f"alerts[{i}]: fingerprint {fp!r} is not 16 hex digits")
        status = a.get("status")
        started = _epoch(a.get("startsAt"), f"alerts[{i}].startsAt")
        common: dict[str, Any] = {"source": f"{SOURCE_PREFIX}{receiver}"[:253], "emitted_at": now,
                  "cluster": str(labels.get("cluster") or cluster), "fingerprint": fp, "rule": rule[:253],
                  "severity": Severity(severity) if severity in _SEVERITIES else Severity.WARNING,
                  "started_at": started, "node": _label(labels.get("node")), "gpu_uuid": _label(labels.get("gpu_uuid"))}
        summary = str(annotations.get("summary") or annotations.get("description") or rule)[:4096]
        if status == "firing":
            extra = {str(k)[:253]: str(v)[:253] for k, v in labels.items()
                     if k not in ("alertname", "severity", "cluster", "node", "gpu_uuid")}
            out.append(AlertRaised(**common, summary=summary, labels=extra,
                                   runbook_url=_label(annotations.get("runbook_url"))))
        elif status == "resolved":
            ended = _epoch(a.get("endsAt"), f"alerts[{i}].endsAt")
            out.append(AlertResolved(**common, summary=summary, resolved_at=max(ended, started)))
        else:
            raise WebhookError(f"alerts[{i}]: status {status!r} is neither firing nor resolved")
    return out


def _label(v: Any) -> str | None:
    return None if v in (None, "") else str(v)[:253]
