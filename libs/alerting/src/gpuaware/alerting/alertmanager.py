"""Alerts between the bus and Alertmanager, both ways, so one routing tree pages people.

**Out** (``alerts.>`` -> ``POST /api/v2/alerts``): an ``AlertRaised`` becomes a firing alert labelled
``alertname`` (the rule), ``severity``, ``cluster``, ``node``/``gpu_uuid`` when set, its own labels and
``gpuaware_fingerprint`` (the condition's id on the bus); ``summary``, ``value``, ``threshold`` and
``runbook_url`` become annotations. The bus raises a condition once; Alertmanager forgets a firing
alert that is not re-sent within its ``resolve_timeout`` (5 minutes by default), so ``OpenAlerts``
keeps every open one for the bridge to post again periodically, until its ``AlertResolved`` arrives,
which is posted with ``endsAt`` = when it resolved. Replaying the alerts stream rebuilds it after a
restart.

**In** (an Alertmanager webhook notification -> ``AlertRaised``/``AlertResolved``): ``webhook.py``.
Events whose ``source`` starts with ``alertmanager/`` came from there and are not sent out again (no
loop).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuaware.schemas import AlertRaised, AlertResolved

__all__ = ["FINGERPRINT_LABEL", "SOURCE_PREFIX", "OpenAlerts", "to_alertmanager"]

FINGERPRINT_LABEL = "gpuaware_fingerprint"
SOURCE_PREFIX = "alertmanager/"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


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
