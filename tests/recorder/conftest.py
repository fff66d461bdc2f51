"""Fixtures for the recorder tests: a PostgreSQL of a test's own, for the outage it stops and starts."""

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
