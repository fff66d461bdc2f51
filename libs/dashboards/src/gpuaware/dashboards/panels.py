"""gpuaware's Grafana dashboards, as code (the Grafana foundation SDK), over the tables and views of
``libs/tsdb`` (the same on TimescaleDB and native PostgreSQL) and, for bus health, Prometheus.

Five dashboards: the cluster (allocation, measured utilisation, GPUs by model), the GPUs (thermals,
power, ECC, health states and alerts), tenants (usage against guaranteed and fair share, Jain's index,
chargeback), forecasts against actuals, and scheduling (decisions, pending pods and why, preemptions,
the bus's dead letters and consumer lag). ``DASHBOARDS`` lists them; ``sql_panels`` every SQL panel's
query, which the tests run against a database a demo filled and ``gpuaware demo`` plots as images.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard, stat, table, timeseries
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from gpuaware.dashboards.sql import DATASOURCE, Sql

__all__ = ["DASHBOARDS", "SqlPanel", "build_all", "sql_panels"]

PROMETHEUS = {"type": "prometheus", "uid": "${prometheus}"}


@dataclass(frozen=True)
class SqlPanel:
    """One SQL panel: where it is, what it shows, its query (with Grafana's macros)."""

    dashboard: str
    title: str
    kind: str
    """``timeseries``, ``table`` or ``stat``"""
    sql: str
    unit: str = ""


def _ts(p: SqlPanel, span: int = 12) -> Any:
    b = timeseries.Panel().title(p.title).with_target(Sql(p.sql, "time_series")).height(8).span(span)
    b = b.datasource(DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"]))
    return b.unit(p.unit) if p.unit else b


def _table(p: SqlPanel, span: int = 12) -> Any:
    return (table.Panel().title(p.title).with_target(Sql(p.sql, "table")).height(8).span(span)
            .datasource(DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])))


def _stat(p: SqlPanel, span: int = 6) -> Any:
    b = (stat.Panel().title(p.title).with_target(Sql(p.sql, "table")).height(4).span(span)
         .datasource(DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])))
    return b.unit(p.unit) if p.unit else b


_BUILD: dict[str, Callable[[SqlPanel], Any]] = {"timeseries": _ts, "table": _table, "stat": _stat}


# --- the panels ------------------------------------------------------------------------------------

CLUSTER = "gpuaware-cluster"
GPUS = "gpuaware-gpus"
TENANTS = "gpuaware-tenants"
FORECASTS = "gpuaware-forecasts"
SCHEDULING = "gpuaware-scheduling"

_BOUND_DELTA = """CASE WHEN subject LIKE 'binder.pod.bound%' THEN gpu_milli
            WHEN subject LIKE 'binder.pod.finished%' OR subject LIKE 'binder.pod.preempted%' THEN -gpu_milli
            ELSE 0 END"""

