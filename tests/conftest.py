"""Session fixtures: a real nats-server and a real PostgreSQL on free ports, no Docker needed.

Both start once per test session in a private temporary folder and stop at the end. Tests that
need a pristine database take `fresh_database_url` (a new database per test); tests that break a
server on purpose (kill, restart) start their own with the same devstack helpers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from machine_speed import SLOWDOWN
from worker_scopes import shares_fixtures

from gpuaware.devstack import NatsProcess, PostgresProcess, start_nats, start_postgres

REPO_ROOT = Path(__file__).resolve().parent.parent

# the fuzz properties (tests/fuzz, tests/k8s/test_k8s_fuzz.py): bounded and reproducible in `make test`,
# 5,000 examples each in `make fuzz` (HYPOTHESIS_PROFILE=fuzz)
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header() -> str:
    return (f"machine slowdown x{SLOWDOWN:.2f} (every wall-clock ceiling in the suite is scaled by it; "
            "GPUAWARE_TEST_SLOWDOWN overrides)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _scale_timeouts(config, items)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown where xdist is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` on pytest-xdist workers: each test is its own unit of work, spread over the workers as
    they free up, except the tests of a module that shares a fixture (a demo run, a server of its own),
    which go to one worker together, as ``--dist loadscope`` sends every module."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            test_file = nodeid.split("::", 1)[0]
            return test_file if shares_fixtures(test_file) else nodeid

    return SharedFixtureScheduling(config, log)


def _scale_timeouts(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's pytest-timeout ceiling (its marker's, or the configured default) times the machine's
    slowdown: a busy machine gets more time, never a failure for being busy."""
    if SLOWDOWN <= 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker is not None and marker.args else default
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(seconds * SLOWDOWN), append=False)


FAULT_REPORT_PROPERTY = "fault_suite_report"
"""the user property a fault scenario's report lines travel in (tests/faults/conftest.py writes them)"""
_FAULT_LINES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _FAULT_LINES.extend(text for name, text in report.user_properties if name == FAULT_REPORT_PROPERTY)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault suite's invariants per scenario, at the end of the run (here, in the root conftest: with
    pytest-xdist only the controller prints, and it loads no conftest below this one)."""
    if not _FAULT_LINES:
        return
    terminalreporter.section("fault suite: invariants per scenario")
    for text in _FAULT_LINES:
        for line in str(text).splitlines():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def stack_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuaware-tests-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def nats_server(stack_dir: Path) -> Iterator[NatsProcess]:
    proc = start_nats(stack_dir / "nats")
    yield proc
    proc.stop()


@pytest.fixture
def nats_proc(tmp_path: Path) -> Iterator[NatsProcess]:
    """A private server for one test: streams, durables and leases start empty (service tests)."""
    proc = start_nats(tmp_path / "nats")
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsProcess) -> str:
    return nats_server.url


@pytest.fixture(scope="session")
def postgres_server(stack_dir: Path) -> Iterator[PostgresProcess]:
    proc = start_postgres(stack_dir / "postgres")
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def database_url(postgres_server: PostgresProcess) -> str:
    return postgres_server.url


@pytest.fixture
def fresh_database_url(postgres_server: PostgresProcess) -> Iterator[str]:
    """A new, empty database for one test, dropped afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{name}"
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` (or GPUAWARE_SHARED_DATA); skips with a clear message when absent."""
    path = Path(os.environ.get("GPUAWARE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}: set GPUAWARE_SHARED_DATA to the shared/data folder")
    return path


def _docker_engine_running() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def timescaledb_url() -> Iterator[str]:
    """The real TimescaleDB image through testcontainers, only where a Docker engine runs; else skip."""
    if not _docker_engine_running():
        pytest.skip("no Docker engine here: the TimescaleDB image cannot run (the native path is tested instead)")
    from testcontainers.postgres import PostgresContainer

    image = os.environ.get("GPUAWARE_TIMESCALEDB_IMAGE", "timescale/timescaledb:2.17.2-pg16")
    with PostgresContainer(image, username="postgres", password="postgres", dbname="gpuaware") as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(5432)
        yield f"postgresql://postgres:postgres@{host}:{port}/gpuaware"
