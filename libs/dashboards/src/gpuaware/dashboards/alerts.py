"""Grafana alert rules over the database, for a Grafana that pages without Prometheus (the same
conditions as deploy/prometheus/rules.yaml where the database holds them: GPU health, quota, backlog,
forecast drift; dead letters and a lost placement leader are only in the services' metrics, so only
Prometheus's rules have them), written as Grafana's alerting provisioning file by
``python -m gpuaware.dashboards``.

Each rule: query ``A`` is SQL returning one number (the current value), ``B`` a server-side math
expression comparing it with the threshold; ``B`` is the condition. Built with the foundation SDK's
alerting and expression builders; the SQL of each runs on the schema in tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import alerting, expr
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.alerting import RelativeTimeRange

from gpuaware.dashboards.sql import Sql

__all__ = ["ALERT_RULES", "AlertRule", "provisioning"]

DATASOURCE_UID = "gpuaware"
"""the provisioned database datasource's uid (provisioning/datasources/gpuaware.yaml)"""


@dataclass(frozen=True)
class AlertRule:
    uid: str
    title: str
    sql: str
    """one row, one numeric column: the value compared with ``threshold``"""
    threshold: float
    for_: str
    severity: str
    summary: str


ALERT_RULES: tuple[AlertRule, ...] = (
    AlertRule("gpuaware-gpus-quarantined", "GPUs quarantined", """
SELECT count(*) AS quarantined FROM health_gpu_state WHERE state = 'quarantined'""", 0, "5m", "warning",
              "Health scoring has taken GPUs out of service (the GPUs dashboard lists them and why)."),
    AlertRule("gpuaware-critical-alerts-open", "Critical GPU alerts open for 15 minutes", """
SELECT count(*) AS open_critical FROM health_alerts WHERE resolved_at IS NULL AND severity = 'critical'
  AND started_at < now() - interval '15 minutes'""", 0, "1m", "critical",
              "A critical GPU alert (XID, uncorrectable ECC, thermal) has stayed open for 15 minutes."),
    AlertRule("gpuaware-queue-over-limit-waiting", "A queue uses its guaranteed GPUs with pods waiting", """
SELECT count(*) AS queues FROM (
  SELECT DISTINCT ON (cluster, queue) used_gpu_milli, guaranteed_gpu_milli, pending_pods FROM quota_usage
  WHERE ts > now() - interval '10 minutes' ORDER BY cluster, queue, ts DESC) q
WHERE guaranteed_gpu_milli > 0 AND used_gpu_milli >= guaranteed_gpu_milli AND pending_pods > 0""", 0, "15m", "info",
              "Queues at their guaranteed GPUs have pods waiting: they borrow or wait (the tenants dashboard)."),
    AlertRule("gpuaware-scheduler-backlog", "More than 100 pods pending", """
SELECT count(*) AS pending FROM (
  SELECT DISTINCT ON (cluster, pod_uid) subject FROM placement_events
  WHERE event_at > now() - interval '1 day' ORDER BY cluster, pod_uid, event_at DESC) p
WHERE subject LIKE 'binder.pod.pending%' OR subject LIKE 'placement.pod.unschedulable%'""", 100, "10m", "warning",
              "Pods wait for placement: the cluster is full or the queue trees refuse them (the scheduling dashboard)."),
    AlertRule("gpuaware-forecast-drift", "A forecast model is worse than persistence", """
SELECT count(*) AS drifting FROM forecast_points
WHERE issued_at > now() - interval '30 minutes' AND fallback LIKE 'model worse than persistence%'""", 0, "30m",
              "warning", "Persistence is served instead of the model: retrain and publish a new version."),
    AlertRule("gpuaware-unfair-share", "Jain's index under 0.8 for an hour", """
SELECT coalesce(min(jain_index), 1) AS jain FROM quota_usage WHERE ts > now() - interval '10 minutes'""",
              -0.8, "1h", "info", "The queues asking for GPUs are served unevenly (Jain's index of fair share)."),
)


def _rule(r: AlertRule) -> Any:
    last_10m = RelativeTimeRange(from_val=600, to=0)
    # a negative threshold means "below": Jain's index under 0.8 is -jain > -0.8
    expression = f"$A > {r.threshold:g}" if r.threshold >= 0 else f"-$A > {r.threshold:g}"
    return (alerting.Rule(r.title).uid(r.uid).condition("B").for_val(r.for_)
            .labels({"severity": r.severity, "team": "gpuaware"}).annotations({"summary": r.summary})
            .no_data_state("OK").exec_err_state("Error")
            .with_query(alerting.Query("A").datasource_uid(DATASOURCE_UID).relative_time_range(last_10m)
                        .model(Sql(r.sql, "table")))
            .with_query(alerting.Query("B").datasource_uid("__expr__").relative_time_range(last_10m)
                        .model(expr.TypeMath().expression(expression))))


def provisioning() -> dict[str, Any]:
    """Grafana's alerting provisioning file (``apiVersion: 1``, one group in the gpuaware folder)."""
    group = alerting.RuleGroup("gpuaware").interval(60)
    for r in ALERT_RULES:
        group = group.with_rule(_rule(r))
    built = json.loads(json.dumps(group.build(), cls=JSONEncoder))
    rules = []
    for rule in built["rules"]:
        for q in rule["data"]:  # a query's model names its own refId and, for SQL, the provisioned datasource
            q["model"]["refId"] = q["refId"]
            if "rawSql" in q["model"]:
                q["model"]["datasource"] = {"type": "grafana-postgresql-datasource", "uid": DATASOURCE_UID}
        rules.append({k: rule[k] for k in ("uid", "title", "condition", "data", "noDataState", "execErrState", "for",
                                           "labels", "annotations") if k in rule})
    return {"apiVersion": 1, "groups": [{"orgId": 1, "name": "gpuaware", "folder": "gpuaware", "interval": "1m",
                                         "rules": rules}]}
