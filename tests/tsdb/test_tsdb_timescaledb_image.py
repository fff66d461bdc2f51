"""On a Docker host, the TimescaleDB variant runs against the real extension (skipped elsewhere)."""

from datetime import UTC, datetime, timedelta

from tsdb_helpers import fetch_all

from gpuaware.tsdb import (
    Sample,
    applied_migrations,
    connect,
    migrate,
    refresh_rollups,
    rollup_range,
    write_samples,
)


async def test_timescaledb_hypertable_and_same_views(timescaledb_url: str) -> None:
    applied = await migrate(timescaledb_url)
    assert applied == await applied_migrations(timescaledb_url)
    async with await connect(timescaledb_url) as conn:
        hypertables = {r[0] for r in await fetch_all(
            conn, "SELECT hypertable_name FROM timescaledb_information.hypertables")}
        assert "gpu_samples" in hypertables
        start = datetime(2026, 1, 1, tzinfo=UTC)
        rows = [Sample(ts=start + timedelta(seconds=i), node="n1", gpu_uuid="GPU-1", util_pct=float(i))
                for i in range(60)]
        assert await write_samples(conn, rows) == 60
        await conn.commit()
    async with await connect(timescaledb_url, autocommit=True) as conn:
        await refresh_rollups(conn, start - timedelta(minutes=1), start + timedelta(minutes=2))
        (minute,) = await rollup_range(conn, "1m", start, start + timedelta(minutes=1))
        # util 0..59 in one minute bucket: mean 29.5, max 59
        assert minute.samples == 60 and minute.util_avg == 29.5 and minute.util_max == 59
