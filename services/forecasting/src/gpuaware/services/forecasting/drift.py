"""The ``forecast_model_drift`` alert: raised while a served model's recent error is above
persistence's (persistence is then served), resolved when it recovers."""

from __future__ import annotations

from gpuaware.forecast import Drift
from gpuaware.schemas import AlertRaised, AlertResolved, Severity, fingerprint

DRIFT_RULE = "forecast_model_drift"


def drift_alert(model_label: str, change: Drift, *, cluster: str, source: str, now: float,
                started_at: float) -> AlertRaised | AlertResolved:
    """The alert event for ``change``: raised with both errors in its summary, or resolved."""
    labels = {"cluster": cluster, "model": model_label}
    fp = fingerprint(DRIFT_RULE, labels)
    if change.raised:
        summary = (f"forecast model {model_label} is worse than persistence on recent data: RMSE "
                   f"{change.model_rmse:.3g} vs {change.baseline_rmse:.3g} at {change.horizon_s / 60:g} min "
                   f"({change.points} points); persistence is served until it recovers")
        return AlertRaised(source=source, emitted_at=now, cluster=cluster, fingerprint=fp, rule=DRIFT_RULE,
                           severity=Severity.WARNING, summary=summary, started_at=now, labels=labels,
                           value=change.model_rmse, threshold=change.baseline_rmse)
    return AlertResolved(source=source, emitted_at=now, cluster=cluster, fingerprint=fp, rule=DRIFT_RULE,
                         severity=Severity.WARNING, started_at=started_at, resolved_at=max(now, started_at),
                         summary=f"model RMSE {change.model_rmse:.3g} back at or under persistence's "
                                 f"{change.baseline_rmse:.3g}")
