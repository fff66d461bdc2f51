"""Alertmanager's webhook notifications as alert events, one alert at a time.

A notification carries a batch of alerts (every alert of one group). Each is translated on its own:
one that cannot become a valid ``AlertRaised`` / ``AlertResolved`` (no ``alertname``, a malformed
fingerprint or timestamp, an unknown status, a value the contract refuses) is *refused* with the
reason and its raw JSON, for the receiver to dead-letter, and the rest of the batch is still
published. Only a body that is not a notification at all (not JSON, no ``alerts`` list) is refused
whole (``WebhookError``; the receiver answers 400).

Alerts carrying ``gpuaware_fingerprint`` came from the bus in the first place and are skipped (no
loop). Alertmanager's own fingerprint (16 hex digits) is the event's fingerprint, so a
re-notification of the same alert dedupes as the contract expects. Label values are free text: a
``cluster`` such as ``prod.eu-west-1`` is kept as it is in the event; the receiver routes it through
``gpuaware.schemas.subject_token``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from gpuaware.alerting.alertmanager import FINGERPRINT_LABEL, SOURCE_PREFIX
from gpuaware.schemas import ALERT_RAISED, ALERT_RESOLVED, AlertRaised, AlertResolved, Severity

__all__ = ["RefusedAlert", "WebhookBatch", "WebhookError", "from_webhook", "parse_notification"]

_SEVERITIES = {s.value for s in Severity}
_OWN_LABELS = ("alertname", "severity", "cluster", "node", "gpu_uuid")
_MAX_LABEL = 253
_MAX_TEXT = 4096


class WebhookError(ValueError):
    """A webhook body that is not an Alertmanager notification: the message says what is wrong."""


class _Refused(ValueError):
    """One alert of a batch that cannot become an event (the message is the reason)."""


@dataclass(frozen=True, slots=True)
class RefusedAlert:
    """One alert of a notification that was not published, and why."""

    index: int
    """its position in the notification's ``alerts`` list"""
    reason: str
    subject: str
    """the subject it would have been published on (``deadletter.<subject>`` receives it)"""
    raw: bytes
    """the alert as it arrived, re-encoded as strict JSON"""


@dataclass(slots=True)
class WebhookBatch:
    """What one notification became: events to publish, alerts refused, the bus's own alerts skipped."""

    receiver: str
    events: list[AlertRaised | AlertResolved] = field(default_factory=list)
    refused: list[RefusedAlert] = field(default_factory=list)
    own: int = 0
    """alerts that came from the bus (``gpuaware_fingerprint``): not published back"""

    def reply(self, published: int, dead_lettered: int) -> dict[str, Any]:
        """The receiver's answer: what was accepted, and each refused alert with its reason."""
        return {"receiver": self.receiver, "received": len(self.events) + len(self.refused) + self.own,
                "published": published, "skipped_own": self.own, "refused": len(self.refused),
                "dead_lettered": dead_lettered,
                "refusals": [{"index": r.index, "reason": r.reason} for r in self.refused]}


def parse_notification(body: bytes) -> Mapping[str, Any]:
    """The JSON object of a webhook body; ``WebhookError`` when it is not one."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise WebhookError(f"the body is not JSON: {exc}") from None
    if not isinstance(payload, Mapping):
        raise WebhookError("not an Alertmanager webhook notification: not a JSON object")
    return payload


def from_webhook(payload: Mapping[str, Any], *, cluster: str, now: float) -> WebhookBatch:
    """The alerts of one webhook notification as events; each bad alert refused on its own.

    ``cluster``: the cluster of an alert without a ``cluster`` label. Raises ``WebhookError`` only
    for a body that is not a notification (the receiver answers 400 with it)."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("alerts"), list):
        raise WebhookError("not an Alertmanager webhook notification: no `alerts` list")
    batch = WebhookBatch(receiver=str(payload.get("receiver") or "webhook")[:200])
    for i, alert in enumerate(payload["alerts"]):
        if isinstance(alert, Mapping) and isinstance(alert.get("labels"), Mapping) \
                and FINGERPRINT_LABEL in alert["labels"]:
            batch.own += 1
            continue
        try:
            batch.events.append(_event(alert, i, receiver=batch.receiver, cluster=cluster, now=now))
        except (_Refused, msgspec.ValidationError) as exc:
            batch.refused.append(RefusedAlert(index=i, reason=str(exc), subject=_subject_of(alert),
                                              raw=_raw(alert)))
    return batch


