"""Login roles: the owner creates one LOGIN role per service as a member of its group role (passwords
hashed before they reach the server), a service's role never migrates, and the group's grants are what
the login can do."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from gpuaware.tsdb import (
    SchemaNotReadyError,
    TsdbError,
    connect,
    ensure_login_roles,
    login_url,
    migrate,
    migrate_or_check,
)


def _login() -> str:
    return f"t_login_{uuid.uuid4().hex[:8]}"  # roles are server-wide: one name per test


async def test_logins_are_created_then_updated_as_members_of_their_group(migrated_url: str) -> None:
    login = _login()
    assert await ensure_login_roles(migrated_url, {login: ("gpuaware_quota", "first")}) == [login]
    assert await ensure_login_roles(migrated_url, {login: ("gpuaware_quota", "second")}) == []
    async with await connect(migrated_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT rolcanlogin, rolpassword, pg_has_role(%s, 'gpuaware_quota', 'MEMBER') "
                                 "FROM pg_authid WHERE rolname = %s", (login, login))
        can_login, stored, member = await cur.fetchone()
    assert can_login and member
    assert stored.startswith("SCRAM-SHA-256$") and "second" not in stored


async def test_a_login_can_do_what_its_group_may_and_nothing_else(migrated_url: str) -> None:
    login = _login()
    await ensure_login_roles(migrated_url, {login: ("gpuaware_quota", "pw")})
    async with await connect(login_url(migrated_url, login, "pw"), autocommit=True) as conn:
        cur = await conn.execute("SELECT current_user")
        assert (await cur.fetchone())[0] == login
        await conn.execute("SELECT count(*) FROM quota_intervals")  # the quota group's table
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("SELECT count(*) FROM health_scores")  # health-scoring's
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("DROP TABLE quota_intervals")


async def test_a_service_login_checks_the_schema_and_never_migrates(fresh_database_url: str) -> None:
    login = _login()
    url = login_url(fresh_database_url, login, "pw")
    await migrate(fresh_database_url)
    await ensure_login_roles(fresh_database_url, {login: ("gpuaware_collector", "pw")})
    assert await migrate_or_check(url) == []  # up to date: nothing to do, nothing refused
    async with await connect(fresh_database_url, autocommit=True) as conn:  # as if a release were pending
        await conn.execute("DELETE FROM schema_migrations WHERE version = '0015'")
    with pytest.raises(SchemaNotReadyError, match="0015_service_logins.sql"):
        await migrate_or_check(url)
    assert await migrate_or_check(fresh_database_url) == ["0015"]  # the owner applies it


async def test_a_login_on_an_unmigrated_database_is_refused_with_what_to_run(fresh_database_url: str) -> None:
    login = _login()
    async with await connect(fresh_database_url, autocommit=True) as conn:
        await conn.execute(f'CREATE ROLE "{login}" LOGIN')
    with pytest.raises(SchemaNotReadyError, match="provisioning"):
        await migrate_or_check(login_url(fresh_database_url, login, ""))


async def test_a_missing_group_role_is_named(migrated_url: str) -> None:
    with pytest.raises(TsdbError, match="gpuaware_nobody"):
        await ensure_login_roles(migrated_url, {_login(): ("gpuaware_nobody", "pw")})


def test_login_url_keeps_the_server_and_options() -> None:
    url = login_url("postgresql://owner:secret@db.example:5433/gpuaware?sslmode=require", "svc_login", "pw")
    params = psycopg.conninfo.conninfo_to_dict(url)
    assert params == {"user": "svc_login", "password": "pw", "host": "db.example", "port": "5433",
                      "dbname": "gpuaware", "sslmode": "require"}
