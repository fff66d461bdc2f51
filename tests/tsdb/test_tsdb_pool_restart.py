"""Pools recover from a PostgreSQL restart: the next write after the server is back succeeds.

Runs against a server of its own (the session one must not be restarted under other tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from tsdb_helpers import at, sample

from gpuaware.devstack import PostgresProcess, start_postgres
from gpuaware.tsdb import (
    conninfo,
    is_transient,
    migrate,
    open_async_pool,
    open_pool,
    write_samples,
    write_samples_async,
)

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


@pytest.fixture(scope="module")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresProcess]:
    base: Path = tmp_path_factory.mktemp("tsdb-restart")
    base.chmod(0o755)
    proc = start_postgres(base / "pg")
    migrate(proc.url)
    yield proc
    proc.stop()


def _batch(start: str, n: int = 50, gpu: str = "GPU-r") -> list:
    return [sample(at(start) + timedelta(seconds=i), gpu=gpu, util_pct=float(i)) for i in range(n)]


def _count(url: str, gpu: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM gpu_samples WHERE gpu_uuid = %s", (gpu,)).fetchone()[0]


def test_conninfo_adds_defaults_but_keeps_what_the_dsn_says() -> None:
    info = conninfo("postgresql://u@h:5/db?application_name=mine", application_name="gpuaware-x", connect_timeout=3)
    assert "application_name=mine" in info and "connect_timeout=3" in info and "keepalives=1" in info


def test_sync_pool_survives_restart_and_outage_is_transient(own_postgres: PostgresProcess) -> None:
    pool = open_pool(own_postgres.url, application_name="gpuaware-test", min_size=1, max_size=2, wait=True,
                     timeout=10)
    try:
        with pool.connection() as conn:
            assert write_samples(conn, _batch("2025-03-01 10:00:00", gpu="GPU-sync")) == 50
            assert conn.execute("SELECT current_setting('application_name')").fetchone() == ("gpuaware-test",)

        server = own_postgres.restart()  # every pooled connection is now dead
        with pool.connection() as conn:  # the check replaces the dead one
            assert write_samples(conn, _batch("2025-03-01 10:01:00", gpu="GPU-sync")) == 50

        server.stop()
        # PoolTimeout or OperationalError depending on timing; whichever it is must read as transient
        with pytest.raises(Exception) as outage, pool.connection(timeout=2) as conn:
            write_samples(conn, _batch("2025-03-01 10:02:00", gpu="GPU-sync"))
        assert is_transient(outage.value), repr(outage.value)

        start_postgres(server.data_dir, port=server.port, database=server.database)
        with pool.connection(timeout=15) as conn:
            assert write_samples(conn, _batch("2025-03-01 10:02:00", gpu="GPU-sync")) == 50
    finally:
        pool.close()
    assert _count(own_postgres.url, "GPU-sync") == 150


async def test_async_pool_survives_restart(own_postgres: PostgresProcess) -> None:
    pool = await open_async_pool(own_postgres.url, min_size=1, max_size=2, wait=True, timeout=10)
    try:
        async with pool.connection() as conn:
            assert await write_samples_async(conn, _batch("2025-03-01 11:00:00", gpu="GPU-async")) == 50
        own_postgres.restart()
        async with pool.connection() as conn:
            assert await write_samples_async(conn, _batch("2025-03-01 11:01:00", gpu="GPU-async")) == 50
            # a redelivery after the restart is still a no-op
            assert await write_samples_async(conn, _batch("2025-03-01 11:00:00", gpu="GPU-async")) == 0
    finally:
        await pool.close()
    assert _count(own_postgres.url, "GPU-async") == 100


def test_permanent_errors_are_not_transient(own_postgres: PostgresProcess) -> None:
    with psycopg.connect(own_postgres.url) as conn:
        with pytest.raises(psycopg.Error) as missing:
            conn.execute("SELECT * FROM no_such_table")
        assert not is_transient(missing.value)
    assert not is_transient(ValueError("bad sample"))
