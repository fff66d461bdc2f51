"""Alerts: a condition that needs a human (or an automation) started or stopped being true.

The ``fingerprint`` identifies the *condition*, not the message: a stable hash of the rule name and
its identifying labels (cluster, node, gpu). A raiser re-sends ``AlertRaised`` with the same
fingerprint while the condition holds (receivers dedupe on it, as Alertmanager does), and
``AlertResolved`` closes it by the same fingerprint. Use ``fingerprint()`` so every producer
computes it the same way.

Severity is a closed set (routing depends on it); ``rule`` and label keys are open.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, Label, Name, Text, Timestamp

__all__ = ["ALERT_RAISED", "ALERT_RESOLVED", "AlertRaised", "AlertResolved", "Severity", "fingerprint"]

ALERT_RAISED = "alerts.gpu.raised.v1"
ALERT_RESOLVED = "alerts.gpu.resolved.v1"

Fingerprint = Annotated[str, Meta(pattern=r"^[0-9a-f]{16}$", description="16 hex digits, see fingerprint()")]


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


def fingerprint(rule: str, labels: dict[str, str]) -> str:
    """Stable id of a condition: sha256 of the rule and its sorted labels, 16 hex digits."""
    text = "\x1f".join([rule, *(f"{k}={labels[k]}" for k in sorted(labels))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class AlertRaised(Event, frozen=True, kw_only=True, tag=ALERT_RAISED):
    """A condition started (or still holds); receivers dedupe on ``fingerprint``."""

    fingerprint: Fingerprint
    rule: Name
    """e.g. ``gpu_xid_critical``, ``gpu_temperature_high``"""
    severity: Severity
    summary: Text
    started_at: Timestamp
    node: Label | None = None
    gpu_uuid: Label | None = None
    labels: dict[Label, Label] = msgspec.field(default_factory=dict)
    value: float | None = None
    """the observed value that tripped the rule"""
    threshold: float | None = None
    runbook_url: Text | None = None


class AlertResolved(Event, frozen=True, kw_only=True, tag=ALERT_RESOLVED):
    """The condition with this ``fingerprint`` stopped holding."""

    fingerprint: Fingerprint
    rule: Name
    severity: Severity
    started_at: Timestamp
    resolved_at: Timestamp
    node: Label | None = None
    gpu_uuid: Label | None = None
    summary: Text = ""

    def __post_init__(self) -> None:
        if self.resolved_at < self.started_at:
            raise ValueError("`resolved_at` is before `started_at`")


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (AlertRaised, AlertResolved)
