"""On a Docker host, the TimescaleDB variant runs against the real extension (skipped elsewhere)."""

from datetime import UTC, datetime, timedelta

import psycopg

from gpuaware.tsdb import applied_migrations, migrate, refresh_rollups, rollup_range, write_samples
from gpuaware.tsdb.rows import Sample


def test_timescaledb_hypertable_and_same_views(timescaledb_url: str) -> None:
    applied = migrate(timescaledb_url)
    assert applied == applied_migrations(timescaledb_url)
    with psycopg.connect(timescaledb_url) as conn:
        hypertables = {r[0] for r in conn.execute("SELECT hypertable_name FROM timescaledb_information.hypertables")}
        assert "gpu_samples" in hypertables
        start = datetime(2026, 1, 1, tzinfo=UTC)
        rows = [Sample(ts=start + timedelta(seconds=i), node="n1", gpu_uuid="GPU-1", util_pct=float(i)) for i in range(60)]
        assert write_samples(conn, rows) == 60
        conn.commit()
    with psycopg.connect(timescaledb_url, autocommit=True) as conn:
        refresh_rollups(conn, start - timedelta(minutes=1), start + timedelta(minutes=2))
        (minute,) = rollup_range(conn, "1m", start, start + timedelta(minutes=1))
        # util 0..59 in one minute bucket: mean 29.5, max 59
        assert minute.samples == 60 and minute.util_avg == 29.5 and minute.util_max == 59
