"""Pools recover from a PostgreSQL restart: the next write after the server is back succeeds.

Runs against a server of its own (the session one must not be restarted under other tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from tsdb_helpers import at, fetch_one, sample

from gpuaware.devstack import PostgresProcess, start_postgres
from gpuaware.tsdb import Sample, connect, conninfo, is_transient, migrate, open_pool, write_samples

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


@pytest.fixture(scope="module")
async def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PostgresProcess]:
    base: Path = tmp_path_factory.mktemp("tsdb-restart")
    base.chmod(0o755)
    proc = start_postgres(base / "pg")
    await migrate(proc.url)
    yield proc
    proc.stop()


def _batch(start: str, n: int = 50, gpu: str = "GPU-r") -> list[Sample]:
    return [sample(at(start) + timedelta(seconds=i), gpu=gpu, util_pct=float(i)) for i in range(n)]


async def _count(url: str, gpu: str) -> int:
    async with await connect(url) as conn:
        row = await fetch_one(conn, "SELECT count(*) FROM gpu_samples WHERE gpu_uuid = %s", (gpu,))
    assert row is not None
    return int(row[0])


def test_conninfo_adds_defaults_but_keeps_what_the_dsn_says() -> None:
    info = conninfo("postgresql://u@h:5/db?application_name=mine", application_name="gpuaware-x", connect_timeout=3)
    assert "application_name=mine" in info and "connect_timeout=3" in info and "keepalives=1" in info


async def test_pool_survives_restart_and_outage_is_transient(own_postgres: PostgresProcess) -> None:
    pool = await open_pool(own_postgres.url, application_name="gpuaware-test", min_size=1, max_size=2, wait=True,
                           timeout=10)
    try:
        async with pool.connection() as conn:
            assert await write_samples(conn, _batch("2025-03-01 10:00:00")) == 50
            assert await fetch_one(conn, "SELECT current_setting('application_name')") == ("gpuaware-test",)

        server = own_postgres.restart()  # every pooled connection is now dead
        async with pool.connection() as conn:  # the check replaces the dead one
            assert await write_samples(conn, _batch("2025-03-01 10:01:00")) == 50
            # a redelivery after the restart is still a no-op
            assert await write_samples(conn, _batch("2025-03-01 10:00:00")) == 0

        server.stop()
        # PoolTimeout or OperationalError depending on timing; whichever it is must read as transient
        with pytest.raises(Exception) as outage:
            async with pool.connection(timeout=2) as conn:
                await write_samples(conn, _batch("2025-03-01 10:02:00"))
        assert is_transient(outage.value), repr(outage.value)

        start_postgres(server.data_dir, port=server.port, database=server.database)
        async with pool.connection(timeout=15) as conn:
            assert await write_samples(conn, _batch("2025-03-01 10:02:00")) == 50
    finally:
        await pool.close()
    assert await _count(own_postgres.url, "GPU-r") == 150


async def test_permanent_errors_are_not_transient(own_postgres: PostgresProcess) -> None:
    async with await connect(own_postgres.url) as conn:
        with pytest.raises(psycopg.Error) as missing:
            await conn.execute("SELECT * FROM no_such_table")
    assert not is_transient(missing.value)
    assert not is_transient(ValueError("bad sample"))
