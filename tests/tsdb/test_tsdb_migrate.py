"""The migration runner: in order, once, verified by checksum, safe when services start together."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tsdb_helpers import fetch_all, fetch_one

from gpuaware.tsdb import (
    ChecksumMismatchError,
    Connection,
    MigrationError,
    applied_migrations,
    connect,
    load_migrations,
    migrate,
)
from gpuaware.tsdb.migrator import EARLIER_CHECKSUMS, default_source

ALL_VERSIONS = ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011", "0012",
                "0013", "0014", "0015", "0016"]


def _copy_migrations(dest: Path) -> Path:
    dest.mkdir()
    (dest / "fragments").mkdir()
    for folder, target in ((default_source(), dest), (default_source() / "fragments", dest / "fragments")):
        for entry in folder.iterdir():
            if entry.name.endswith(".sql"):
                (target / entry.name).write_text(entry.read_text())
    return dest


async def _object_counts(url: str) -> tuple[int, int, int]:
    async with await connect(url) as conn:
        row = await fetch_one(conn, """
            SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = 'public'),
                   (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                    WHERE n.nspname = 'public'),
                   (SELECT count(*) FROM schema_migrations)""")
    assert row is not None
    return row[0], row[1], row[2]


async def test_first_run_applies_everything_in_order_and_second_run_is_a_no_op(fresh_database_url: str) -> None:
    assert await applied_migrations(fresh_database_url) == []
    assert await migrate(fresh_database_url) == ALL_VERSIONS
    before = await _object_counts(fresh_database_url)
    assert await migrate(fresh_database_url) == []
    assert await _object_counts(fresh_database_url) == before
    assert before[2] == len(ALL_VERSIONS)
    assert await applied_migrations(fresh_database_url) == ALL_VERSIONS
    async with await connect(fresh_database_url) as conn:
        rows = await fetch_all(conn, "SELECT version, name, variant, length(checksum), applied_at IS NOT NULL "
                                     "FROM schema_migrations ORDER BY version")
    # no TimescaleDB in the embedded server: the files with backend sections ran their native rendering
    assert rows == [("0001", "roles", "common", 64, True), ("0002", "inventory", "common", 64, True),
                    ("0003", "samples", "native", 64, True), ("0004", "rollups", "native", 64, True),
                    ("0005", "bus_roundtrip", "common", 64, True),
                    ("0006", "samples_contract_columns", "common", 64, True),
                    ("0007", "pod_usage", "common", 64, True), ("0008", "window_rollups", "common", 64, True),
                    ("0009", "placement_events", "common", 64, True), ("0010", "health", "native", 64, True),
                    ("0011", "quota", "common", 64, True), ("0012", "forecast", "common", 64, True),
                    ("0013", "maintenance_lock", "native", 64, True), ("0014", "recorder", "common", 64, True),
                    ("0015", "service_logins", "common", 64, True), ("0016", "forecast_p10", "common", 64, True)]


async def test_an_edited_applied_migration_is_rejected_naming_the_file(fresh_database_url: str,
                                                                        tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    assert await migrate(fresh_database_url, source=source) == ALL_VERSIONS
    target = source / "0002_inventory.sql"
    target.write_text(target.read_text() + "\nCREATE INDEX gpu_inventory_model ON gpu_inventory (model);\n")
    with pytest.raises(ChecksumMismatchError, match=r"0002_inventory\.sql") as info:
        await migrate(fresh_database_url, source=source)
    assert info.value.filename == "0002_inventory.sql"
    # only line endings changed: the same migration, not an error
    target.write_text(default_source().joinpath("0002_inventory.sql").read_text().replace("\n", "\r\n"))
    assert await migrate(fresh_database_url, source=source) == []


async def test_a_fragment_is_part_of_the_checksum_of_the_files_that_include_it(fresh_database_url: str,
                                                                                tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    assert await migrate(fresh_database_url, source=source) == ALL_VERSIONS
    fragment = source / "fragments" / "rollup_aggregates.sql"
    fragment.write_text(fragment.read_text().replace("max(util_pct)", "min(util_pct)"))
    with pytest.raises(ChecksumMismatchError, match=r"0004_rollups\.sql"):
        await migrate(fresh_database_url, source=source)


@pytest.mark.parametrize("backend", ["native", "timescale"])
async def test_a_database_migrated_from_the_per_backend_files_stays_valid(migrated_url: str, backend: str) -> None:
    """Each backend once had a file of its own for the versions with sections; a database that recorded
    those files' checksums is still up to date, while any other checksum is an edit."""
    earlier = {version: checksum for (version, variant), checksum in EARLIER_CHECKSUMS.items() if variant == backend}
    assert sorted(earlier) == ["0003", "0004", "0010", "0013"]
    async with await connect(migrated_url, autocommit=True) as conn:
        for version, checksum in earlier.items():
            await conn.execute("UPDATE schema_migrations SET variant = %s, checksum = %s WHERE version = %s",
                               (backend, checksum, version))
    assert await migrate(migrated_url) == []
    async with await connect(migrated_url, autocommit=True) as conn:
        await conn.execute("UPDATE schema_migrations SET checksum = %s WHERE version = '0010'", ("0" * 64,))
    with pytest.raises(ChecksumMismatchError, match=r"0010_health\.sql"):
        await migrate(migrated_url)


