"""Fixtures for the telemetry tests: servers of their own for the tests that break or fill them.

The session's nats-server is shared by every test of the suite, and its TELEMETRY stream would
carry other tests' samples into a collector replaying it; tests that count what lands in the
database therefore start their own nats-server (a fraction of a second) and use a fresh database.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaware.devstack import NatsProcess, PostgresProcess, start_nats, start_postgres


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[NatsProcess]:
    proc = start_nats(tmp_path / "nats")
    yield proc
    proc.stop()


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PostgresProcess]:
    """A PostgreSQL of this test alone, on a fixed port, so it can be stopped and started again."""
    proc = start_postgres(tmp_path / "postgres")
    yield proc
    proc.stop(mode="immediate")
