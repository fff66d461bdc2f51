"""Versioned SQL migrations shipped inside the package, applied in order, once, under a lock.

Why plain SQL files: reviewers read exactly what runs, DBAs can apply them by hand, and the
database stays the source of truth. The rules:

* Files live in `gpuaware/tsdb/migrations/` and are named `NNNN_name.sql`. A version whose SQL
  depends on the backend marks its native-only and TimescaleDB-only sections (see `dialects`); the
  runner renders it for the backend it picked (see `capabilities.choose_backend`), and both
  renderings must leave behind the same tables, views, columns and functions for callers.
* Each file runs in its own transaction together with its row in
  `schema_migrations(version, name, variant, checksum, applied_at)`: it applies entirely or not at all.
  `variant` is the backend for a file with sections, 'common' for one without.
* Applying again is a no-op. An applied file whose rendered SQL changed (sha256, line endings
  normalised) is an error naming the file: never edit an applied migration, add a new one. The one
  exception is `EARLIER_CHECKSUMS`: files rewritten as one source for both backends without changing
  what they create, whose earlier checksums stay valid for databases migrated before.
* A session advisory lock serialises runners, so services starting together do not race; the
  second waits, then finds nothing left to do.
* A database that knows versions this code does not (a newer release migrated it) is accepted
  with a warning, so rolling deploys keep working.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import cast

import psycopg

from gpuaware.tsdb.capabilities import (
    Backend,
    Requested,
    choose_backend,
    migrations_table_exists,
    timescaledb_available,
)
from gpuaware.tsdb.dialects import has_dialects, render
from gpuaware.tsdb.errors import ChecksumMismatchError, MigrationError
from gpuaware.tsdb.pool import Connection, connect

log = logging.getLogger(__name__)

# pg_advisory_lock key held while migrating ("gpuaware" in ASCII); advisory locks are per database
MIGRATION_LOCK_KEY = 0x6770756177617265
COMMON = "common"
FRAGMENTS = "fragments"

# (version, variant) -> the checksum its file had when each backend had a file of its own
EARLIER_CHECKSUMS: dict[tuple[str, str], str] = {
    ("0003", "native"): "2fbdec501c5ab5a8ef0e053f2f1d008721ebf74497746257af90c2a8ed6b748b",
    ("0003", "timescale"): "2a4b071d0884d3172f56111bd5899d3b8f459cb055c1d6e5708c249509ca0a7c",
    ("0004", "native"): "9ef03c158f66df5e81f8d7747e2c48e68334125e55c12485dbd8bdf6b665a1ca",
    ("0004", "timescale"): "dab982b7ece0931de8691933718956b4013a85c9745872122363bb51c62b1b49",
    ("0010", "native"): "3a55161f562b37681f77dab5a7c81b6b218f268222a701a2f601bf301f6a4ba3",
    ("0010", "timescale"): "0c0cd5fae25ec36dc20a33045175cb243073f903df4d8f2cd8265f0330c7786f",
    ("0013", "native"): "c309b9ad46f81066bac069054d17a85bb955e8a3f1951083190efa8ff6f32b03",
    ("0013", "timescale"): "e03116981f8bd66e80b8fa2c1fd762de86decc4137667ce558c78807edd1e590",
}

_FILE_RE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    name       text        NOT NULL,
    variant    text        NOT NULL CHECK (variant IN ('common', 'timescale', 'native')),
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    """One migration as a backend runs it: `variant` is that backend, or 'common' for a file without
    backend sections; `sql` is the rendered text."""

    version: str
    name: str
    variant: str
    filename: str
    sql: str
    checksum: str


@dataclass(frozen=True)
class AppliedMigration:
    version: str
    name: str
    variant: str
    checksum: str


def checksum(sql: str) -> str:
    return hashlib.sha256(sql.replace("\r\n", "\n").encode()).hexdigest()


def default_source() -> Traversable:
    return resources.files("gpuaware.tsdb") / "migrations"


def load_migrations(backend: Backend, source: Traversable | Path | None = None) -> list[Migration]:
    """Every migration a database on `backend` runs, in order, rendered for that backend."""
    root = default_source() if source is None else source
    fragments = _fragments(root)
    migrations: dict[str, Migration] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_RE.match(entry.name)
        if match is None:
            raise MigrationError(f"{entry.name}: migration files must be named NNNN_name.sql", filename=entry.name)
        if match["version"] in migrations:
            other = migrations[match["version"]].filename
            raise MigrationError(f"version {match['version']} is used by two files: {other}, {entry.name}",
                                 filename=entry.name)
        text = entry.read_text(encoding="utf-8")
        sql = render(text, backend, fragments, filename=entry.name)
        variant = backend if has_dialects(text) else COMMON
        migrations[match["version"]] = Migration(match["version"], match["name"], variant, entry.name, sql,
                                                 checksum(sql))
    return list(migrations.values())


def _fragments(root: Traversable | Path) -> dict[str, str]:
    folder = root / FRAGMENTS
    if not folder.is_dir():
        return {}
    return {entry.name.removesuffix(".sql"): entry.read_text(encoding="utf-8")
            for entry in folder.iterdir() if entry.name.endswith(".sql")}


def plan(migrations: Iterable[Migration], applied: Iterable[AppliedMigration]) -> list[Migration]:
    """Pure: verify what was applied against the files, return what is still to run, in order."""
    by_version = {m.version: m for m in migrations}
    applied = list(applied)
    for a in applied:
        known = by_version.get(a.version)
        if known is None:
            log.warning("database has migration %s_%s (%s) that this code does not ship; a newer "
                        "release applied it", a.version, a.name, a.variant)
            continue
        if a.checksum not in (known.checksum, EARLIER_CHECKSUMS.get((a.version, a.variant))):
            raise ChecksumMismatchError(
                f"{known.filename}: this migration was applied with checksum {a.checksum[:12]}… but the "
                f"file now has {known.checksum[:12]}…; never edit an applied migration, add a new one",
                filename=known.filename)
    done = {a.version for a in applied}
    newest_known_applied = max((v for v in done if v in by_version), default="")
    pending = []
    for version, migration in by_version.items():
        if version in done:
            continue
        if version < newest_known_applied:
            raise MigrationError(f"{migration.filename}: not applied, but the later {newest_known_applied} is; "
                                 "renumber it after the newest applied migration", filename=migration.filename)
        pending.append(migration)
    return pending


async def migrate(dsn: str, *, backend: Requested = "auto", source: Traversable | Path | None = None,
                  application_name: str = "gpuaware-migrate") -> list[str]:
    """Apply every pending migration; returns the versions applied by this call ([] when up to date)."""
    async with await connect(dsn, application_name=application_name, autocommit=True) as conn:
        # held until this connection closes, which also releases it if we fail half-way
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        await conn.execute(_CREATE_TABLE)
        versions = []
        for migration in await _pending(conn, backend, source):
            await _apply(conn, migration)
            versions.append(migration.version)
        return versions


async def pending_migrations(dsn: str, *, backend: Requested = "auto",
                             source: Traversable | Path | None = None) -> list[Migration]:
    """What `migrate` would apply now (dry run: no lock taken, nothing written)."""
    async with await connect(dsn, application_name="gpuaware-migrate", autocommit=True) as conn:
        return await _pending(conn, backend, source)


async def applied_migrations(dsn: str) -> list[str]:
    """Versions recorded in schema_migrations, in order ([] for a database never migrated)."""
    async with await connect(dsn, application_name="gpuaware-migrate", autocommit=True) as conn:
        return [a.version for a in await _applied(conn)]


async def _pending(conn: Connection, requested: Requested,
                   source: Traversable | Path | None) -> list[Migration]:
    applied = await _applied(conn)
    recorded = next((cast(Backend, a.variant) for a in applied if a.variant != COMMON), None)
    available = requested == "auto" and recorded is None and await timescaledb_available(conn)
    backend = choose_backend(requested, available=available, recorded=recorded)
    return plan(load_migrations(backend, source), applied)


async def _applied(conn: Connection) -> list[AppliedMigration]:
    if not await migrations_table_exists(conn):
        return []
    cur = await conn.execute("SELECT version, name, variant, checksum FROM schema_migrations ORDER BY version")
    return [AppliedMigration(*row) for row in await cur.fetchall()]


async def _apply(conn: Connection, migration: Migration) -> None:
    log.info("applying migration %s", migration.filename)
    try:
        async with conn.transaction():
            # no parameters: psycopg sends the file as one simple query, several statements allowed
            await conn.execute(migration.sql.encode())
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, variant, checksum) VALUES (%s, %s, %s, %s)",
                (migration.version, migration.name, migration.variant, migration.checksum))
    except psycopg.Error as exc:
        raise MigrationError(f"{migration.filename}: {exc}".strip(), filename=migration.filename) from exc
