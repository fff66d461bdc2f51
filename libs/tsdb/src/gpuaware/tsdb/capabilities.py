"""Which storage backend a database gets: TimescaleDB where the extension can be used, native
PostgreSQL partitioning otherwise.

The choice is made once, when the first capability-dependent migration is applied, and recorded in
`schema_migrations.variant`; from then on the recorded backend wins. Installing TimescaleDB later
does not silently switch a native database (that needs a data migration, not a restart).
"""

from __future__ import annotations

from typing import Literal, cast

from gpuaware.tsdb.pool import Connection

Backend = Literal["timescale", "native"]
Requested = Literal["auto", "timescale", "native"]
BACKENDS: tuple[Backend, ...] = ("timescale", "native")


async def timescaledb_available(conn: Connection) -> bool:
    """True when TimescaleDB is installed in this database, or can be: it is listed in
    pg_available_extensions AND preloaded (CREATE EXTENSION fails without shared_preload_libraries)."""
    cur = await conn.execute(
        """
        SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'timescaledb'),
               EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'timescaledb'),
               current_setting('shared_preload_libraries')
        """
    )
    row = await cur.fetchone()
    assert row is not None
    installed, listed, preload = row
    preloaded = "timescaledb" in [p.strip().strip('"') for p in (preload or "").split(",")]
    return bool(installed or (listed and preloaded))


async def installed_backend(conn: Connection) -> Backend | None:
    """The backend recorded by the migrations, or None before any backend-specific one ran."""
    if not await migrations_table_exists(conn):
        return None
    cur = await conn.execute(
        "SELECT variant FROM schema_migrations WHERE variant <> 'common' ORDER BY version LIMIT 1")
    found = await cur.fetchone()
    return cast(Backend, found[0]) if found else None


async def migrations_table_exists(conn: Connection) -> bool:
    """False for a database that was never migrated."""
    cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
    row = await cur.fetchone()
    return bool(row and row[0])


def choose_backend(requested: Requested, *, available: bool, recorded: Backend | None) -> Backend:
    """Pure decision: a recorded backend always wins; `auto` picks TimescaleDB when available.

    An explicit request that contradicts the recorded backend is an error (switching needs a data
    migration). An explicit `timescale` is trusted without checking availability: CREATE EXTENSION
    then fails with PostgreSQL's own explanation.
    """
    if requested not in ("auto", *BACKENDS):
        raise ValueError(f"backend must be 'auto', 'timescale' or 'native', not {requested!r}")
    if recorded is not None:
        if requested != "auto" and requested != recorded:
            raise ValueError(
                f"this database was migrated with the {recorded!r} backend; {requested!r} was requested. "
                "Switching backends needs a data migration; pass backend='auto' to keep the current one"
            )
        return recorded
    if requested != "auto":
        return requested
    return "timescale" if available else "native"
