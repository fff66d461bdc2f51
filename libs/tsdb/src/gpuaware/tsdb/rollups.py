"""Refresh and expire the 1-minute and 1-hour rollups, the same call on either backend.

Natively the rollups are tables recomputed by `gpuaware_refresh_rollups(since, until)` (one
transaction, rows of every overlapping bucket replaced). With TimescaleDB they are continuous
aggregates refreshed by `CALL refresh_continuous_aggregate`, which commits internally and so must
run outside any transaction; its background policy does the same on a schedule. `refresh_statements`
is the pure choice of SQL, unit-tested for both backends.

Refresh from the oldest timestamp written since the last refresh (late samples included); a
refresh is idempotent, so overlapping windows are only wasted work, never wrong results.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from psycopg.pq import TransactionStatus

from gpuaware.tsdb.capabilities import Backend, installed_backend
from gpuaware.tsdb.errors import TsdbError
from gpuaware.tsdb.functions import aware, call_count
from gpuaware.tsdb.pool import Connection

ROLLUP_VIEWS = {"1m": "gpu_metrics_1m", "1h": "gpu_metrics_1h"}
ROLLUP_1M_RETENTION = timedelta(days=90)  # same as the TimescaleDB policies in 0004
ROLLUP_1H_RETENTION = timedelta(days=730)

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # bucket origin of time_bucket/date_bin for minutes and hours
_EXPIRE = "SELECT gpuaware_drop_expired_rollups(%s, %s)"


def _floor(value: datetime, width: timedelta) -> datetime:
    return _EPOCH + ((value - _EPOCH) // width) * width


def _literal(value: datetime | None) -> str:
    # a datetime's isoformat contains no quote, so this literal is safe to inline
    return "NULL::timestamptz" if value is None else f"TIMESTAMPTZ '{value.astimezone(UTC).isoformat()}'"


def refresh_statements(backend: Backend, since: datetime, until: datetime | None = None) -> list[str]:
    """The SQL that refreshes every 1m/1h bucket overlapping [since, until) (until None = no end)."""
    aware(since, "since")
    if until is not None:
        aware(until, "until")
    if backend == "native":
        return [f"SELECT gpuaware_refresh_rollups({_literal(since)}, {_literal(until)})"]
    statements = []
    for view, width in (("gpu_metrics_1m", timedelta(minutes=1)), ("gpu_metrics_1h", timedelta(hours=1))):
        start = _floor(since, width)
        end = None if until is None else _floor(until - timedelta(microseconds=1), width) + width
        statements.append(f"CALL refresh_continuous_aggregate('{view}', {_literal(start)}, {_literal(end)})")
    return statements


async def refresh_rollups(conn: Connection, since: datetime, until: datetime | None = None) -> int | None:
    """Bring gpu_metrics_1m/1h up to date for [since, until); returns rollup rows written (native)
    or None (TimescaleDB does not say). With TimescaleDB `conn` must not be inside a transaction."""
    was_idle = conn.info.transaction_status == TransactionStatus.IDLE
    backend = _backend(await installed_backend(conn))
    if was_idle and not conn.autocommit:
        await conn.commit()  # close the read transaction the lookup opened
    statements = refresh_statements(backend, since, until)
    if backend == "native":
        return await call_count(conn, statements[0].encode())
    if not was_idle:
        raise TsdbError("refresh_rollups with TimescaleDB must run outside a transaction")
    saved = conn.autocommit
    await conn.set_autocommit(True)
    try:
        for statement in statements:
            await conn.execute(statement.encode())
    finally:
        await conn.set_autocommit(saved)
    return None


async def expire_rollups(conn: Connection, *, now: datetime | None = None, keep_1m: timedelta = ROLLUP_1M_RETENTION,
                         keep_1h: timedelta = ROLLUP_1H_RETENTION) -> int:
    """Rollup retention on demand: rows deleted natively, chunks dropped with TimescaleDB."""
    now = aware(now or datetime.now(UTC), "now")
    return await call_count(conn, _EXPIRE, (now - keep_1m, now - keep_1h))


def _backend(value: Backend | None) -> Backend:
    if value is None:
        raise TsdbError("gpu_metrics rollups are missing: run gpuaware.tsdb.migrate(dsn) first")
    return value
