"""Helpers shared by the tsdb tests (imported by name; pytest puts this folder on sys.path)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuaware.tsdb import Connection, Sample


def at(text: str) -> datetime:
    """'2025-03-01 10:00:30' -> aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def sample(ts: datetime | str, gpu: str = "GPU-a", node: str = "node-1", **metrics: Any) -> Sample:
    return Sample(ts=at(ts) if isinstance(ts, str) else ts, node=node, gpu_uuid=gpu, **metrics)


async def fetch_all(conn: Connection, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Every row `query` returns."""
    cur = await conn.execute(query, params)
    return await cur.fetchall()


async def fetch_one(conn: Connection, query: str, params: Any = None) -> tuple[Any, ...] | None:
    """The first row `query` returns, None when it returns none."""
    cur = await conn.execute(query, params)
    return await cur.fetchone()


async def columns(conn: Connection, relation: str) -> list[tuple[Any, ...]]:
    """(name, type) of every column of a table or view, in order."""
    return await fetch_all(conn, """
        SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum""", (relation,))
