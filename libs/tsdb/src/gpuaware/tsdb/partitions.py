"""Partition upkeep and raw-sample retention, the same call on either backend.

The work is done by SQL functions the migrations install (`gpuaware_ensure_partitions`,
`gpuaware_maintain_partitions`): natively they create daily partitions ahead of time, rescue rows
that landed in the default partition and drop expired days; with TimescaleDB chunks appear by
themselves and retention is `drop_chunks`. Keeping the logic in SQL means pg_cron or a DBA can run
it too, and a collector that may only INSERT can run it (the functions are SECURITY DEFINER).
Call `maintain_partitions` every few minutes from one service; it is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from gpuaware.tsdb.functions import aware, call_count
from gpuaware.tsdb.pool import Connection

RAW_RETENTION = timedelta(days=30)  # same as the TimescaleDB retention policy in 0003
PREMAKE_DAYS = 3

_MAINTAIN = "SELECT created, dropped FROM gpuaware_maintain_partitions(%s, %s, %s)"
_ENSURE = "SELECT gpuaware_ensure_partitions(%s::date[])"
_LIST = r"""
SELECT c.relname::text,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), $$FROM \('([^']+)'\)$$))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), $$TO \('([^']+)'\)$$))[1]::timestamptz
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('gpu_samples')
ORDER BY 2 NULLS FIRST, 1
"""


@dataclass(frozen=True)
class PartitionReport:
    created: int
    dropped: list[str]


@dataclass(frozen=True)
class Partition:
    """A child of the natively partitioned gpu_samples; the default partition has no bounds."""

    name: str
    lower: datetime | None
    upper: datetime | None


def _args(now: datetime | None, ahead_days: int, retention: timedelta) -> tuple[datetime, int, timedelta]:
    now = aware(now or datetime.now(UTC), "now")
    if ahead_days < 0 or retention <= timedelta(0):
        raise ValueError("ahead_days must be >= 0 and retention positive")
    return now, ahead_days, retention


async def maintain_partitions(conn: Connection, *, now: datetime | None = None, ahead_days: int = PREMAKE_DAYS,
                              retention: timedelta = RAW_RETENTION) -> PartitionReport:
    """Create partitions for yesterday..today+ahead_days, drop days older than `retention`."""
    async with conn.transaction():
        cur = await conn.execute(_MAINTAIN, _args(now, ahead_days, retention))
        row = await cur.fetchone()
    assert row is not None
    return PartitionReport(created=row[0], dropped=list(row[1]))


async def ensure_partitions(conn: Connection, days: Iterable[date]) -> int:
    """Make sure the given UTC days have partitions; returns how many were created (0 on TimescaleDB)."""
    return await call_count(conn, _ENSURE, (sorted(set(days)),))


async def list_partitions(conn: Connection) -> list[Partition]:
    """The native partitions of gpu_samples, oldest first (empty on TimescaleDB)."""
    cur = await conn.execute(_LIST)
    return [Partition(*row) for row in await cur.fetchall()]
