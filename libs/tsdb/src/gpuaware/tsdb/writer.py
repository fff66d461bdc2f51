"""Batch writers: COPY into a session staging table, then one INSERT ... ON CONFLICT DO NOTHING.

Why this shape: COPY is the fastest way into PostgreSQL (binary format, no per-row statements), but
COPY cannot skip duplicates. Telemetry arrives at-least-once (JetStream redelivers after a crash),
so rows go first into a temporary staging table and from there into `gpu_samples` with
`ON CONFLICT DO NOTHING` on its (gpu_uuid, ts) key: a redelivered batch inserts nothing and the
count returned is exactly the new rows. The staging table is created once per session
(ON COMMIT DELETE ROWS), so steady-state batches cost no catalog churn. Needs session-level pooling (temp tables do not survive
PgBouncer transaction pooling).

Before inserting, the batch's UTC days get partitions (`gpuaware_ensure_partitions`, a no-op on
TimescaleDB) so rows land in their day, not in the default partition.

`copy_rows` is the raw COPY, no dedupe, for benchmarks and bulk loads into any table.

Columnar batches (`SampleColumns`, see `binary.py`) take a faster road to the same guarantee:
`write_sample_columns` first COPYs the batch straight into `gpu_samples` (no staging, one
numpy-built binary payload); only if that hits the primary key (a redelivery, a batch overlapping
one already stored) does the transaction roll back and the same payload go through the staging
table and `ON CONFLICT DO NOTHING`. The common case thus costs one COPY, the rare one two, and the
result is the same either way: every (gpu_uuid, ts) stored once, the count of new rows returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import psycopg
from psycopg import AsyncCopy, sql
from psycopg.pq import TransactionStatus

from gpuaware.tsdb.binary import SampleColumns, encode_sample_columns
from gpuaware.tsdb.pool import Connection
from gpuaware.tsdb.rows import LEGACY_SAMPLE_COLUMNS, SAMPLE_COLUMNS, SAMPLE_PG_TYPES

_NCOLS = len(SAMPLE_COLUMNS)
_COLS = sql.SQL(", ").join(map(sql.Identifier, SAMPLE_COLUMNS))
_STAGING = "pg_temp.gpu_samples_staging"
# spelled out rather than LIKE gpu_samples: LIKE needs SELECT on the table, the collector has INSERT only
_CREATE_STAGING = ("CREATE TEMP TABLE IF NOT EXISTS gpu_samples_staging ("
                   + ", ".join(f"{c} {t}" for c, t in zip(SAMPLE_COLUMNS, SAMPLE_PG_TYPES, strict=True))
                   + ") ON COMMIT DELETE ROWS")
_CLEAR_STAGING = f"TRUNCATE {_STAGING}"
_ENSURE = "SELECT gpuaware_ensure_partitions(%s::date[])"
_COPY_STAGING = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
    sql.SQL(_STAGING), _COLS)
# no conflict target: naming (gpu_uuid, ts) would need SELECT on those columns, which the INSERT-only
# collector role lacks; the primary key is the table's only unique constraint, so the effect is the same
_INSERT = sql.SQL("INSERT INTO gpu_samples ({cols}) SELECT {cols} FROM {staging} "
                  "ON CONFLICT DO NOTHING").format(cols=_COLS, staging=sql.SQL(_STAGING))

_COPY_DIRECT = sql.SQL("COPY gpu_samples ({}) FROM STDIN (FORMAT BINARY)").format(_COLS)

SampleLike = Sequence[Any] | Mapping[str, Any] | Any


def _as_row(item: SampleLike) -> tuple[Any, ...]:
    """A tuple in SAMPLE_COLUMNS order from a tuple/Sample, a mapping, or an object with attributes."""
    if isinstance(item, tuple | list):
        row = tuple(item)
        if len(row) == _NCOLS:
            return row
        if LEGACY_SAMPLE_COLUMNS <= len(row) < _NCOLS:  # a tuple from before 0006: the new columns are NULL
            return row + (None,) * (_NCOLS - len(row))
        raise ValueError(f"a sample tuple needs {_NCOLS} fields in SAMPLE_COLUMNS order, got {len(row)}")
    if isinstance(item, Mapping):
        return tuple(item.get(c) for c in SAMPLE_COLUMNS)
    return tuple(getattr(item, c, None) for c in SAMPLE_COLUMNS)


def prepare_samples(items: Iterable[SampleLike]) -> tuple[list[tuple[Any, ...]], list[date]]:
    """Rows ready for COPY plus the sorted UTC days they fall on; rejects naive timestamps."""
    rows: list[tuple[Any, ...]] = []
    days: set[date] = set()
    for item in items:
        row = _as_row(item)
        ts = row[0]
        if not isinstance(ts, datetime) or ts.tzinfo is None:
            raise ValueError(f"sample ts must be a timezone-aware datetime, got {ts!r}")
        if not row[1] or not row[2]:
            raise ValueError(f"sample needs node and gpu_uuid, got node={row[1]!r} gpu_uuid={row[2]!r}")
        rows.append(row)
        days.add(ts.astimezone(UTC).date())
    return rows, sorted(days)


async def write_samples(conn: Connection, samples: Iterable[SampleLike]) -> int:
    """Insert samples idempotently on (gpu_uuid, ts); returns how many rows were new.

    Runs in its own transaction (or a savepoint inside the caller's), so a batch lands whole or not at all.
    """
    rows, days = prepare_samples(samples)
    if not rows:
        return 0

    async def fill(copy: AsyncCopy) -> None:
        copy.set_types(list(SAMPLE_PG_TYPES))
        for row in rows:
            await copy.write_row(row)

    return await _insert_deduplicated(conn, days, fill, nested=_in_transaction(conn))


def _in_transaction(conn: Connection) -> bool:
    return conn.info.transaction_status != TransactionStatus.IDLE


async def _insert_deduplicated(conn: Connection, days: Sequence[date], fill: Callable[[AsyncCopy], Awaitable[None]],
                               *, nested: bool) -> int:
    """COPY into the session's staging table, then INSERT ... ON CONFLICT DO NOTHING; the rows inserted."""
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute(_CREATE_STAGING)
        if nested:
            await cur.execute(_CLEAR_STAGING)  # ON COMMIT has not emptied it yet inside the caller's transaction
        await cur.execute(_ENSURE, (list(days),))
        async with cur.copy(_COPY_STAGING) as copy:
            await fill(copy)
        await cur.execute(_INSERT)
        return cur.rowcount


def _copy_sql(table: str, columns: Sequence[str], binary: bool) -> sql.Composed:
    target = sql.Identifier(*table.split(".", 1))
    fmt = sql.SQL(" (FORMAT BINARY)" if binary else "")
    return sql.SQL("COPY {} ({}) FROM STDIN{}").format(
        target, sql.SQL(", ").join(map(sql.Identifier, columns)), fmt)


async def copy_rows(conn: Connection, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                    *, types: Sequence[str] | None = None) -> int:
    """Raw COPY of `rows` into `table` (no dedupe, no partition upkeep); returns rows sent.

    With `types` (PostgreSQL type names, one per column) the binary format is used; without, text.
    Commits only if `conn` is in autocommit mode or the caller commits.
    """
    count = 0
    async with conn.cursor() as cur, cur.copy(_copy_sql(table, columns, types is not None)) as copy:
        if types is not None:
            copy.set_types(list(types))
        for row in rows:
            await copy.write_row(row)
            count += 1
    return count


# --- columnar batches -------------------------------------------------------------------------------

async def write_sample_columns(conn: Connection, batch: SampleColumns) -> int:
    """Insert a columnar batch idempotently on (gpu_uuid, ts); returns how many rows were new.

    One COPY when none of the rows is stored yet; staging + ON CONFLICT DO NOTHING otherwise (see the
    module docstring). Runs in its own transaction (or savepoints inside the caller's).
    """
    if not len(batch):
        return 0
    payload = encode_sample_columns(batch)
    days = batch.days()
    nested = _in_transaction(conn)
    try:
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(_ENSURE, (days,))
            async with cur.copy(_COPY_DIRECT) as copy:
                await copy.write(payload)
        return len(batch)
    except psycopg.errors.UniqueViolation:
        pass  # some rows are stored already: the transaction rolled back, take the deduplicating road

    async def fill(copy: AsyncCopy) -> None:
        await copy.write(payload)

    return await _insert_deduplicated(conn, days, fill, nested=nested)


async def copy_binary(conn: Connection, table: str, columns: Sequence[str], payload: bytes) -> None:
    """Raw COPY of an already encoded binary payload (no dedupe, no partition upkeep, no commit):
    the database's own ingest limit, for benchmarks and bulk loads."""
    async with conn.cursor() as cur, cur.copy(_copy_sql(table, columns, True)) as copy:
        await copy.write(payload)
