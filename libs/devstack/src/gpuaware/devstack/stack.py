"""`gpuaware up` / `gpuaware down`: the embedded stack in a data folder, reused while it runs.

State lives in `<data>/stack.json` (ports, pids), so a second `up` finds the running servers
instead of starting twins, and `down` stops exactly what `up` started. When `NATS_URL` or
`DATABASE_URL` is set, that server is somebody else's: we neither start nor stop it.

`auth=True` starts NATS with one least-privilege user per service (`start_nats(auth=True)`); the
credentials stay in `<data>/nats/credentials.json` (0600), read with `stack_credentials`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.nats import NatsProcess, credentials, forget_credentials, start_nats
from gpuaware.devstack.postgres import PostgresProcess, start_postgres
from gpuaware.devstack.processes import pid_alive, terminate

DEFAULT_DATA_DIR = Path(".gpuaware")
DEFAULT_NATS_PORT = 4222
DEFAULT_PG_PORT = 5433


@dataclass(frozen=True)
class StackState:
    """What `up` started (or found external); serialised to stack.json."""

    nats_url: str
    database_url: str
    nats_pid: int | None = None
    nats_port: int | None = None
    nats_monitor_port: int | None = None
    postgres_pid: int | None = None
    postgres_port: int | None = None
    nats_auth: bool = False
    """NATS requires the per-service users (credentials in `<data>/nats/credentials.json`)"""

    @property
    def nats_external(self) -> bool:
        return self.nats_pid is None

    @property
    def postgres_external(self) -> bool:
        return self.postgres_pid is None


@dataclass(frozen=True)
class Stack:
    state: StackState
    reused: bool


def _state_file(data_dir: Path) -> Path:
    return data_dir / "stack.json"


def _load(data_dir: Path) -> StackState | None:
    path = _state_file(data_dir)
    if not path.exists():
        return None
    try:
        return StackState(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def _running(state: StackState) -> bool:
    nats_ok = state.nats_external or (state.nats_pid is not None and pid_alive(state.nats_pid))
    pg_ok = state.postgres_external or (state.postgres_pid is not None and pid_alive(state.postgres_pid))
    return nats_ok and pg_ok


def stack_status(data_dir: Path = DEFAULT_DATA_DIR) -> StackState | None:
    """The running stack's state, or None when nothing of ours runs."""
    state = _load(Path(data_dir))
    return state if state is not None and _running(state) else None


def stack_up(data_dir: Path = DEFAULT_DATA_DIR, *, nats_port: int = DEFAULT_NATS_PORT,
             pg_port: int = DEFAULT_PG_PORT, env: dict[str, str] | None = None, auth: bool = False) -> Stack:
    """Start (or reuse) NATS + PostgreSQL under `data_dir`; honours NATS_URL / DATABASE_URL.

    `auth` starts NATS with per-service users (a running stack is reused as it is: see `state.nats_auth`)."""
    env = dict(os.environ if env is None else env)
    data_dir = Path(data_dir).resolve()
    current = stack_status(data_dir)
    if current is not None:
        return Stack(state=current, reused=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    nats: NatsProcess | None = None
    pg: PostgresProcess | None = None
    try:
        if not env.get("NATS_URL"):
            nats = start_nats(data_dir / "nats", port=nats_port, detach=True, auth=auth)
        if not env.get("DATABASE_URL"):
            pg = start_postgres(data_dir / "postgres", port=pg_port)
    except StackError:
        if nats is not None:
            nats.stop()
        raise
    state = StackState(
        nats_url=env.get("NATS_URL") or (nats.url if nats else ""),
        database_url=env.get("DATABASE_URL") or (pg.url if pg else ""),
        nats_pid=nats.pid if nats else None,
        nats_port=nats.port if nats else None,
        nats_monitor_port=nats.monitor_port if nats else None,
        postgres_pid=pg.pid if pg else None,
        postgres_port=pg.port if pg else None,
        nats_auth=bool(nats and nats.auth),
    )
    _state_file(data_dir).write_text(json.dumps(asdict(state), indent=2))
    return Stack(state=state, reused=False)


def stack_credentials(data_dir: Path = DEFAULT_DATA_DIR) -> dict[str, tuple[str, str]]:
    """identity -> (user, password) of the stack's NATS (started with `auth=True`)."""
    return credentials(Path(data_dir).resolve() / "nats")


def stack_down(data_dir: Path = DEFAULT_DATA_DIR) -> list[str]:
    """Stop what `up` started; returns what was stopped (empty when nothing ran)."""
    data_dir = Path(data_dir).resolve()
    state = _load(data_dir)
    stopped: list[str] = []
    if state is None:
        return stopped
    if state.postgres_pid is not None and pid_alive(state.postgres_pid):
        PostgresProcess(port=state.postgres_port or 0, data_dir=data_dir / "postgres",
                        pid=state.postgres_pid).stop()
        stopped.append("postgres")
    if state.nats_pid is not None and pid_alive(state.nats_pid):
        terminate(state.nats_pid, None, 10.0)
        stopped.append("nats")
    forget_credentials(data_dir / "nats")  # passwords do not outlive the stack that used them
    _state_file(data_dir).unlink(missing_ok=True)
    return stopped
