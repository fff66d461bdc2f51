"""Fixtures for gpuaware.tsdb: a freshly migrated database per test and a connection to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gpuaware.tsdb import Connection, connect, migrate


@pytest.fixture
async def migrated_url(fresh_database_url: str) -> str:
    await migrate(fresh_database_url)
    return fresh_database_url


@pytest.fixture
async def conn(migrated_url: str) -> AsyncIterator[Connection]:
    async with await connect(migrated_url, autocommit=True) as connection:
        yield connection
