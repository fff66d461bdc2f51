"""`gpuaware up` / `gpuaware down`: the embedded stack in a data folder, reused while it runs.

State lives in `<data>/stack.json` (ports, pids), so a second `up` finds the running servers
instead of starting twins, and `down` stops exactly what `up` started. When `NATS_URL` or
`DATABASE_URL` is set, that server is somebody else's: we neither start nor stop it.

A stack half gone (nats-server killed, PostgreSQL still up, or the reverse) is *ours*, not a
stranger on our port: `up` starts again only what died, on the same port and data folder
(JetStream's streams and the database survive; running services reconnect), and `stack_health`
says which part runs. The demo calls the same `stack_up` to bring a crashed server back.

`auth=True` starts NATS with one least-privilege user per service (`start_nats(auth=True)`); the
credentials stay in `<data>/nats/credentials.json` (0600), read with `stack_credentials`. Each
service's database login has its password in `<data>/postgres-logins.json` (0600,
`database_passwords`); both are forgotten by `stack_down`.

`nats_nodes=3` starts a NATS JetStream cluster of three routed nodes on loopback ports instead of
one server (`gpuaware.devstack.cluster`): ``nats_url`` names every node (comma-separated, clients
move to another when theirs dies), each node is recorded with its ports, a dead node is started
again on them by the next `stack_up` (it rejoins), and streams and KV buckets created on it get
three replicas (`gpuaware.bus.cluster_replicas`), so losing one node loses nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuaware.devstack.cluster import start_cluster_node, start_nats_cluster
from gpuaware.devstack.errors import StackError
from gpuaware.devstack.logins import forget_database_passwords
from gpuaware.devstack.nats import NatsProcess, credentials, forget_credentials, start_nats
from gpuaware.devstack.ports import wait_port_free
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
    nats_tls_ca: str = ""
    """NATS speaks TLS only; clients verify it with this CA certificate (`NATS_TLS_CA`)"""
    nats_nodes: list[dict[str, Any]] = field(default_factory=list)
    """a NATS cluster's nodes (``name``, ``pid``, ``port``, ``monitor_port``, ``cluster_port``); empty
    for a single server"""

    @property
    def nats_external(self) -> bool:
        return self.nats_pid is None and not self.nats_nodes

    @property
    def postgres_external(self) -> bool:
        return self.postgres_pid is None


@dataclass(frozen=True)
class Stack:
    state: StackState
    reused: bool
    restarted: tuple[str, ...] = ()
    """servers of a half-running stack started again ("nats", "postgres")"""


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


def _alive(state: StackState) -> dict[str, bool]:
    """Our servers and whether each runs (external servers are not ours to judge: absent)."""
    out = {}
    for node in state.nats_nodes:
        out[f"nats-{node['name']}"] = pid_alive(int(node["pid"]))
    if state.nats_pid is not None:
        out["nats"] = pid_alive(state.nats_pid)
    if not state.postgres_external:
        out["postgres"] = state.postgres_pid is not None and pid_alive(state.postgres_pid)
    return out


def _running(state: StackState) -> bool:
    return all(_alive(state).values())


def stack_status(data_dir: Path = DEFAULT_DATA_DIR) -> StackState | None:
    """The running stack's state, or None when not all of ours runs (see `stack_health`)."""
    state = _load(Path(data_dir))
    return state if state is not None and _running(state) else None


def stack_health(data_dir: Path = DEFAULT_DATA_DIR) -> tuple[StackState | None, dict[str, bool]]:
    """The recorded state and, for each server we started, whether it runs (empty: nothing recorded)."""
    state = _load(Path(data_dir).resolve())
    return state, (_alive(state) if state is not None else {})


