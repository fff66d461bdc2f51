"""The migration runner: in order, once, verified by checksum, safe when services start together."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from gpuaware.tsdb import ChecksumMismatchError, MigrationError, applied_migrations, load_migrations, migrate
from gpuaware.tsdb.migrator import default_source, load_catalog

ALL_VERSIONS = ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011", "0012",
                "0013"]


def _copy_migrations(dest: Path) -> Path:
    dest.mkdir()
    for entry in default_source().iterdir():
        if entry.name.endswith(".sql"):
            (dest / entry.name).write_text(entry.read_text())
    return dest


def _object_counts(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            """SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                       WHERE n.nspname = 'public'),
                      (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                       WHERE n.nspname = 'public'),
                      (SELECT count(*) FROM schema_migrations)""").fetchone()
    assert row is not None
    return row


def test_first_run_applies_everything_in_order_and_second_run_is_a_no_op(fresh_database_url: str) -> None:
    assert applied_migrations(fresh_database_url) == []
    assert migrate(fresh_database_url) == ALL_VERSIONS
    before = _object_counts(fresh_database_url)
    assert migrate(fresh_database_url) == []
    assert _object_counts(fresh_database_url) == before
    assert before[2] == len(ALL_VERSIONS)
    assert applied_migrations(fresh_database_url) == ALL_VERSIONS
    with psycopg.connect(fresh_database_url) as conn:
        rows = conn.execute("SELECT version, name, variant, length(checksum), applied_at IS NOT NULL "
                            "FROM schema_migrations ORDER BY version").fetchall()
    # no TimescaleDB in the embedded server: the backend-specific versions ran their native variant
    assert rows == [("0001", "roles", "common", 64, True), ("0002", "inventory", "common", 64, True),
                    ("0003", "samples", "native", 64, True), ("0004", "rollups", "native", 64, True),
                    ("0005", "bus_roundtrip", "common", 64, True),
                    ("0006", "samples_contract_columns", "common", 64, True),
                    ("0007", "pod_usage", "common", 64, True), ("0008", "window_rollups", "common", 64, True),
                    ("0009", "placement_events", "common", 64, True), ("0010", "health", "native", 64, True),
                    ("0011", "quota", "common", 64, True), ("0012", "forecast", "common", 64, True),
                    ("0013", "maintenance_lock", "native", 64, True)]


def test_an_edited_applied_migration_is_rejected_naming_the_file(fresh_database_url: str, tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    assert migrate(fresh_database_url, source=source) == ALL_VERSIONS
    target = source / "0002_inventory.sql"
    target.write_text(target.read_text() + "\nCREATE INDEX gpu_inventory_model ON gpu_inventory (model);\n")
    with pytest.raises(ChecksumMismatchError, match=r"0002_inventory\.sql") as info:
        migrate(fresh_database_url, source=source)
    assert info.value.filename == "0002_inventory.sql"
    # only line endings changed: the same migration, not an error
    target.write_text(default_source().joinpath("0002_inventory.sql").read_text().replace("\n", "\r\n"))
    assert migrate(fresh_database_url, source=source) == []


def test_a_new_migration_file_is_applied_on_the_next_run(fresh_database_url: str, tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    migrate(fresh_database_url, source=source)
    (source / "0099_notes.sql").write_text("CREATE TABLE notes (id int PRIMARY KEY);")
    assert migrate(fresh_database_url, source=source) == ["0099"]
    assert applied_migrations(fresh_database_url)[-1] == "0099"


def test_a_failing_migration_names_its_file_and_leaves_nothing_half_applied(
        fresh_database_url: str, tmp_path: Path) -> None:
    source = _copy_migrations(tmp_path / "migrations")
    (source / "0099_broken.sql").write_text("CREATE TABLE half (id int);\nSELECT no_such_function();\n")
    with pytest.raises(MigrationError, match=r"0099_broken\.sql.*no_such_function"):
        migrate(fresh_database_url, source=source)
    assert applied_migrations(fresh_database_url) == ALL_VERSIONS  # 0001-0013 committed one by one
    with psycopg.connect(fresh_database_url) as conn:
        assert conn.execute("SELECT to_regclass('half')").fetchone() == (None,)


def test_concurrent_runs_do_not_fail_and_apply_each_migration_once(fresh_database_url: str) -> None:
    runners = 6
    barrier = threading.Barrier(runners)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(migrate(fresh_database_url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(runners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    # exactly one runner did the work, the others waited on the lock and found nothing to do
    assert sorted(results, key=len) == [[]] * (runners - 1) + [ALL_VERSIONS]
    assert applied_migrations(fresh_database_url) == ALL_VERSIONS


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["0001_a.sql", "0002_b.timescale.sql"], r"0002 needs both .*0002_b\.timescale\.sql"),
        (["0001_a.sql", "0001_a.native.sql", "0001_a.timescale.sql"], "both a common file and backend variants"),
        (["0001_a.sql", "0001_b.sql"], "differently named files"),
        (["1_a.sql"], r"1_a\.sql: migration files must be named"),
    ],
)
def test_a_malformed_migration_folder_is_rejected(tmp_path: Path, files: list[str], message: str) -> None:
    for name in files:
        (tmp_path / name).write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=message):
        load_catalog(tmp_path)


def test_a_pending_version_older_than_an_applied_one_is_an_error(migrated_url: str) -> None:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = '0004'")
    with pytest.raises(MigrationError, match=r"0004_rollups\.native\.sql: not applied, but the later 0013"):
        migrate(migrated_url)


def test_migrations_ship_inside_the_package() -> None:
    # importlib.resources finds them, so they are in the wheel (hatch packages src/gpuaware whole)
    names = {m.filename for m in load_migrations("native")} | {m.filename for m in load_migrations("timescale")}
    assert "0003_samples.native.sql" in names and "0003_samples.timescale.sql" in names


def test_group_roles_are_nologin_and_least_privilege(migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        roles = dict(conn.execute("SELECT rolname, rolcanlogin FROM pg_roles "
                                  "WHERE rolname IN ('gpuaware_reader', 'gpuaware_collector')").fetchall())
        assert roles == {"gpuaware_reader": False, "gpuaware_collector": False}
        priv = {
            (role, table, p): conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, table, p)).fetchone()[0]
            for role in ("gpuaware_reader", "gpuaware_collector")
            for table in ("gpu_samples", "gpu_metrics_1m", "gpu_inventory")
            for p in ("SELECT", "INSERT", "DELETE")
        }
    assert priv[("gpuaware_reader", "gpu_samples", "SELECT")] and priv[("gpuaware_reader", "gpu_metrics_1m", "SELECT")]
    assert not any(priv[("gpuaware_reader", t, p)] for t in ("gpu_samples", "gpu_inventory") for p in ("INSERT", "DELETE"))
    assert priv[("gpuaware_collector", "gpu_samples", "INSERT")]
    assert not priv[("gpuaware_collector", "gpu_samples", "DELETE")]
    assert not priv[("gpuaware_collector", "gpu_metrics_1m", "INSERT")]  # rollups change only via the refresh function


def test_the_health_role_writes_only_health_scorings_tables(migrated_url: str) -> None:
    with psycopg.connect(migrated_url) as conn:
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'gpuaware_health'").fetchone() == (False,)

        def can(role: str, table: str, privilege: str) -> bool:
            return conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, table, privilege)).fetchone()[0]

        for table in ("health_scores", "health_gpu_state", "health_alerts", "health_overrides"):
            assert can("gpuaware_health", table, "INSERT") and can("gpuaware_reader", table, "SELECT")
            assert not can("gpuaware_health", table, "DELETE") and not can("gpuaware_reader", table, "INSERT")
            assert not can("gpuaware_collector", table, "INSERT")
        assert not can("gpuaware_health", "health_overrides", "UPDATE")  # the audit is append-only
        for table in ("gpu_samples", "gpu_inventory", "placement_events"):
            assert not can("gpuaware_health", table, "INSERT") and not can("gpuaware_health", table, "SELECT")
        assert conn.execute("SELECT has_function_privilege('gpuaware_health', "
                            "'gpuaware_expire_health(timestamptz)', 'EXECUTE')").fetchone() == (True,)


# which role may change which table: anything else writable by a service's role is a finding
WRITERS = {
    "gpuaware_collector": {"bus_roundtrip", "gpu_inventory", "gpu_pod_usage", "gpu_samples", "placement_events"},
    "gpuaware_forecasting": {"forecast_points"},  # reads forecast_models; publishing a model is the owner's act
    "gpuaware_health": {"health_alerts", "health_gpu_state", "health_overrides", "health_scores"},
    "gpuaware_quota": {"quota_intervals", "quota_usage"},
    "gpuaware_reader": set(),
}


def test_each_service_role_can_change_only_its_own_tables(migrated_url: str) -> None:
    # least privilege, as a matrix over every table and every role (the collector cannot write quota
    # tables, quota cannot touch telemetry, nobody but the owner writes health's audit); a new role or
    # table must be placed here on purpose
    with psycopg.connect(migrated_url) as conn:
        roles = {r for (r,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'gpuaware\\_%' "
                                            "AND NOT rolcanlogin")}
        tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                             "AND tablename <> 'schema_migrations'")]
        writable = {role: {t for t in tables if any(
            conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, t, p)).fetchone()[0]
            for p in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"))} for role in roles}
    assert set(WRITERS) == roles
    assert writable == WRITERS


async def test_a_service_pool_needs_a_database_and_migrates_it(fresh_database_url: str) -> None:
    from gpuaware.tsdb import open_service_pool

    with pytest.raises(SystemExit, match="quota needs a database: set DATABASE_URL or GPUAWARE_QUOTA_DATABASE_URL"):
        await open_service_pool("", service="quota", env="GPUAWARE_QUOTA_DATABASE_URL", max_size=1, timeout=5)
    pool = await open_service_pool(fresh_database_url, service="quota", env="X", max_size=1, timeout=5)
    try:
        async with pool.connection() as conn:
            assert (await (await conn.execute("SELECT to_regclass('quota_intervals') IS NOT NULL")).fetchone()) == (True,)
    finally:
        await pool.close()
