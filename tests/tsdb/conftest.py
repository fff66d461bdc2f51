"""Fixtures for gpuaware.tsdb: a freshly migrated database per test and a connection to it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from gpuaware.tsdb import migrate


@pytest.fixture
def migrated_url(fresh_database_url: str) -> str:
    migrate(fresh_database_url)
    return fresh_database_url


@pytest.fixture
def conn(migrated_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(migrated_url, autocommit=True) as connection:
        yield connection

