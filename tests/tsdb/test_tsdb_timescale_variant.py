"""The TimescaleDB path without the extension: which files and statements would run, and a dialect
check of those files against real PostgreSQL with TimescaleDB's functions stubbed.

The embedded server has no TimescaleDB, so the real extension is never exercised here. What is
checked: the backend choice, the variant files picked, the policy/aggregate statements they hold,
the refresh SQL, and that with the extension's functions replaced by stubs of the same names and
named parameters, the files run and leave the same tables, columns, types and functions as native.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tsdb_helpers import at, columns, fetch_all

from gpuaware.devstack import PostgresProcess
from gpuaware.tsdb import (
    ROLLUP_VIEWS,
    Connection,
    TsdbError,
    choose_backend,
    connect,
    installed_backend,
    load_migrations,
    migrate,
    pending_migrations,
    refresh_rollups,
    refresh_statements,
)
from gpuaware.tsdb import migrator as migrate_module
from gpuaware.tsdb.migrator import default_source

FUNCTIONS_SQL = """
SELECT p.oid::regprocedure::text, pg_get_function_result(p.oid), p.prosecdef,
       has_function_privilege('gpuaware_collector', p.oid, 'EXECUTE'),
       has_function_privilege('public', p.oid, 'EXECUTE')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.proname LIKE 'gpuaware\\_%%' AND p.proname <> 'gpuaware_rollup'
ORDER BY 1
"""


@pytest.mark.parametrize(
    ("requested", "available", "recorded", "expected"),
    [
        ("auto", True, None, "timescale"),  # fresh database, extension usable
        ("auto", False, None, "native"),
        ("auto", True, "native", "native"),  # installed later: a native database stays native
        ("auto", False, "timescale", "timescale"),
        ("timescale", False, None, "timescale"),  # explicit: trusted, CREATE EXTENSION will explain
        ("native", True, None, "native"),
    ],
)
def test_backend_choice(requested, available, recorded, expected) -> None:
    assert choose_backend(requested, available=available, recorded=recorded) == expected


def test_an_explicit_backend_cannot_switch_a_migrated_database() -> None:
    with pytest.raises(ValueError, match="migrated with the 'native' backend"):
        choose_backend("timescale", available=True, recorded="native")


def test_timescale_plan_runs_the_extension_statements_and_no_native_ones() -> None:
    plan = load_migrations("timescale")
    assert [m.version for m in plan if m.variant == "timescale"] == ["0003", "0004", "0010", "0013"]
    assert {m.variant for m in plan} == {"common", "timescale"}
    text = "\n".join(m.sql for m in plan)
    for statement in [
        "CREATE EXTENSION IF NOT EXISTS timescaledb;",
        "SELECT create_hypertable('gpu_samples', 'ts', chunk_time_interval => INTERVAL '1 day'",
        "timescaledb.compress_segmentby = 'gpu_uuid'",
        "SELECT add_compression_policy('gpu_samples', compress_after => INTERVAL '7 days'",
        "SELECT add_retention_policy('gpu_samples', drop_after => INTERVAL '30 days'",
        "CREATE MATERIALIZED VIEW gpu_metrics_1m\nWITH (timescaledb.continuous, timescaledb.materialized_only = false)",
        "CREATE MATERIALIZED VIEW gpu_metrics_1h\nWITH (timescaledb.continuous, timescaledb.materialized_only = false)",
        "SELECT add_continuous_aggregate_policy('gpu_metrics_1m'",
        "SELECT add_continuous_aggregate_policy('gpu_metrics_1h'",
        "SELECT add_retention_policy('gpu_metrics_1m', drop_after => INTERVAL '90 days'",
        "SELECT add_retention_policy('gpu_metrics_1h', drop_after => INTERVAL '730 days'",
        "SELECT create_hypertable('health_scores', 'ts', chunk_time_interval => INTERVAL '1 day'",
        "SELECT add_retention_policy('health_scores', drop_after => INTERVAL '90 days'",
    ]:
        assert statement in text, statement
    timescale_code = re.sub(r"--[^\n]*", "", text)
    for native_only in ("PARTITION BY RANGE", "PARTITION OF", "date_bin", "CREATE TABLE gpu_metrics_1m"):
        assert native_only not in timescale_code, native_only
    native_code = re.sub(r"--[^\n]*", "", "\n".join(m.sql for m in load_migrations("native")))
    assert "timescaledb" not in native_code.lower() and "time_bucket" not in native_code


def test_retention_constants_match_the_timescale_policies() -> None:
    from gpuaware.tsdb import HEALTH_RETENTION, RAW_RETENTION, ROLLUP_1H_RETENTION, ROLLUP_1M_RETENTION

    text = "\n".join(m.sql for m in load_migrations("timescale"))
    assert f"'gpu_samples', drop_after => INTERVAL '{RAW_RETENTION.days} days'" in text
    assert f"'gpu_metrics_1m', drop_after => INTERVAL '{ROLLUP_1M_RETENTION.days} days'" in text
    assert f"'gpu_metrics_1h', drop_after => INTERVAL '{ROLLUP_1H_RETENTION.days} days'" in text
    assert f"'health_scores', drop_after => INTERVAL '{HEALTH_RETENTION.days} days'" in text


@pytest.mark.parametrize(("available", "backend"), [(True, "timescale"), (False, "native")])
async def test_detected_extension_selects_the_rendering(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch,
                                                        available: bool, backend: str) -> None:
    async def timescaledb_available(conn: Connection) -> bool:
        return available

    monkeypatch.setattr(migrate_module, "timescaledb_available", timescaledb_available)
    pending = await pending_migrations(fresh_database_url)
    assert [(m.filename, m.variant) for m in pending][2:4] == [("0003_samples.sql", backend),
                                                               ("0004_rollups.sql", backend)]
    assert pending == load_migrations(backend)


def test_refresh_statements_per_backend() -> None:
    since, until = at("2025-03-01 10:00:30"), at("2025-03-01 12:00:00")
    # TimescaleDB: windows widened to whole buckets, 1m [10:00, 12:00) and 1h [10:00, 12:00)
    assert refresh_statements("timescale", since, until) == [
        "CALL refresh_continuous_aggregate('gpu_metrics_1m', TIMESTAMPTZ '2025-03-01T10:00:00+00:00', "
        "TIMESTAMPTZ '2025-03-01T12:00:00+00:00')",
        "CALL refresh_continuous_aggregate('gpu_metrics_1h', TIMESTAMPTZ '2025-03-01T10:00:00+00:00', "
        "TIMESTAMPTZ '2025-03-01T12:00:00+00:00')",
    ]
    # open end, and an end inside a bucket rounds up to that bucket's end (12:00:01 -> 12:01 / 13:00)
    assert refresh_statements("timescale", since) [0].endswith(", NULL::timestamptz)")
    assert "TIMESTAMPTZ '2025-03-01T13:00:00+00:00'" in refresh_statements(
        "timescale", since, at("2025-03-01 12:00:01"))[1]
    assert refresh_statements("native", since, until) == [
        "SELECT gpuaware_refresh_rollups(TIMESTAMPTZ '2025-03-01T10:00:30+00:00', "
        "TIMESTAMPTZ '2025-03-01T12:00:00+00:00')"]


# Stubs with TimescaleDB's names and named parameters; each logs its call. The refresh procedure
# COMMITs like the real one, so calling it inside a transaction block fails the same way.
STUBS = """
CREATE TABLE timescale_calls (seq serial, fn text, arg text);
CREATE FUNCTION create_hypertable(relation regclass, time_column_name name,
        chunk_time_interval interval DEFAULT NULL, if_not_exists boolean DEFAULT false) RETURNS void
    LANGUAGE sql AS $$ INSERT INTO timescale_calls (fn, arg) VALUES ('create_hypertable', relation::text) $$;