PANELS: tuple[SqlPanel, ...] = (
    SqlPanel(CLUSTER, "GPUs allocated (bound pods' GPU compute)", "timeseries", f"""
SELECT time, sum(delta) OVER (ORDER BY time, msg_key) / 1000.0 AS gpus_allocated FROM (
  SELECT event_at AS time, msg_key, {_BOUND_DELTA} AS delta
  FROM placement_events WHERE cluster = '$cluster') e
WHERE $__timeFilter(time) ORDER BY 1""", "none"),
    SqlPanel(CLUSTER, "Measured GPU utilisation (telemetry, every GPU)", "timeseries", """
SELECT $__timeGroupAlias(bucket, '5m'), avg(util_avg) / 100.0 AS utilisation
FROM gpu_metrics_1m WHERE $__timeFilter(bucket) GROUP BY 1 ORDER BY 1""", "percentunit"),
    SqlPanel(CLUSTER, "Fragmentation: free compute on partly used GPUs (at the end of the range)", "stat", """
SELECT round(coalesce(sum(CASE WHEN used > 0 AND used < 1000 THEN 1000 - used ELSE 0 END), 0)
             / greatest(1000.0 * (SELECT count(*) FROM gpu_inventory), 1), 4) AS fragmentation
FROM (SELECT s->>'gpu_uuid' AS gpu,
             sum(CASE WHEN e.subject LIKE 'binder.pod.bound%' THEN (s->>'gpu_milli')::int
                      ELSE -(s->>'gpu_milli')::int END) AS used
      FROM placement_events e CROSS JOIN LATERAL jsonb_array_elements(e.payload->'slices') s
      WHERE e.cluster = '$cluster' AND e.event_at <= $__timeTo()
        AND (e.subject LIKE 'binder.pod.bound%' OR e.subject LIKE 'binder.pod.finished%'
             OR e.subject LIKE 'binder.pod.preempted%')
      GROUP BY 1) g""", "percentunit"),
    SqlPanel(CLUSTER, "GPUs by model", "table", """
SELECT model, count(*) AS gpus, round(sum(memory_mib) / 1024.0) AS memory_gib, count(DISTINCT node) AS nodes
FROM gpu_inventory GROUP BY model ORDER BY gpus DESC"""),
    SqlPanel(GPUS, "Temperature (hottest GPU per node)", "timeseries", """
SELECT $__timeGroupAlias(bucket, '5m'), node AS metric, max(temp_max) AS temp_c
FROM gpu_metrics_1m WHERE $__timeFilter(bucket) GROUP BY 1, 2 ORDER BY 1""", "celsius"),
    SqlPanel(GPUS, "Power draw (sum over GPUs)", "timeseries", """
SELECT $__timeGroupAlias(bucket, '5m'), sum(power_avg) / count(DISTINCT bucket) AS watts
FROM gpu_metrics_1m WHERE $__timeFilter(bucket) GROUP BY 1 ORDER BY 1""", "watt"),
    SqlPanel(GPUS, "ECC errors and XIDs (GPUs with any)", "table", """
SELECT node, gpu_uuid, max(ecc_volatile_max) AS ecc_volatile, max(ecc_aggregate_max) AS ecc_aggregate,
       max(retired_rows_max) AS retired_rows, max(xid_last_max) AS last_xid
FROM gpu_metrics_1m WHERE $__timeFilter(bucket)
GROUP BY node, gpu_uuid HAVING max(ecc_volatile_max) > 0 OR max(xid_last_max) > 0 OR max(retired_rows_max) > 0
ORDER BY ecc_volatile DESC NULLS LAST LIMIT 50"""),
    SqlPanel(GPUS, "GPUs per health state", "table", """
SELECT state, count(*) AS gpus FROM health_gpu_state WHERE cluster = '$cluster' GROUP BY state ORDER BY state"""),
    SqlPanel(GPUS, "Health state changes", "table", """
SELECT ts AS time, node, gpu_uuid, previous, state, score, cause FROM health_scores
WHERE cluster = '$cluster' AND changed AND $__timeFilter(ts) ORDER BY ts DESC LIMIT 100"""),
    SqlPanel(GPUS, "Alerts raised (open first)", "table", """
SELECT started_at AS time, rule, severity, node, gpu_uuid, summary, resolved_at FROM health_alerts
WHERE cluster = '$cluster' AND $__timeFilter(started_at)
ORDER BY resolved_at IS NOT NULL, started_at DESC LIMIT 100"""),
    SqlPanel(TENANTS, "GPUs used per queue", "timeseries", """
SELECT ts AS time, queue AS metric, used_gpu_milli / 1000.0 AS gpus FROM quota_usage
WHERE cluster = '$cluster' AND parent IS NOT NULL AND $__timeFilter(ts) ORDER BY 1""", "none"),
    SqlPanel(TENANTS, "Used against guaranteed and fair share (latest)", "table", """
SELECT DISTINCT ON (queue) queue, used_gpu_milli / 1000.0 AS used_gpus, guaranteed_gpu_milli / 1000.0 AS guaranteed_gpus,
       fair_share_gpu_milli / 1000.0 AS fair_share_gpus, running_pods, pending_pods
FROM quota_usage WHERE cluster = '$cluster' AND $__timeFilter(ts) ORDER BY queue, ts DESC"""),
    SqlPanel(TENANTS, "Jain's index over the queues asking", "timeseries", """
SELECT ts AS time, max(jain_index) AS jain FROM quota_usage
WHERE cluster = '$cluster' AND jain_index IS NOT NULL AND $__timeFilter(ts) GROUP BY ts ORDER BY 1""", "none"),
    SqlPanel(TENANTS, "Chargeback: GPU-hours per queue (in the time range)", "table", """
SELECT queue, tenant, count(*) AS pods,
       round(sum(gpu_milli / 1000.0 * hours), 3) AS gpu_hours,
       round(sum(gpu_memory_mib / 1024.0 * hours), 1) AS gpu_memory_gib_hours
FROM (SELECT queue, tenant, gpu_milli, gpu_memory_mib,
             extract(epoch FROM (least(coalesce(ended_at, now()), $__timeTo())
                                 - greatest(started_at, $__timeFrom()))) / 3600.0 AS hours
      FROM quota_intervals WHERE cluster = '$cluster' AND started_at < $__timeTo()
        AND coalesce(ended_at, now()) > $__timeFrom()) i
GROUP BY queue, tenant ORDER BY gpu_hours DESC"""),
    SqlPanel(FORECASTS, "Demand: actual and forecast 30 minutes ahead", "timeseries", """
SELECT target_at AS time, 'forecast p50' AS metric, p50 AS gpus FROM forecast_points
WHERE series = 'demand/' || '$cluster' || '/*' AND horizon_s = 1800 AND $__timeFilter(target_at)
UNION ALL
SELECT target_at, 'actual', avg(actual) FROM forecast_points
WHERE series = 'demand/' || '$cluster' || '/*' AND actual IS NOT NULL AND $__timeFilter(target_at)
GROUP BY target_at ORDER BY 1""", "none"),
    SqlPanel(FORECASTS, "Forecast error per model and horizon", "table", """
SELECT model, model_version, horizon_s / 60 AS horizon_min, count(*) AS points,
       round(sqrt(avg((p50 - actual) ^ 2))::numeric, 3) AS rmse,
       round(avg((actual <= p90)::int)::numeric, 3) AS p90_coverage
FROM forecast_points WHERE actual IS NOT NULL AND $__timeFilter(target_at)
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""),
    SqlPanel(SCHEDULING, "Decisions and bindings per minute", "timeseries", """
SELECT $__timeGroupAlias(event_at, '10m'), split_part(subject, '.', 3) AS metric, count(*) AS events
FROM placement_events WHERE cluster = '$cluster' AND $__timeFilter(event_at)
  AND (subject LIKE 'placement.pod.decided%' OR subject LIKE 'binder.pod.bound%') GROUP BY 1, 2 ORDER BY 1""", "none"),
    SqlPanel(SCHEDULING, "Why pods wait (unschedulable verdicts by reason)", "table", """
SELECT coalesce(nullif(detail, ''), 'unknown') AS reason, count(*) AS verdicts, count(DISTINCT pod_uid) AS pods
FROM placement_events WHERE cluster = '$cluster' AND subject LIKE 'placement.pod.unschedulable%'
  AND $__timeFilter(event_at) GROUP BY 1 ORDER BY verdicts DESC LIMIT 20"""),
    SqlPanel(SCHEDULING, "Preemptions", "stat", """
SELECT count(*) AS preempted FROM placement_events
WHERE cluster = '$cluster' AND subject LIKE 'binder.pod.preempted%' AND $__timeFilter(event_at)"""),
    SqlPanel(SCHEDULING, "Pods pending now", "stat", """
SELECT count(*) AS pending FROM (
  SELECT pod_uid, (array_agg(subject ORDER BY event_at DESC))[1] AS last FROM placement_events
  WHERE cluster = '$cluster' GROUP BY pod_uid) p
WHERE last LIKE 'binder.pod.pending%' OR last LIKE 'placement.pod.unschedulable%'"""),
)

TITLES = {CLUSTER: "gpuaware: cluster", GPUS: "gpuaware: GPUs and health", TENANTS: "gpuaware: tenants and quota",
          FORECASTS: "gpuaware: forecasts", SCHEDULING: "gpuaware: scheduling and the bus"}

#: bus health from Prometheus (the services' /metrics): not in the database
PROMETHEUS_PANELS = (
    ("Dead letters per consumer (15 min)", "sum by (consumer) (increase(gpuaware_bus_dead_letters_total[15m]))"),
    ("Consumer lag (messages waiting)", "max by (consumer) (gpuaware_bus_consumer_lag_messages)"),
    ("Pending -> decision p99", "histogram_quantile(0.99, sum by (le) "
                                "(rate(gpuaware_placement_decision_latency_seconds_bucket[5m])))"),
)


def sql_panels() -> tuple[SqlPanel, ...]:
    return PANELS


def _dashboard(uid: str) -> Any:
    d = (dashboard.Dashboard(TITLES[uid]).uid(uid).tags(["gpuaware"]).time("now-24h", "now").refresh("1m")
         .with_variable(dashboard.DatasourceVariable("datasource").label("database")
                        .type("grafana-postgresql-datasource"))
         .with_variable(dashboard.QueryVariable("cluster").label("cluster")
                        .datasource(DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"]))
                        .query("SELECT DISTINCT cluster FROM placement_events UNION "
                               "SELECT DISTINCT cluster FROM quota_usage ORDER BY 1")))
    for p in PANELS:
        if p.dashboard == uid:
            d = d.with_panel(_BUILD[p.kind](p))
    if uid == SCHEDULING:
        d = d.with_variable(dashboard.DatasourceVariable("prometheus").label("Prometheus").type("prometheus"))
        for title, expr in PROMETHEUS_PANELS:
            d = d.with_panel(timeseries.Panel().title(title).height(8).span(8)
                             .datasource(DataSourceRef(type_val="prometheus", uid=PROMETHEUS["uid"]))
                             .with_target(prom.Dataquery().expr(expr).legend_format("{{consumer}}")))
    return d


DASHBOARDS: tuple[str, ...] = (CLUSTER, GPUS, TENANTS, FORECASTS, SCHEDULING)


def build_all() -> dict[str, Any]:
    """uid -> the dashboard (the SDK's model; ``json.dumps(d, cls=JSONEncoder)`` is Grafana's JSON)."""
    return {uid: _dashboard(uid).build() for uid in DASHBOARDS}