async def test_a_new_migration_file_is_applied_on_the_next_run(fresh_database_url: str, tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    await migrate(fresh_database_url, source=source)
    (source / "0099_notes.sql").write_text("CREATE TABLE notes (id int PRIMARY KEY);")
    assert await migrate(fresh_database_url, source=source) == ["0099"]
    assert (await applied_migrations(fresh_database_url))[-1] == "0099"


async def test_a_failing_migration_names_its_file_and_leaves_nothing_half_applied(
        fresh_database_url: str, tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    (source / "0099_broken.sql").write_text("CREATE TABLE half (id int);\nSELECT no_such_function();\n")
    with pytest.raises(MigrationError, match=r"0099_broken\.sql.*no_such_function"):
        await migrate(fresh_database_url, source=source)
    assert await applied_migrations(fresh_database_url) == ALL_VERSIONS  # 0001-0016 committed one by one
    async with await connect(fresh_database_url) as conn:
        assert await fetch_one(conn, "SELECT to_regclass('half')") == (None,)


async def test_concurrent_runs_do_not_fail_and_apply_each_migration_once(fresh_database_url: str) -> None:
    runners = 6
    results = await asyncio.gather(*(migrate(fresh_database_url) for _ in range(runners)))
    # exactly one runner did the work, the others waited on the lock and found nothing to do
    assert sorted(results, key=len) == [[]] * (runners - 1) + [ALL_VERSIONS]
    assert await applied_migrations(fresh_database_url) == ALL_VERSIONS


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"0001_a.sql": "SELECT 1;", "0001_b.sql": "SELECT 1;"}, r"version 0001 is used by two files"),
        ({"1_a.sql": "SELECT 1;"}, r"1_a\.sql: migration files must be named"),
        ({"0002_b.timescale.sql": "SELECT 1;"}, r"0002_b\.timescale\.sql: migration files must be named"),
        ({"0001_a.sql": "--@ native\nSELECT 1;\n"}, r"0001_a\.sql: the '--@ native' section has no '--@ end'"),
        ({"0001_a.sql": "SELECT 1;\n--@ end\n"}, r"0001_a\.sql:2: '--@ end' where it opens or closes nothing"),
        ({"0001_a.sql": "--@ native\n--@ native\n--@ end\n"}, r"0001_a\.sql:2: '--@ native' where it opens"),
        ({"0001_a.sql": "SELECT\n    --@ include nothing_here\n;"}, r"0001_a\.sql:2: no fragment 'nothing_here'"),
    ],
)
def test_a_malformed_migration_folder_is_rejected(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(MigrationError, match=message):
        load_migrations("native", tmp_path)


def test_each_backend_renders_its_sections_and_the_shared_lines(tmp_path: Path) -> None:
    (tmp_path / "fragments").mkdir()
    (tmp_path / "fragments" / "cols.sql").write_text("a int,\n\nb int\n")
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (\n    --@ include cols\n--@ native\n) PARTITION BY RANGE (a);\n"
                                         "--@ timescale\n);\nSELECT create_hypertable('t', 'a');\n--@ end\n")
    (tmp_path / "0002_plain.sql").write_text("SELECT 1;\n")
    native, timescale = load_migrations("native", tmp_path), load_migrations("timescale", tmp_path)
    assert native[0].sql == "CREATE TABLE t (\n    a int,\n\n    b int\n) PARTITION BY RANGE (a);\n"
    assert timescale[0].sql == "CREATE TABLE t (\n    a int,\n\n    b int\n);\nSELECT create_hypertable('t', 'a');\n"
    assert [(m.variant, m.filename) for m in native] == [("native", "0001_t.sql"), ("common", "0002_plain.sql")]
    assert [m.variant for m in timescale] == ["timescale", "common"]
    assert native[1] == timescale[1]  # a file without sections is the same migration on both


async def test_a_pending_version_older_than_an_applied_one_is_an_error(migrated_url: str) -> None:
    async with await connect(migrated_url, autocommit=True) as conn:
        await conn.execute("DELETE FROM schema_migrations WHERE version = '0004'")
    with pytest.raises(MigrationError, match=r"0004_rollups\.sql: not applied, but the later 0016"):
        await migrate(migrated_url)


def test_migrations_ship_inside_the_package() -> None:
    # importlib.resources finds them and their fragments, so they are in the wheel (hatch packages src/gpuaware)
    names = {m.filename for m in load_migrations("native")}
    assert "0003_samples.sql" in names and (default_source() / "fragments" / "rollup_aggregates.sql").is_file()