CREATE FUNCTION add_compression_policy(hypertable regclass, compress_after interval DEFAULT NULL,
        if_not_exists boolean DEFAULT false) RETURNS integer
    LANGUAGE sql AS $$ INSERT INTO timescale_calls (fn, arg) VALUES ('add_compression_policy', hypertable::text)
                       RETURNING 1 $$;
CREATE FUNCTION add_retention_policy(relation regclass, drop_after interval DEFAULT NULL,
        if_not_exists boolean DEFAULT false) RETURNS integer
    LANGUAGE sql AS $$ INSERT INTO timescale_calls (fn, arg) VALUES ('add_retention_policy', relation::text)
                       RETURNING 1 $$;
CREATE FUNCTION add_continuous_aggregate_policy(continuous_aggregate regclass, start_offset interval,
        end_offset interval, schedule_interval interval, if_not_exists boolean DEFAULT false) RETURNS integer
    LANGUAGE sql AS $$ INSERT INTO timescale_calls (fn, arg)
                       VALUES ('add_continuous_aggregate_policy', continuous_aggregate::text) RETURNING 1 $$;
CREATE FUNCTION time_bucket(bucket_width interval, ts timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE AS $$ SELECT date_bin(bucket_width, ts, TIMESTAMPTZ '2000-01-03 00:00:00+00') $$;
CREATE PROCEDURE refresh_continuous_aggregate(continuous_aggregate regclass, window_start timestamptz,
        window_end timestamptz)
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO timescale_calls (fn, arg)
        VALUES ('refresh', concat_ws(' ', continuous_aggregate, window_start, coalesce(window_end::text, 'NULL')));
        COMMIT;
    END $$;
"""


def _strip_extension_syntax(sql: str) -> str:
    """Remove the only statements plain PostgreSQL cannot parse: the extension itself and its WITH options."""
    sql = sql.replace("CREATE EXTENSION IF NOT EXISTS timescaledb;", "")
    sql = re.sub(r"ALTER TABLE gpu_samples SET \(\s*timescaledb\..*?\);", "", sql, flags=re.S)
    return re.sub(r"WITH \(timescaledb\.continuous[^)]*\)", "", sql)


@pytest.fixture
async def stubbed_timescale_url(postgres_server: PostgresProcess, tmp_path: Path) -> AsyncIterator[str]:
    """A database of its own (a test may also take the native `migrated_url`), migrated via the stubs."""
    name = f"t_ts_{uuid.uuid4().hex[:12]}"
    async with await connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}"
    source = tmp_path / "migrations"
    (source / "fragments").mkdir(parents=True)
    for folder, target in ((default_source(), source), (default_source() / "fragments", source / "fragments")):
        for entry in folder.iterdir():
            if entry.name.endswith(".sql"):
                (target / entry.name).write_text(_strip_extension_syntax(entry.read_text()))
    async with await connect(url, autocommit=True) as conn:
        await conn.execute(STUBS)
    assert await migrate(url, backend="timescale", source=source) == ["0001", "0002", "0003", "0004", "0005",
                                                                      "0006", "0007", "0008", "0009", "0010",
                                                                      "0011", "0012", "0013", "0014", "0015",
                                                                      "0016"]
    yield url
    async with await connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_timescale_files_leave_the_same_shape_as_native(stubbed_timescale_url: str, migrated_url: str) -> None:
    async with await connect(stubbed_timescale_url) as ts, await connect(migrated_url) as native:
        assert await installed_backend(ts) == "timescale" and await installed_backend(native) == "native"
        for relation in ("gpu_samples", "gpu_inventory", "bus_roundtrip", "gpu_pod_usage", "pod_usage_1h",
                         "tenant_usage_1h", "tenant_usage_1d", *ROLLUP_VIEWS.values(), "health_scores",
                         "health_gpu_state", "health_alerts", "health_overrides"):
            assert await columns(ts, relation) == await columns(native, relation), relation
        # same maintenance functions, same signatures and results, on either backend
        assert await fetch_all(ts, FUNCTIONS_SQL) == await fetch_all(native, FUNCTIONS_SQL)
        # rollups are materialized views (continuous aggregates) here, tables natively
        kinds = "SELECT relname::text, relkind::text FROM pg_class WHERE relname LIKE 'gpu\\_metrics\\_1_' ORDER BY 1"
        assert await fetch_all(ts, kinds) == [("gpu_metrics_1h", "m"), ("gpu_metrics_1m", "m")]
        assert await fetch_all(native, kinds) == [("gpu_metrics_1h", "r"), ("gpu_metrics_1m", "r")]
        calls = await fetch_all(ts, "SELECT fn, arg FROM timescale_calls ORDER BY seq")
    assert calls == [
        ("create_hypertable", "gpu_samples"),
        ("add_compression_policy", "gpu_samples"),
        ("add_retention_policy", "gpu_samples"),
        ("add_continuous_aggregate_policy", "gpu_metrics_1m"),
        ("add_continuous_aggregate_policy", "gpu_metrics_1h"),
        ("add_retention_policy", "gpu_metrics_1m"),
        ("add_retention_policy", "gpu_metrics_1h"),
        ("create_hypertable", "health_scores"),
        ("add_retention_policy", "health_scores"),
    ]


async def test_refresh_on_timescale_calls_the_procedure_outside_a_transaction(stubbed_timescale_url: str) -> None:
    async with await connect(stubbed_timescale_url) as conn:  # not autocommit: refresh must step outside
        assert await refresh_rollups(conn, at("2025-03-01 10:00:30")) is None
        assert not conn.autocommit
        calls = await fetch_all(conn, "SELECT arg FROM timescale_calls WHERE fn = 'refresh' ORDER BY seq")
        assert calls == [("gpu_metrics_1m 2025-03-01 10:00:00+00 NULL",),
                         ("gpu_metrics_1h 2025-03-01 10:00:00+00 NULL",)]
        await conn.rollback()
        with pytest.raises(TsdbError, match="outside a transaction"):
            async with conn.transaction():
                await refresh_rollups(conn, at("2025-03-01 10:00:30"))
