"""gpuaware.dashboards: Grafana dashboards as code, written to ``deploy/grafana`` by
``python -m gpuaware.dashboards deploy/grafana`` (dashboards JSON + provisioning for the PostgreSQL /
TimescaleDB datasource and the dashboard folder)."""

from gpuaware.dashboards.panels import DASHBOARDS, SqlPanel, build_all, sql_panels
from gpuaware.dashboards.sql import expand

__all__ = ["DASHBOARDS", "SqlPanel", "build_all", "expand", "sql_panels"]
