"""Login roles: each service connects as its own LOGIN role, a member of its NOLOGIN group role.

Why: the migrations grant each service's group role (``gpuaware_collector``, ``gpuaware_health``, ...)
exactly what that service does; a group role cannot log in, so a login per service is what makes the
grants count. The database's owner (the chart's provisioning Job, ``gpuaware up``, the demo) creates
or updates them with ``ensure_login_roles``; the services then never migrate (``migrate_or_check``:
only the owner applies migrations, a service's own role checks that none is pending and stops
naming the ones missing).

Passwords reach the server already hashed (SCRAM-SHA-256, by libpq's ``PQencryptPasswordConn``), so a
statement log never holds one in clear.

Sample::

    await ensure_login_roles(owner_dsn, {"gpuaware_quota_login": ("gpuaware_quota", password)})
    dsn = login_url(owner_dsn, "gpuaware_quota_login", password)   # what the quota service gets
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from gpuaware.tsdb.errors import MigrationError, TsdbError
from gpuaware.tsdb.migrator import migrate, pending_migrations
from gpuaware.tsdb.pool import Connection, connect

__all__ = ["SchemaNotReadyError", "ensure_login_roles", "login_url", "migrate_or_check"]

log = logging.getLogger(__name__)

_OWNER = """
SELECT r.rolsuper
    OR c.relowner = r.oid
    OR (c.oid IS NULL AND has_database_privilege(current_database(), 'CREATE'))
FROM pg_catalog.pg_roles r
LEFT JOIN pg_catalog.pg_class c ON c.oid = to_regclass('schema_migrations')
WHERE r.rolname = current_user
"""


class SchemaNotReadyError(MigrationError):
    """A service's own role found migrations pending: the owner (provisioning) must apply them first."""


async def ensure_login_roles(owner_dsn: str, logins: Mapping[str, tuple[str, str]]) -> list[str]:
    """Create each LOGIN role (login -> (group role, password)) or set its password, and make it a member
    of its group role; returns the logins created (the others existed). Idempotent; a login another
    provisioner creates at the same moment is updated instead. Raises ``TsdbError`` naming a group role
    that does not exist (the migrations create them: migrate first)."""
    created = []
    async with await connect(owner_dsn, application_name="gpuaware-provision", autocommit=True) as conn:
        for login, (group, password) in sorted(logins.items()):
            if not password:
                raise TsdbError(f"login role {login!r} has an empty password")
            cur = await conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (group,))
            if await cur.fetchone() is None:
                raise TsdbError(f"group role {group!r} of login {login!r} does not exist: apply the migrations first")
            verifier = _scram(conn, login, password)
            name = sql.Identifier(login)
            try:
                await conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(name, sql.Literal(verifier)))
                created.append(login)
            except psycopg.errors.DuplicateObject:
                await conn.execute(sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(name, sql.Literal(verifier)))
            await conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), name))
    if created:
        log.info("created login roles %s", ", ".join(created))
    return created


def _scram(conn: Connection, login: str, password: str) -> str:
    return conn.pgconn.encrypt_password(password.encode(), login.encode(), b"scram-sha-256").decode()


def login_url(owner_dsn: str, login: str, password: str) -> str:
    """The owner's server, database and options with another user and password, as a
    ``postgresql://user:password@host:port/db?options`` URL (the form whose password
    ``gpuaware.runtime.redact_url`` masks when a service logs its settings)."""
    params = {k: v for k, v in conninfo_to_dict(owner_dsn).items() if v is not None}
    params.pop("user", None)
    params.pop("password", None)
    host = str(params.pop("host", ""))
    port = params.pop("port", None)
    dbname = str(params.pop("dbname", ""))
    if host.startswith("/") or "," in host:  # a socket folder or several hosts: as options
        params["host"] = host
        host = ""
    netloc = f"{quote(login, safe='')}:{quote(password, safe='')}@{host}{f':{port}' if port and host else ''}"
    if port and not host:
        params["port"] = port
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


async def migrate_or_check(dsn: str) -> list[str]:
    """The database's owner (a superuser, the owner of ``schema_migrations``, or on a fresh database a
    role that may create in it) applies the pending migrations (``migrate``; returns the versions
    applied). Any other role, a service's own login, applies nothing: it raises
    ``SchemaNotReadyError`` naming the migrations still pending (the provisioning applies them)."""
    async with await connect(dsn, application_name="gpuaware-migrate", autocommit=True) as conn:
        cur = await conn.execute(_OWNER)
        row = await cur.fetchone()
    if row and row[0]:
        return await migrate(dsn)
    try:
        pending = await pending_migrations(dsn)
    except psycopg.errors.InsufficientPrivilege:
        pending = None  # schema_migrations unreadable: the grant that lets services read it is not applied
    if pending is None or pending:
        what = "the schema's migrations" if pending is None else ", ".join(m.filename for m in pending)
        raise SchemaNotReadyError(f"the database is not migrated ({what} not applied) and this role does not own "
                                  "it: the provisioning (the chart's Job, `gpuaware up`) migrates it as the owner")
    return []
