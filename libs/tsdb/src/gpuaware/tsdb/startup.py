"""What a service that owns tables does when it starts: migrate, then open its pool."""

from __future__ import annotations

from gpuaware.tsdb.migrator import migrate
from gpuaware.tsdb.pool import ConnectionPool, open_pool


async def open_service_pool(dsn: str, *, service: str, env: str, max_size: int, timeout: float) -> ConnectionPool:
    """Refuse to start without a database (naming the variable to set), apply the migrations, open the
    service's pool and wait for a first connection."""
    if not dsn:
        raise SystemExit(f"{service} needs a database: set DATABASE_URL or {env}")
    await migrate(dsn)
    return await open_pool(dsn, application_name=service, min_size=1, max_size=max_size, timeout=timeout,
                           wait=True)
