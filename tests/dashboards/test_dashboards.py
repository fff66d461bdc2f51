"""The Grafana dashboards as code: deploy/grafana is what the code writes now; every panel has its
datasource and a query; every SQL panel's query, its macros expanded as Grafana does, runs on a freshly
migrated PostgreSQL (the full demo test runs them again on a database a demo filled and requires rows)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from gpuaware import tsdb
from gpuaware.dashboards import DASHBOARDS, expand, sql_panels
from gpuaware.dashboards.__main__ import write

REPO = Path(__file__).resolve().parents[2]
DEPLOYED = REPO / "deploy" / "grafana"


def test_deploy_grafana_is_current(tmp_path: Path) -> None:
    written = write(tmp_path)
    for path in written:
        rel = path.relative_to(tmp_path)
        assert (DEPLOYED / rel).read_text() == path.read_text(), (
            f"deploy/grafana/{rel} is stale: run `python -m gpuaware.dashboards deploy/grafana`")
    assert {p.stem for p in (DEPLOYED / "dashboards").glob("*.json")} == set(DASHBOARDS)


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_every_panel_has_a_datasource_and_a_query(uid: str) -> None:
    d = json.loads((DEPLOYED / "dashboards" / f"{uid}.json").read_text())
    assert d["uid"] == uid and d["title"].startswith("gpuaware: ") and "gpuaware" in d["tags"]
    variables = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "cluster"} <= variables
    assert d["panels"], uid
    for p in d["panels"]:
        assert p["datasource"]["uid"] in ("${datasource}", "${prometheus}"), p["title"]
        (target,) = p["targets"]
        assert target.get("rawSql") or target.get("expr"), p["title"]
        if "rawSql" in target:
            assert target["datasource"]["type"] == "grafana-postgresql-datasource"
            assert target["format"] in ("time_series", "table")
        else:
            assert "prometheus" in variables


def test_every_grafana_alert_rule_is_a_sql_query_and_a_condition(fresh_database_url: str) -> None:
    import yaml

    from gpuaware.dashboards.alerts import ALERT_RULES, DATASOURCE_UID

    prov = yaml.safe_load((DEPLOYED / "provisioning" / "alerting" / "gpuaware.yaml").read_text())
    (group,) = prov["groups"]
    assert [r["uid"] for r in group["rules"]] == [r.uid for r in ALERT_RULES]
    datasources = yaml.safe_load((DEPLOYED / "provisioning" / "datasources" / "gpuaware.yaml").read_text())
    assert DATASOURCE_UID in {d["uid"] for d in datasources["datasources"]}
    asyncio.run(tsdb.migrate(fresh_database_url))
    with psycopg.connect(fresh_database_url) as conn:
        for rule in group["rules"]:
            sql_q, cond = rule["data"]
            assert rule["condition"] == cond["refId"] == cond["model"]["refId"] == "B"
            assert cond["datasourceUid"] == "__expr__" and "$A" in cond["model"]["expression"]
            assert sql_q["datasourceUid"] == sql_q["model"]["datasource"]["uid"] == DATASOURCE_UID
            row = conn.execute(sql_q["model"]["rawSql"]).fetchall()
            assert len(row) == 1 and len(row[0]) == 1 and float(row[0][0]) >= 0, rule["title"]


def test_every_sql_panel_runs_on_the_schema(fresh_database_url: str) -> None:
    asyncio.run(tsdb.migrate(fresh_database_url))
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    with psycopg.connect(fresh_database_url) as conn:
        for p in sql_panels():
            sql = expand(p.sql, start, end, "c1")
            assert "$" not in sql.replace("$$", ""), f"{p.title}: an unexpanded macro or variable in\n{sql}"
            cur = conn.execute(sql)  # raises on a missing table or column
            cols = [c.name for c in cur.description]
            if p.kind == "timeseries":
                assert cols[0] == "time" and len([c for c in cols if c not in ("time", "metric")]) == 1, (p.title, cols)
            conn.rollback()
