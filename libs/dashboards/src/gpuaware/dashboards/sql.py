"""A PostgreSQL (grafana-postgresql-datasource) query for the Grafana foundation SDK, which ships builders
for Prometheus and others but none for SQL: the same ``Dataquery`` variant and ``Builder`` shape, so a
panel's ``with_target`` takes it like any other.

Queries use only Grafana's ``$__timeFilter(col)``, ``$__timeFrom()``, ``$__timeTo()`` and
``$__timeGroupAlias(col, '<interval>')`` macros and the dashboard's ``$cluster`` variable; ``expand`` turns them into plain SQL the way Grafana does, so tests
(and ``gpuaware demo``'s panel images) run exactly the dashboards' SQL against a database.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants

__all__ = ["DATASOURCE", "Sql", "SqlQuery", "expand"]

#: the datasource every SQL panel uses: the dashboard's ``$datasource`` variable of this type
DATASOURCE = {"type": "grafana-postgresql-datasource", "uid": "${datasource}"}


class SqlQuery(cogvariants.Dataquery):
    def __init__(self, sql: str, fmt: Literal["time_series", "table"], ref_id: str = "A") -> None:
        self.sql, self.fmt, self.ref_id = sql, fmt, ref_id

    def to_json(self) -> dict[str, Any]:
        return {"refId": self.ref_id, "datasource": DATASOURCE, "editorMode": "code", "rawQuery": True,
                "format": self.fmt, "rawSql": self.sql}


class Sql(cogbuilder.Builder[SqlQuery]):
    def __init__(self, sql: str, fmt: Literal["time_series", "table"] = "time_series", ref_id: str = "A") -> None:
        self._internal = SqlQuery(sql.strip(), fmt, ref_id)

    def build(self) -> SqlQuery:
        return self._internal


_TIME_FILTER = re.compile(r"\$__timeFilter\(([^)]+)\)")
_TIME_GROUP = re.compile(r"\$__timeGroupAlias\(([^,]+),\s*'([0-9]+)([smhd])'\)")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def expand(sql: str, start: datetime, end: datetime, cluster: str) -> str:
    """Grafana's macros and the ``$cluster`` variable, expanded as Grafana's PostgreSQL datasource does."""
    out = _TIME_FILTER.sub(lambda m: f"{m.group(1)} BETWEEN '{start.isoformat()}' AND '{end.isoformat()}'", sql)
    out = out.replace("$__timeFrom()", f"'{start.isoformat()}'::timestamptz")
    out = out.replace("$__timeTo()", f"'{end.isoformat()}'::timestamptz")
    out = _TIME_GROUP.sub(lambda m: f"date_bin('{m.group(2)} {_UNITS[m.group(3)]}', {m.group(1)}, "
                                    f"TIMESTAMPTZ '2000-01-01') AS time", out)
    return out.replace("'$cluster'", "'" + cluster.replace("'", "''") + "'")
