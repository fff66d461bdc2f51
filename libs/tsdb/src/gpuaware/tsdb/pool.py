"""Connections to PostgreSQL/TimescaleDB from a DSN: one-off connections and checked pools.

Why pools with a check: services live for weeks while PostgreSQL restarts, fails over or drops idle
connections. psycopg_pool's `check_connection` tests each connection as it is handed out and
replaces a dead one, so the first write after a server restart succeeds instead of failing on a
stale socket. Every connection carries an `application_name` (visible in pg_stat_activity), a
connect timeout (a dead server fails fast instead of hanging) and TCP keepalives (a vanished peer is
noticed). Values already present in the DSN win over these defaults.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

DEFAULT_APPLICATION_NAME = "gpuaware"
DEFAULT_CONNECT_TIMEOUT_S = 5
DEFAULT_MIN_SIZE = 1
DEFAULT_MAX_SIZE = 8

_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10", "keepalives_count": "3"}

Connection: TypeAlias = psycopg.AsyncConnection[Any]
"""What every call of this package takes: an asyncio connection, from `connect` or a pool."""
ConnectionPool: TypeAlias = AsyncConnectionPool[Connection]
"""What `open_pool` returns; use as `async with pool.connection() as conn:`."""


def conninfo(dsn: str, *, application_name: str = DEFAULT_APPLICATION_NAME,
             connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_S) -> str:
    """`dsn` (URL or key=value) with our defaults added for every parameter it does not set."""
    given = conninfo_to_dict(dsn)
    defaults = {"application_name": application_name, "connect_timeout": str(int(connect_timeout)), **_KEEPALIVES}
    extra = {k: v for k, v in defaults.items() if k not in given}
    return make_conninfo(dsn, **extra)


async def connect(dsn: str, *, application_name: str = DEFAULT_APPLICATION_NAME,
                  connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_S, autocommit: bool = False) -> Connection:
    """One unpooled connection with the same defaults (migrations, scripts, tests);
    use as `async with await connect(dsn) as conn:`."""
    return await psycopg.AsyncConnection.connect(
        conninfo(dsn, application_name=application_name, connect_timeout=connect_timeout), autocommit=autocommit)


async def open_pool(dsn: str, *, application_name: str = DEFAULT_APPLICATION_NAME,
                    min_size: int = DEFAULT_MIN_SIZE, max_size: int = DEFAULT_MAX_SIZE,
                    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_S, timeout: float = 10.0,
                    max_idle: float = 300.0, max_lifetime: float = 3600.0, reconnect_timeout: float = 300.0,
                    wait: bool = False, name: str | None = None) -> ConnectionPool:
    """Open a checked pool; use as `async with pool.connection() as conn:`.

    `timeout` bounds how long `pool.connection()` waits for a connection (PoolTimeout, transient).
    `wait=True` blocks until `min_size` connections exist and raises if the server is unreachable;
    the default lets a service start while the database is still coming up.
    """
    pool: ConnectionPool = AsyncConnectionPool(
        conninfo(dsn, application_name=application_name, connect_timeout=connect_timeout),
        min_size=min_size, max_size=max_size, timeout=timeout, max_idle=max_idle, max_lifetime=max_lifetime,
        reconnect_timeout=reconnect_timeout, check=AsyncConnectionPool.check_connection,
        name=name or application_name, open=False,
    )
    await pool.open(wait=wait, timeout=timeout)
    return pool
