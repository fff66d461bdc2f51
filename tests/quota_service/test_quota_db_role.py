"""Migration 0011: the gpuaware_quota role may write chargeback and snapshots but never delete them;
the reader role reads both."""

from __future__ import annotations

import asyncio

import psycopg

from gpuaware import tsdb


def test_quota_role_privileges(fresh_database_url: str) -> None:
    asyncio.run(tsdb.migrate(fresh_database_url))
    with psycopg.connect(fresh_database_url) as conn:
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'gpuaware_quota'").fetchone() == (False,)

        def can(role: str, table: str, what: str) -> bool:
            return conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, table, what)).fetchone()[0]

        for what in ("SELECT", "INSERT", "UPDATE"):
            assert can("gpuaware_quota", "quota_intervals", what)
        assert can("gpuaware_quota", "quota_usage", "INSERT") and not can("gpuaware_quota", "quota_usage", "UPDATE")
        for table in ("quota_intervals", "quota_usage"):
            assert not can("gpuaware_quota", table, "DELETE")
            assert can("gpuaware_reader", table, "SELECT") and not can("gpuaware_reader", table, "INSERT")
        # another service's tables are not quota's
        assert not can("gpuaware_quota", "health_scores", "INSERT")
