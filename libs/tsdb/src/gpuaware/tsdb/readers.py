"""Read paths for services and dashboards: the latest sample per GPU, and rollup ranges.

`latest_samples` walks the (gpu_uuid, ts) primary key with a recursive "skip scan": one index probe
per GPU instead of reading every sample of the window, and a time bound so only recent partitions or
chunks are touched. `rollup_range` reads gpu_metrics_1m/1h, which have the same columns on either
backend, so this module never asks which backend it runs on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from psycopg import sql
from psycopg.rows import class_row

from gpuaware.tsdb.pool import Connection
from gpuaware.tsdb.rollups import ROLLUP_VIEWS
from gpuaware.tsdb.rows import ROLLUP_COLUMNS, SAMPLE_COLUMNS, Rollup, Sample

Resolution = Literal["1m", "1h"]

_SAMPLE_COLS = ", ".join(f"s.{c}" for c in SAMPLE_COLUMNS)
_LATEST = f"""
WITH RECURSIVE gpus(gpu_uuid) AS (
    (SELECT gpu_uuid FROM gpu_samples WHERE ts >= %(since)s ORDER BY gpu_uuid LIMIT 1)
    UNION ALL
    SELECT (SELECT s.gpu_uuid FROM gpu_samples s
            WHERE s.gpu_uuid > g.gpu_uuid AND s.ts >= %(since)s ORDER BY s.gpu_uuid LIMIT 1)
    FROM gpus g WHERE g.gpu_uuid IS NOT NULL
)
SELECT {_SAMPLE_COLS}
FROM gpus g
CROSS JOIN LATERAL (SELECT * FROM gpu_samples s1
                    WHERE s1.gpu_uuid = g.gpu_uuid AND s1.ts >= %(since)s
                    ORDER BY s1.ts DESC LIMIT 1) s
WHERE g.gpu_uuid IS NOT NULL AND (%(node)s::text IS NULL OR s.node = %(node)s::text)
ORDER BY s.node, s.gpu_uuid
"""


def _latest_params(within: timedelta, node: str | None, now: datetime | None) -> dict[str, Any]:
    now = now or datetime.now(UTC)
    return {"since": now - within, "node": node}


async def latest_samples(conn: Connection, *, within: timedelta = timedelta(minutes=15),
                         node: str | None = None, now: datetime | None = None) -> list[Sample]:
    """The newest sample of every GPU that reported in the last `within`, ordered by node, GPU."""
    async with conn.cursor(row_factory=class_row(Sample)) as cur:
        await cur.execute(_LATEST, _latest_params(within, node, now))
        return await cur.fetchall()


def _range_query(resolution: Resolution, start: datetime, end: datetime, gpu_uuid: str | None,
                 node: str | None) -> tuple[sql.Composed, dict[str, Any]]:
    if resolution not in ROLLUP_VIEWS:
        raise ValueError(f"resolution must be one of {sorted(ROLLUP_VIEWS)}, not {resolution!r}")
    query = sql.SQL(
        "SELECT {cols} FROM {view} WHERE bucket >= %(start)s AND bucket < %(end)s "
        "AND (%(gpu)s::text IS NULL OR gpu_uuid = %(gpu)s::text) "
        "AND (%(node)s::text IS NULL OR node = %(node)s::text) "
        "ORDER BY bucket, node, gpu_uuid"
    ).format(cols=sql.SQL(", ").join(map(sql.Identifier, ROLLUP_COLUMNS)),
             view=sql.Identifier(ROLLUP_VIEWS[resolution]))
    return query, {"start": start, "end": end, "gpu": gpu_uuid, "node": node}


async def rollup_range(conn: Connection, resolution: Resolution, start: datetime, end: datetime, *,
                       gpu_uuid: str | None = None, node: str | None = None) -> list[Rollup]:
    """Rollup rows with start <= bucket < end, optionally for one GPU or one node, oldest first."""
    query, params = _range_query(resolution, start, end, gpu_uuid, node)
    async with conn.cursor(row_factory=class_row(Rollup)) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


_UTIL_RANGE = """
SELECT ts, gpu_uuid, util_pct FROM gpu_samples
WHERE ts >= %(start)s AND ts < %(end)s AND node = ANY(%(nodes)s) AND util_pct IS NOT NULL
ORDER BY ts
"""


async def utilisation_range(conn: Connection, nodes: list[str], start: datetime,
                            end: datetime) -> list[tuple[datetime, str, float]]:
    """(ts, gpu_uuid, util_pct) of every raw sample of `nodes` in [start, end), oldest first: what a
    report needs to draw measured utilisation over time (samples are sparse by design, since the agent
    sends a GPU only when it moved or its heartbeat is due; the reader carries each value forward)."""
    async with conn.cursor() as cur:
        await cur.execute(_UTIL_RANGE, {"start": start, "end": end, "nodes": nodes})
        return [(ts, uuid, float(u)) for ts, uuid, u in await cur.fetchall()]
