"""What a service that keeps state in the database does when it starts: check the schema (the owner
migrates it; a service's own login role only checks nothing is pending), then open its pool."""

from __future__ import annotations

from gpuaware.tsdb.pool import ConnectionPool, open_pool
from gpuaware.tsdb.roles import SchemaNotReadyError, migrate_or_check


async def open_service_pool(dsn: str, *, service: str, env: str, max_size: int, timeout: float) -> ConnectionPool:
    """Refuse to start without a database (naming the variable to set) or on a schema the owner has not
    migrated yet (naming what is pending; the owner's DSN migrates it here), open the service's pool and
    wait for a first connection."""
    if not dsn:
        raise SystemExit(f"{service} needs a database: set DATABASE_URL or {env}")
    try:
        await migrate_or_check(dsn)
    except SchemaNotReadyError as exc:
        raise SystemExit(f"{service}: {exc}") from None
    return await open_pool(dsn, application_name=service, min_size=1, max_size=max_size, timeout=timeout,
                           wait=True)
