"""Versioned SQL migrations shipped inside the package, applied in order, once, under a lock.

Why plain SQL files: reviewers read exactly what runs, DBAs can apply them by hand, and the
database stays the source of truth. The rules:

* Files live in `gpuaware/tsdb/migrations/` and are named `NNNN_name.sql`. A version whose SQL
  depends on the backend ships two files instead, `NNNN_name.timescale.sql` and
  `NNNN_name.native.sql`; the runner picks one (see `capabilities.choose_backend`) and both must
  leave behind the same tables, views, columns and functions for callers.
* Each file runs in its own transaction together with its row in
  `schema_migrations(version, name, variant, checksum, applied_at)`: it applies entirely or not at all.
* Applying again is a no-op. An applied file whose content changed (sha256, line endings
  normalised) is an error naming the file: never edit an applied migration, add a new one.
* A session advisory lock serialises runners, so services starting together do not race; the
  second waits, then finds nothing left to do.
* A database that knows versions this code does not (a newer release migrated it) is accepted
  with a warning, so rolling deploys keep working.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg

from gpuaware.tsdb.capabilities import Backend, Requested, choose_backend, timescaledb_available
from gpuaware.tsdb.errors import ChecksumMismatchError, MigrationError
from gpuaware.tsdb.pool import connect

log = logging.getLogger(__name__)

# pg_advisory_lock key held while migrating ("gpuaware" in ASCII); advisory locks are per database
MIGRATION_LOCK_KEY = 0x6770756177617265
COMMON = "common"

_FILE_RE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+?)(?:\.(?P<variant>timescale|native))?\.sql$")

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
    """One migration file: `variant` is 'common', 'timescale' or 'native'."""

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


def load_catalog(source: Traversable | Path | None = None) -> dict[str, dict[str, Migration]]:
    """Every migration file, as version -> variant -> Migration, checked for a consistent layout."""
    root = default_source() if source is None else source
    catalog: dict[str, dict[str, Migration]] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_RE.match(entry.name)
        if match is None:
            raise MigrationError(f"{entry.name}: migration files must be named NNNN_name.sql, "
                                 "NNNN_name.timescale.sql or NNNN_name.native.sql", filename=entry.name)
        sql = entry.read_text(encoding="utf-8")
        migration = Migration(match["version"], match["name"], match["variant"] or COMMON, entry.name, sql,
                              checksum(sql))
        variants = catalog.setdefault(migration.version, {})
        if migration.variant in variants:
            other = variants[migration.variant].filename
            raise MigrationError(f"version {migration.version} is used by differently named files: "
                                 f"{other}, {entry.name}", filename=entry.name)
        variants[migration.variant] = migration
    for version, variants in catalog.items():
        names = {m.name for m in variants.values()}
        files = ", ".join(sorted(m.filename for m in variants.values()))
        if len(names) > 1:
            raise MigrationError(f"version {version} is used by differently named files: {files}", filename=files)
        if COMMON in variants and len(variants) > 1:
            raise MigrationError(f"version {version} has both a common file and backend variants: {files}",
                                 filename=files)
        if COMMON not in variants and len(variants) != 2:
            raise MigrationError(f"version {version} needs both a .timescale.sql and a .native.sql file, "
                                 f"found only {files}", filename=files)
    return dict(sorted(catalog.items()))


def load_migrations(backend: Backend, source: Traversable | Path | None = None) -> list[Migration]:
    """The full ordered list of files a database on `backend` runs, common ones included."""
    return [variants.get(COMMON) or variants[backend] for variants in load_catalog(source).values()]


def plan(catalog: Mapping[str, Mapping[str, Migration]], backend: Backend,
         applied: Iterable[AppliedMigration]) -> list[Migration]:
    """Pure: verify what was applied against the files, return what is still to run, in order."""
    applied = list(applied)
    done = {a.version for a in applied}
    for a in applied:
        known = catalog.get(a.version, {}).get(a.variant)
        if known is None:
            log.warning("database has migration %s_%s (%s) that this code does not ship; a newer "
                        "release applied it", a.version, a.name, a.variant)
            continue
        if known.checksum != a.checksum:
            raise ChecksumMismatchError(
                f"{known.filename}: this migration was applied with checksum {a.checksum[:12]}… but the "
                f"file now has {known.checksum[:12]}…; never edit an applied migration, add a new one",
                filename=known.filename)
    newest_known_applied = max((v for v in done if v in catalog), default="")
    pending = []
    for version, variants in catalog.items():
        if version in done:
            continue
        migration = variants.get(COMMON) or variants[backend]
        if version < newest_known_applied:
            raise MigrationError(f"{migration.filename}: not applied, but the later {newest_known_applied} is; "
                                 "renumber it after the newest applied migration", filename=migration.filename)
        pending.append(migration)
    return pending


def migrate(dsn: str, *, backend: Requested = "auto", source: Traversable | Path | None = None,
            application_name: str = "gpuaware-migrate") -> list[str]:
    """Apply every pending migration; returns the versions applied by this call ([] when up to date)."""
    catalog = load_catalog(source)
    with connect(dsn, application_name=application_name, autocommit=True) as conn:
        # held until this connection closes, which also releases it if we fail half-way
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute(_CREATE_TABLE)
        applied = _applied(conn)
        chosen = _choose(conn, backend, applied)
        versions = []
        for migration in plan(catalog, chosen, applied):
            _apply(conn, migration)
            versions.append(migration.version)
        return versions


def pending_migrations(dsn: str, *, backend: Requested = "auto",
                       source: Traversable | Path | None = None) -> list[Migration]:
    """What `migrate` would apply now (dry run: no lock taken, nothing written)."""
    catalog = load_catalog(source)
    with connect(dsn, application_name="gpuaware-migrate", autocommit=True) as conn:
        applied = _applied(conn)
        return plan(catalog, _choose(conn, backend, applied), applied)


def applied_migrations(dsn: str) -> list[str]:
    """Versions recorded in schema_migrations, in order ([] for a database never migrated)."""
    with connect(dsn, application_name="gpuaware-migrate", autocommit=True) as conn:
        return [a.version for a in _applied(conn)]


def _choose(conn: psycopg.Connection, requested: Requested, applied: list[AppliedMigration]) -> Backend:
    recorded = next((a.variant for a in applied if a.variant != COMMON), None)
    available = requested == "auto" and recorded is None and timescaledb_available(conn)
    return choose_backend(requested, available=available, recorded=recorded)  # type: ignore[arg-type]


def _applied(conn: psycopg.Connection) -> list[AppliedMigration]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return []
    rows = conn.execute("SELECT version, name, variant, checksum FROM schema_migrations ORDER BY version")
    return [AppliedMigration(*row) for row in rows]


def _apply(conn: psycopg.Connection, migration: Migration) -> None:
    log.info("applying migration %s", migration.filename)
    try:
        with conn.transaction():
            # no parameters: psycopg sends the file as one simple query, several statements allowed
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name, variant, checksum) VALUES (%s, %s, %s, %s)",
                (migration.version, migration.name, migration.variant, migration.checksum))
    except psycopg.Error as exc:
        raise MigrationError(f"{migration.filename}: {exc}".strip(), filename=migration.filename) from exc
