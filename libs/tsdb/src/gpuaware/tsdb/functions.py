"""Calling the SQL functions the migrations install: one statement, in its own transaction, one value back.

The maintenance and retention work lives in SQL (`gpuaware_ensure_partitions`,
`gpuaware_drop_expired_rollups`, `gpuaware_expire_health`, ...), so a DBA or pg_cron can run it too;
the Python side only passes arguments and reads the count the function returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import sql

from gpuaware.tsdb.pool import Connection


async def call_count(conn: Connection, query: str | bytes | sql.SQL | sql.Composed, params: Sequence[Any] | None = None) -> int:
    """Run `query` (a SELECT of one function returning a count) in a transaction; its count, 0 for NULL."""
    async with conn.transaction():
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def aware(value: datetime, what: str) -> datetime:
    """`value`, refused when it has no time zone (the database would read it in its own)."""
    if value.tzinfo is None:
        raise ValueError(f"{what} must be timezone-aware")
    return value
