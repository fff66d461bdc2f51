"""Fixtures for the telemetry tests: servers of their own for the tests that break or fill them.

The session's nats-server is shared by every test of the suite, and its TELEMETRY stream would
carry other tests' samples into a collector replaying it; tests that count what lands in the
database therefore take a nats-server of their own (``nats_proc``, a fraction of a second) and a fresh
database; the tests that stop PostgreSQL take one of their own too (``own_postgres``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaware.devstack import PostgresProcess, start_postgres


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PostgresProcess]:
    """A PostgreSQL of this test alone, on a fixed port, so it can be stopped and started again."""
    proc = start_postgres(tmp_path / "postgres")
    yield proc
    proc.stop(mode="immediate")