async def _can(conn: Connection, role: str, table: str, privilege: str) -> bool:
    row = await fetch_one(conn, "SELECT has_table_privilege(%s, %s, %s)", (role, table, privilege))
    return bool(row and row[0])


async def test_group_roles_are_nologin_and_least_privilege(conn: Connection) -> None:
    roles = dict(await fetch_all(conn, "SELECT rolname, rolcanlogin FROM pg_roles "
                                       "WHERE rolname IN ('gpuaware_reader', 'gpuaware_collector')"))
    assert roles == {"gpuaware_reader": False, "gpuaware_collector": False}
    priv = {
        (role, table, p): await _can(conn, role, table, p)
        for role in ("gpuaware_reader", "gpuaware_collector")
        for table in ("gpu_samples", "gpu_metrics_1m", "gpu_inventory")
        for p in ("SELECT", "INSERT", "DELETE")
    }
    assert priv[("gpuaware_reader", "gpu_samples", "SELECT")] and priv[("gpuaware_reader", "gpu_metrics_1m", "SELECT")]
    assert not any(priv[("gpuaware_reader", t, p)] for t in ("gpu_samples", "gpu_inventory") for p in ("INSERT", "DELETE"))
    assert priv[("gpuaware_collector", "gpu_samples", "INSERT")]
    assert not priv[("gpuaware_collector", "gpu_samples", "DELETE")]
    assert not priv[("gpuaware_collector", "gpu_metrics_1m", "INSERT")]  # rollups change only via the refresh function


async def test_the_health_role_writes_only_health_scorings_tables(conn: Connection) -> None:
    assert await fetch_one(conn, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'gpuaware_health'") == (False,)
    for table in ("health_scores", "health_gpu_state", "health_alerts", "health_overrides"):
        assert await _can(conn, "gpuaware_health", table, "INSERT") and await _can(conn, "gpuaware_reader", table,
                                                                                 "SELECT")
        assert not await _can(conn, "gpuaware_health", table, "DELETE")
        assert not await _can(conn, "gpuaware_reader", table, "INSERT")
        assert not await _can(conn, "gpuaware_collector", table, "INSERT")
    assert not await _can(conn, "gpuaware_health", "health_overrides", "UPDATE")  # the audit is append-only
    for table in ("gpu_samples", "gpu_inventory", "placement_events"):
        assert not await _can(conn, "gpuaware_health", table, "INSERT")
        assert not await _can(conn, "gpuaware_health", table, "SELECT")
    assert await fetch_one(conn, "SELECT has_function_privilege('gpuaware_health', "
                                 "'gpuaware_expire_health(timestamptz)', 'EXECUTE')") == (True,)


# which role may change which table: anything else writable by a service's role is a finding
WRITERS = {
    "gpuaware_collector": {"bus_roundtrip", "gpu_inventory", "gpu_pod_usage", "gpu_samples"},
    "gpuaware_forecasting": {"forecast_points"},  # reads forecast_models; publishing a model is the owner's act
    "gpuaware_health": {"health_alerts", "health_gpu_state", "health_overrides", "health_scores"},
    "gpuaware_quota": {"quota_intervals", "quota_usage"},
    "gpuaware_reader": set(),
    "gpuaware_recorder": {"placement_events"},  # INSERT only: it never reads, updates or deletes a row
}


async def test_each_service_role_can_change_only_its_own_tables(conn: Connection) -> None:
    # least privilege, as a matrix over every table and every role (the collector cannot write quota
    # tables, quota cannot touch telemetry, nobody but the owner writes health's audit); a new role or
    # table must be placed here on purpose
    roles = {r for (r,) in await fetch_all(conn, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'gpuaware\\_%' "
                                                 "AND NOT rolcanlogin")}
    tables = [t for (t,) in await fetch_all(conn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                                  "AND tablename <> 'schema_migrations'")]
    writable = {role: {t for t in tables
                       if any([await _can(conn, role, t, p) for p in ("INSERT", "UPDATE", "DELETE", "TRUNCATE")])}
                for role in roles}
    assert set(WRITERS) == roles
    assert writable == WRITERS


async def test_a_service_pool_needs_a_database_and_migrates_it(fresh_database_url: str) -> None:
    from gpuaware.tsdb import open_service_pool

    with pytest.raises(SystemExit, match="quota needs a database: set DATABASE_URL or GPUAWARE_QUOTA_DATABASE_URL"):
        await open_service_pool("", service="quota", env="GPUAWARE_QUOTA_DATABASE_URL", max_size=1, timeout=5)
    pool = await open_service_pool(fresh_database_url, service="quota", env="X", max_size=1, timeout=5)
    try:
        async with pool.connection() as conn:
            assert await fetch_one(conn, "SELECT to_regclass('quota_intervals') IS NOT NULL") == (True,)
    finally:
        await pool.close()