def stack_up(data_dir: Path = DEFAULT_DATA_DIR, *, nats_port: int = DEFAULT_NATS_PORT,
             pg_port: int = DEFAULT_PG_PORT, env: dict[str, str] | None = None, auth: bool = False,
             tls: bool = False, nats_nodes: int = 1, auth_clusters: Sequence[str] | None = None) -> Stack:
    """Start (or reuse) NATS + PostgreSQL under `data_dir`; honours NATS_URL / DATABASE_URL.

    `auth` starts NATS with per-service users (a running stack is reused as it is: see `state.nats_auth`).
    `auth_clusters`: the clusters whose services may use an auth server (default: ``default``).
    `nats_nodes` > 1 starts a NATS cluster of that many nodes (module docstring; `nats_port` is then
    ignored: every node takes free ports)."""
    if nats_nodes < 1 or nats_nodes > 9 or (nats_nodes > 1 and nats_nodes % 2 == 0):
        raise StackError(f"a NATS cluster needs an odd number of nodes from 1 to 9 (a majority must survive "
                         f"a lost node), not {nats_nodes}")
    if nats_nodes > 1 and (auth or tls):
        raise StackError("--auth and --tls are not supported with a NATS cluster yet (its routes would need "
                         "the same users and certificates): start the cluster without them")
    env = dict(os.environ if env is None else env)
    data_dir = Path(data_dir).resolve()
    recorded = _load(data_dir)
    if recorded is not None:
        alive = _alive(recorded)
        if all(alive.values()):
            return Stack(state=recorded, reused=True)
        if any(alive.values()):
            return _revive(data_dir, recorded, alive)
    data_dir.mkdir(parents=True, exist_ok=True)
    nats: NatsProcess | None = None
    cluster = None
    pg: PostgresProcess | None = None
    try:
        if not env.get("NATS_URL") and nats_nodes > 1:
            cluster = start_nats_cluster(data_dir / "nats", size=nats_nodes, detach=True)
        elif not env.get("NATS_URL"):
            nats = start_nats(data_dir / "nats", port=nats_port, detach=True, auth=auth, tls=tls,
                              auth_clusters=auth_clusters)
        if not env.get("DATABASE_URL"):
            pg = start_postgres(data_dir / "postgres", port=pg_port)
    except StackError:
        if nats is not None:
            nats.stop()
        if cluster is not None:
            cluster.stop()
        raise
    nodes = [] if cluster is None else [
        {"name": f"n{i}", "pid": n.pid, "port": n.port, "monitor_port": n.monitor_port,
         "cluster_port": cluster.cluster_ports[i]} for i, n in enumerate(cluster.nodes)]
    state = StackState(
        nats_url=env.get("NATS_URL") or (nats.url if nats else ",".join(cluster.urls) if cluster else ""),
        database_url=env.get("DATABASE_URL") or (pg.url if pg else ""),
        nats_pid=nats.pid if nats else None,
        nats_port=nats.port if nats else None,
        nats_monitor_port=nats.monitor_port if nats else None,
        postgres_pid=pg.pid if pg else None,
        postgres_port=pg.port if pg else None,
        nats_auth=bool(nats and nats.auth),
        nats_tls_ca=str(nats.tls_ca) if nats and nats.tls_ca else "",
        nats_nodes=nodes,
    )
    _state_file(data_dir).write_text(json.dumps(asdict(state), indent=2))
    return Stack(state=state, reused=False)


def _revive(data_dir: Path, state: StackState, alive: dict[str, bool]) -> Stack:
    """Start again, where they ran, the servers of ours that died while the others still run."""
    restarted = []
    if state.nats_nodes:
        nodes = [dict(n) for n in state.nats_nodes]
        ports = [int(n["cluster_port"]) for n in nodes]
        for i, node in enumerate(nodes):
            if alive.get(f"nats-{node['name']}") is False:
                wait_port_free(int(node["port"]))  # the dead node's port can linger a moment
                wait_port_free(int(node["monitor_port"]))
                proc = start_cluster_node(data_dir / "nats", i, cluster_ports=ports, port=int(node["port"]),
                                          monitor_port=int(node["monitor_port"]), detach=True)
                node["pid"] = proc.pid
                restarted.append(f"nats-{node['name']}")
        state = replace(state, nats_nodes=nodes)
    if alive.get("nats") is False:
        nats = start_nats(data_dir / "nats", port=state.nats_port or 0, monitor_port=state.nats_monitor_port or 0,
                          detach=True, auth=state.nats_auth, tls=bool(state.nats_tls_ca))
        state = replace(state, nats_pid=nats.pid, nats_url=nats.url)
        restarted.append("nats")
    if alive.get("postgres") is False:
        pg = start_postgres(data_dir / "postgres", port=state.postgres_port or 0)
        state = replace(state, postgres_pid=pg.pid, database_url=pg.url)
        restarted.append("postgres")
    _state_file(data_dir).write_text(json.dumps(asdict(state), indent=2))
    return Stack(state=state, reused=True, restarted=tuple(restarted))


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
    for node in state.nats_nodes:
        if pid_alive(int(node["pid"])):
            terminate(int(node["pid"]), None, 10.0)
            stopped.append(f"nats-{node['name']}")
    forget_credentials(data_dir / "nats")  # passwords do not outlive the stack that used them
    forget_database_passwords(data_dir)
    _state_file(data_dir).unlink(missing_ok=True)
    return stopped
