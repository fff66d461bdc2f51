"""Login roles: the owner creates one LOGIN role per service as a member of its group role (passwords
hashed before they reach the server), a service's role never migrates, and the group's grants are what
the login can do."""

from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from gpuaware.runtime import redact_url
from gpuaware.schemas import PROCESSES
from gpuaware.tsdb import (
    Connection,
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
        await conn.execute("DELETE FROM schema_migrations WHERE version = '0016'")
    with pytest.raises(SchemaNotReadyError, match=re.escape("0016_forecast_p10.sql")):
        await migrate_or_check(url)
    assert await migrate_or_check(fresh_database_url) == ["0016"]  # the owner applies it


async def test_a_login_on_an_unmigrated_database_is_refused_with_what_to_run(fresh_database_url: str) -> None:
    login = _login()
    async with await connect(fresh_database_url, autocommit=True) as conn:
        await conn.execute(f'CREATE ROLE "{login}" LOGIN')
    with pytest.raises(SchemaNotReadyError, match="provisioning"):
        await migrate_or_check(login_url(fresh_database_url, login, ""))


async def test_a_missing_group_role_is_named(migrated_url: str) -> None:
    with pytest.raises(TsdbError, match="gpuaware_nobody"):
        await ensure_login_roles(migrated_url, {_login(): ("gpuaware_nobody", "pw")})


@pytest.mark.parametrize("owner", [
    "postgresql://owner:secret@db.example:5433/gpuaware?sslmode=require",
    "host=db.example port=5433 dbname=gpuaware user=owner password=secret sslmode=require",
])
def test_login_url_keeps_the_server_and_options_and_logs_masked(owner: str) -> None:
    url = login_url(owner, "svc_login", "p@ss:w/rd")
    params = psycopg.conninfo.conninfo_to_dict(url)
    assert params == {"user": "svc_login", "password": "p@ss:w/rd", "host": "db.example", "port": "5433",
                      "dbname": "gpuaware", "sslmode": "require"}
    assert redact_url(url).startswith("postgresql://svc_login:***@db.example:5433/") and "secret" not in url


def test_login_url_of_a_socket_folder() -> None:
    url = login_url("host=/var/run/postgresql dbname=gpuaware", "svc_login", "pw")
    assert psycopg.conninfo.conninfo_to_dict(url) == {"user": "svc_login", "password": "pw",
                                                      "host": "/var/run/postgresql", "dbname": "gpuaware"}


async def test_every_database_role_of_the_list_of_processes_is_made_by_the_migrations(conn: Connection) -> None:
    roles = {p.database_role for p in PROCESSES if p.database_role}
    cur = await conn.execute("SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY(%s)", (sorted(roles),))
    found = dict(await cur.fetchall())
    assert set(found) == roles and not any(found.values())  # group roles: nobody logs in as them
