"""Alert decisions: which alerts to raise and resolve for a GPU, given its latest assessment (pure).

An alert is a *condition* (Alertmanager's model, ``gpuaware.schemas.alerts``): it is raised once
when it starts to hold, resolved once when it stops, and identified by
``fingerprint(rule, {"cluster", "node", "gpu"})`` so every producer and receiver agrees on it.
The decision is a pure function of the active alerts and one ``Assessment``; ``AlertBook`` keeps
the active set for a service (and dumps it, so a restart neither re-raises nor forgets).

Rules (the condition, its severity):

===========================  ========  ===================================================
``gpu_quarantined``          critical  the effective state is quarantined
``gpu_degraded``             warning   the effective state is degraded
``gpu_failure_risk``         warning   risk >= ``StateRules.risk_degrade`` (the prediction)
``gpu_xid_critical``         critical  a fatal XID (or one whose action is a reset) is current
``gpu_thermal``              warning   thermal throttling or hardware slowdown temperature
``gpu_telemetry_stale``      warning   no telemetry for ``stale_after_s``
``gpu_cordoned``             info      an operator pinned the state (the reason is the summary)
===========================  ========  ===================================================

``resend_after_s``: None (default) raises once per condition; a number re-sends ``AlertRaised``
(same fingerprint, same ``started_at``) while the condition holds, as receivers that expire alerts
expect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from gpuaware.health.config import HealthConfig
from gpuaware.health.tracker import Assessment
from gpuaware.health.xid import classify_xid
from gpuaware.schemas import AlertRaised, AlertResolved, HealthState, Severity, fingerprint

__all__ = ["RULES", "ActiveAlert", "AlertBook", "AlertDecision", "Condition", "conditions", "decide_alerts"]

RULES: dict[str, Severity] = {
    "gpu_quarantined": Severity.CRITICAL,
    "gpu_degraded": Severity.WARNING,
    "gpu_failure_risk": Severity.WARNING,
    "gpu_xid_critical": Severity.CRITICAL,
    "gpu_thermal": Severity.WARNING,
    "gpu_telemetry_stale": Severity.WARNING,
    "gpu_cordoned": Severity.INFO,
}


@dataclass(frozen=True, slots=True)
class Condition:
    rule: str
    severity: Severity
    summary: str
    value: float | None = None
    threshold: float | None = None


class ActiveAlert(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    fingerprint: str
    rule: str
    severity: Severity
    started_at: float
    gpu_uuid: str
    node: str = ""
    summary: str = ""
    last_sent_at: float = 0.0


@dataclass(frozen=True, slots=True)
class AlertDecision:
    raised: tuple[AlertRaised, ...] = ()
    resolved: tuple[AlertResolved, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.raised or self.resolved)


def _labels(a: Assessment, cluster: str) -> dict[str, str]:
    return {"cluster": cluster, "node": a.node, "gpu": a.gpu_uuid}


def conditions(a: Assessment, config: HealthConfig | None = None) -> dict[str, Condition]:
    """The alert conditions that hold for this assessment, by rule."""
    cfg = config or HealthConfig()
    out: dict[str, Condition] = {}
    reasons = set(a.reasons)
    why = ", ".join(r for r in a.reasons if r not in ("recovering", "manual_cordon")) or "clean period running"
    if a.state is HealthState.QUARANTINED:
        out["gpu_quarantined"] = Condition("gpu_quarantined", RULES["gpu_quarantined"],
                                           f"GPU {a.gpu_uuid} on {a.node} quarantined: {why}", a.score)
    elif a.state is HealthState.DEGRADED:
        out["gpu_degraded"] = Condition("gpu_degraded", RULES["gpu_degraded"],
                                        f"GPU {a.gpu_uuid} on {a.node} degraded: {why}", a.score)
    if a.risk >= cfg.states.risk_degrade:
        out["gpu_failure_risk"] = Condition(
            "gpu_failure_risk", RULES["gpu_failure_risk"],
            f"GPU {a.gpu_uuid} on {a.node}: {a.risk:.0%} risk of a hard failure within "
            f"{cfg.risk.horizon_h:g} h", a.risk, cfg.states.risk_degrade)
    fatal = []
    for r in a.reasons:
        if r.startswith("xid_") and r[4:].isdigit():
            info = classify_xid(int(r[4:]))
            if info is not None and info.quarantines:
                fatal.append(f"{info.code} ({info.name}: {info.action.value})")
    if fatal:
        out["gpu_xid_critical"] = Condition("gpu_xid_critical", RULES["gpu_xid_critical"],
                                            f"GPU {a.gpu_uuid} on {a.node}: XID " + "; ".join(fatal))
    if reasons & {"thermal_throttle", "thermal_hw_slowdown"}:
        out["gpu_thermal"] = Condition("gpu_thermal", RULES["gpu_thermal"],
                                       f"GPU {a.gpu_uuid} on {a.node} thermally throttled",
                                       a.components.get("thermal"))
    if "stale_telemetry" in reasons:
        out["gpu_telemetry_stale"] = Condition("gpu_telemetry_stale", RULES["gpu_telemetry_stale"],
                                               f"no telemetry from GPU {a.gpu_uuid} on {a.node}",
                                               threshold=cfg.states.stale_after_s)
    if a.override is not None:
        out["gpu_cordoned"] = Condition("gpu_cordoned", RULES["gpu_cordoned"],
                                        f"GPU {a.gpu_uuid} on {a.node} cordoned ({a.override.state.value}) "
                                        f"by {a.override.by}: {a.override.reason}")
    return out


def decide_alerts(active: Mapping[str, ActiveAlert], a: Assessment, *, source: str, emitted_at: float,
                  cluster: str = "default", config: HealthConfig | None = None,
                  resend_after_s: float | None = None) -> tuple[AlertDecision, dict[str, ActiveAlert]]:
    """(what to publish, the new active set). Only ``a``'s GPU's alerts are touched in ``active``."""
    new = dict(active)
    labels = _labels(a, cluster)
    holding = conditions(a, config)
    raised: list[AlertRaised] = []
    resolved: list[AlertResolved] = []
    wanted: set[str] = set()
    for rule, cond in holding.items():
        fp = fingerprint(rule, labels)
        wanted.add(fp)
        current = new.get(fp)
        due = current is None or (resend_after_s is not None and a.at - current.last_sent_at >= resend_after_s)
        if not due:
            continue
        started = current.started_at if current is not None else a.at
        raised.append(AlertRaised(
            source=source, emitted_at=emitted_at, cluster=cluster, fingerprint=fp, rule=rule,
            severity=cond.severity, summary=cond.summary, started_at=started, node=a.node or None,
            gpu_uuid=a.gpu_uuid, labels=labels, value=cond.value, threshold=cond.threshold))
        new[fp] = ActiveAlert(fingerprint=fp, rule=rule, severity=cond.severity, started_at=started,
                              gpu_uuid=a.gpu_uuid, node=a.node, summary=cond.summary, last_sent_at=a.at)
    for fp, alert in active.items():
        if alert.gpu_uuid != a.gpu_uuid or fp in wanted:
            continue
        resolved.append(AlertResolved(
            source=source, emitted_at=emitted_at, cluster=cluster, fingerprint=fp, rule=alert.rule,
            severity=alert.severity, started_at=alert.started_at, resolved_at=max(a.at, alert.started_at),
            node=alert.node or None, gpu_uuid=alert.gpu_uuid, summary=alert.summary))
        del new[fp]
    return AlertDecision(tuple(raised), tuple(resolved)), new


class AlertBook:
    """The active alerts of a service; ``decide`` publishes-what and remembers."""

    def __init__(self, *, source: str, cluster: str = "default", config: HealthConfig | None = None,
                 resend_after_s: float | None = None) -> None:
        self.source, self.cluster, self.config, self.resend_after_s = source, cluster, config, resend_after_s
        self.active: dict[str, ActiveAlert] = {}

    def decide(self, a: Assessment, *, emitted_at: float) -> AlertDecision:
        decision, self.active = decide_alerts(self.active, a, source=self.source, emitted_at=emitted_at,
                                              cluster=self.cluster, config=self.config,
                                              resend_after_s=self.resend_after_s)
        return decision

    def dump(self) -> bytes:
        return msgspec.json.encode(self.active)

    def load(self, data: bytes) -> None:
        self.active = msgspec.json.decode(data, type=dict[str, ActiveAlert])