def _event(a: Any, i: int, *, receiver: str, cluster: str, now: float) -> AlertRaised | AlertResolved:
    if not isinstance(a, Mapping):
        raise _Refused(f"alerts[{i}] is not an object")
    labels = a.get("labels") or {}
    annotations = a.get("annotations") or {}
    if not isinstance(labels, Mapping) or not isinstance(annotations, Mapping):
        raise _Refused(f"alerts[{i}]: labels and annotations must be objects")
    rule = _text(labels.get("alertname"), _MAX_LABEL)
    if not rule:
        raise _Refused(f"alerts[{i}] has no alertname label")
    severity = str(labels.get("severity", "warning")).lower()
    fp = str(a.get("fingerprint") or "")
    if len(fp) != 16 or any(c not in "0123456789abcdef" for c in fp):
        raise _Refused(f"alerts[{i}]: fingerprint {fp!r} is not 16 hex digits")
    status = a.get("status")
    if status not in ("firing", "resolved"):
        raise _Refused(f"alerts[{i}]: status {status!r} is neither firing nor resolved")
    started = _epoch(a.get("startsAt"), f"alerts[{i}].startsAt")
    common: dict[str, Any] = {
        "source": f"{SOURCE_PREFIX}{receiver}"[:_MAX_LABEL], "emitted_at": now,
        "cluster": _text(labels.get("cluster"), _MAX_LABEL) or cluster, "fingerprint": fp, "rule": rule,
        "severity": severity if severity in _SEVERITIES else Severity.WARNING.value, "started_at": started,
        "node": _text(labels.get("node"), _MAX_LABEL) or None,
        "gpu_uuid": _text(labels.get("gpu_uuid"), _MAX_LABEL) or None}
    summary = _text(annotations.get("summary") or annotations.get("description"), _MAX_TEXT) or rule
    if status == "firing":
        extra = {_text(k, _MAX_LABEL): _text(v, _MAX_LABEL) for k, v in labels.items() if k not in _OWN_LABELS}
        fields = {**common, "kind": ALERT_RAISED, "summary": summary, "labels": extra,
                  "runbook_url": _text(annotations.get("runbook_url"), _MAX_TEXT) or None}
        return msgspec.convert(fields, AlertRaised)  # validated by the contract, as a consumer decodes it
    ended = _epoch(a.get("endsAt"), f"alerts[{i}].endsAt")
    fields = {**common, "kind": ALERT_RESOLVED, "summary": summary, "resolved_at": max(ended, started)}
    return msgspec.convert(fields, AlertResolved)


def _subject_of(alert: Any) -> str:
    """The subject a refused alert would have gone to: resolved ones to ``ALERT_RESOLVED``, else raised."""
    return ALERT_RESOLVED if isinstance(alert, Mapping) and alert.get("status") == "resolved" else ALERT_RAISED


def _raw(alert: Any) -> bytes:
    """The alert as strict JSON (a NaN or an infinity the lenient parser let through becomes a string)."""
    try:
        return json.dumps(alert, ensure_ascii=False, allow_nan=False, default=str).encode()
    except ValueError:
        return json.dumps(repr(alert), ensure_ascii=False).encode()


def _text(v: Any, limit: int) -> str:
    return "" if v is None else str(v)[:limit]


def _epoch(text: Any, what: str) -> float:
    if not isinstance(text, str) or not text:
        raise _Refused(f"{what} is not a timestamp: {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise _Refused(f"{what} is not an RFC 3339 timestamp: {text!r}") from None
