"""`gpuaware up` / `gpuaware down`: the embedded stack in a data folder, reused while it runs.

State lives in `<data>/stack.json`: how the stack was started (NATS with or without per-service users
and TLS, one server or a cluster of how many nodes, every port, the data folders) and what runs (each
server's PID with the time it started), so a second `up` finds the running servers instead of starting
twins, and `down` stops exactly what `up` started. When `NATS_URL` or `DATABASE_URL` is set, that server
is somebody else's: we neither start nor stop it.

The record outlives its servers: after any death (one server killed, or all of them, or the machine
rebooted) the next `up` starts again exactly what it records, on the same ports and data folders (the
JetStream stores and the database survive; running services reconnect; an auth stack keeps its
passwords), and `stack_health` says which part runs. A stack half gone is *ours*, not a stranger on our
port. The demo calls the same `stack_up` to bring a crashed server back. Options that contradict the
record (`--auth` of a stack started without, `--nats-cluster 3` of a single server, another port) are
refused with the reason, whether it runs or not: starting it otherwise silently would strand its data
or its clients. `stack_reset` (`up --reset`) forgets the record to start over; `stack_down` stops the
stack and forgets it too.

A PID alone is never trusted: the kernel hands a dead server's PID to the next process, so each is
checked against the start time recorded at launch and the executable's name
(`gpuaware.devstack.processes.pid_state`) before it is reported running or signalled; a mismatch is a
server that no longer runs ("PID reused by another process").

`auth=True` starts NATS with one least-privilege user per service (`start_nats(auth=True)`); the
credentials stay in `<data>/nats/credentials.json` (0600), read with `stack_credentials`. Each
service's database login has its password in `<data>/postgres-logins.json` (0600,
`database_passwords`); both are forgotten by `stack_down`.

`nats_nodes=3` starts a NATS JetStream cluster of three routed nodes on loopback ports instead of
one server (`gpuaware.devstack.cluster`): ``nats_url`` names every node (comma-separated, clients
move to another when theirs dies), each node is recorded with its ports, a dead node is started
again on them by the next `stack_up` (it rejoins), and streams and KV buckets created on it get
three replicas (`gpuaware.bus.cluster_replicas`), so losing one node loses nothing. With `auth` /
`tls` every node has the same users (credentials in `<data>/nats/credentials.json`, as for one
server) and serves a certificate of the same CA (`<data>/nats/tls/ca.pem`), and the routes between
nodes are authenticated (a route user of their own) and TLS verified both ways; a node started again
after a death gets the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuaware.devstack.cluster import NODE_CONFIG, start_cluster_node, start_nats_cluster
from gpuaware.devstack.errors import StackError
from gpuaware.devstack.logins import LOGINS, forget_database_passwords
from gpuaware.devstack.nats import NatsProcess, credentials, forget_credentials, start_nats
from gpuaware.devstack.ports import wait_port_free
from gpuaware.devstack.postgres import PostgresProcess, start_postgres
from gpuaware.devstack.processes import REUSED, RUNNING, STOPPED, pid_state, started_at, terminate

DEFAULT_DATA_DIR = Path(".gpuaware")
DEFAULT_NATS_PORT = 4222
DEFAULT_PG_PORT = 5433
NATS_EXECUTABLES = ("nats-server",)
POSTGRES_EXECUTABLES = ("postgres", "postmaster")
RESET_HINT = ("`gpuaware up --reset` with the options you want forgets the record and starts over (it stops "
              "what still runs and deletes stack.json, the NATS credentials and the database logins' "
              "passwords; the JetStream stores and the database are kept)")


@dataclass(frozen=True)
class StackState:
    """How `up` started the stack (or found it external) and what runs; serialised to stack.json."""

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
    """a NATS cluster's nodes (``name``, ``pid``, ``started_at``, ``port``, ``monitor_port``,
    ``cluster_port``, ``data_dir``); empty for a single server"""
    nats_started_at: float | None = None
    """when the nats-server of `nats_pid` started (seconds since the epoch): tells it from a process
    that reuses its PID"""
    postgres_started_at: float | None = None
    """when the PostgreSQL of `postgres_pid` started (as `nats_started_at`)"""
    nats_data_dir: str = "nats"
    """NATS's folder, relative to the stack's data folder (a cluster's nodes in ``n0``, ``n1``... below it)"""
    postgres_data_dir: str = "postgres"
    """PostgreSQL's data folder, relative to the stack's data folder"""

    @property
    def nats_external(self) -> bool:
        return self.nats_pid is None and not self.nats_nodes

    @property
    def postgres_external(self) -> bool:
        return self.postgres_pid is None

    @property
    def nats_tls(self) -> bool:
        return bool(self.nats_tls_ca)

    @property
    def cluster_size(self) -> int:
        """NATS nodes: 1 for a single server (or an external one)"""
        return len(self.nats_nodes) or 1


@dataclass(frozen=True)
class Stack:
    state: StackState
    reused: bool
    """the stack was (partly) running: nothing of it was started from scratch"""
    restarted: tuple[str, ...] = ()
    """servers of the recorded stack started again ("nats", "nats-n0", "postgres")"""


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


def _save(data_dir: Path, state: StackState) -> None:
    _state_file(data_dir).write_text(json.dumps(asdict(state), indent=2))


def _servers(state: StackState) -> dict[str, tuple[str, int]]:
    """Our servers: name -> (RUNNING / STOPPED / REUSED, recorded PID). External servers are not ours
    to judge: absent."""
    out = {}
    for node in state.nats_nodes:
        pid = int(node["pid"])
        out[f"nats-{node['name']}"] = (pid_state(pid, started=node.get("started_at"), names=NATS_EXECUTABLES), pid)
    if state.nats_pid is not None:
        out["nats"] = (pid_state(state.nats_pid, started=state.nats_started_at, names=NATS_EXECUTABLES),
                       state.nats_pid)
    if state.postgres_pid is not None:
        out["postgres"] = (pid_state(state.postgres_pid, started=state.postgres_started_at,
                                     names=POSTGRES_EXECUTABLES), state.postgres_pid)
    return out


def _alive(state: StackState) -> dict[str, bool]:
    return {name: how == RUNNING for name, (how, _pid) in _servers(state).items()}


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


def stack_servers(data_dir: Path = DEFAULT_DATA_DIR) -> tuple[StackState | None, dict[str, tuple[str, int]]]:
    """The recorded state and, for each server we started, (`RUNNING` / `STOPPED` / `REUSED`, its
    recorded PID): `REUSED` is a server that died and whose PID another process now holds."""
    state = _load(Path(data_dir).resolve())
    return state, (_servers(state) if state is not None else {})


def describe(state: StackState) -> str:
    """How the recorded stack was started, in the `up` options that start it so."""
    if state.nats_external:
        nats = f"NATS external ({state.nats_url})"
    else:
        flags = [f for f, on in (("--auth", state.nats_auth), ("--tls", state.nats_tls)) if on]
        how = "with " + " ".join(flags) if flags else "without --auth or --tls"
        if state.nats_nodes:
            nats = (f"NATS as a {len(state.nats_nodes)}-node cluster (--nats-cluster {len(state.nats_nodes)}) {how} "
                    "on ports " + ", ".join(str(n["port"]) for n in state.nats_nodes))
        else:
            nats = f"NATS {how} on port {state.nats_port}"
    pg = "PostgreSQL external" if state.postgres_external else f"PostgreSQL on port {state.postgres_port}"
    return f"{nats}, {pg}"


def _contradictions(state: StackState, *, nats_port: int | None, pg_port: int | None, auth: bool | None,
                    tls: bool | None, nats_nodes: int | None) -> list[str]:
    """The options asked of `up` that the recorded stack was not started with (None: not asked; port 0:
    any port)."""
    out = []
    if not state.nats_external:
        if auth is not None and auth != state.nats_auth:
            out.append("--auth" if auth else "--no-auth")
        if tls is not None and tls != state.nats_tls:
            out.append("--tls" if tls else "--no-tls")
        if nats_nodes is not None and nats_nodes != state.cluster_size:
            out.append(f"--nats-cluster {nats_nodes}")
        if nats_port and not state.nats_nodes and nats_port != state.nats_port:
            out.append(f"--nats-port {nats_port}")
    if pg_port and not state.postgres_external and pg_port != state.postgres_port:
        out.append(f"--pg-port {pg_port}")
    return out


def stack_up(data_dir: Path = DEFAULT_DATA_DIR, *, nats_port: int | None = None, pg_port: int | None = None,
             env: dict[str, str] | None = None, auth: bool | None = None, tls: bool | None = None,
             nats_nodes: int | None = None, auth_clusters: Sequence[str] | None = None,
             as_recorded: bool = False) -> Stack:
    """Start (or reuse, or start again as recorded) NATS + PostgreSQL under `data_dir`; honours
    NATS_URL / DATABASE_URL for a new stack.

    Every option left None means "as recorded" for a stack `data_dir` records, and the default for a new
    one (ports 4222 / 5433, no auth, no TLS, one NATS server); a port of 0 takes a free one. An option
    that contradicts the record raises `StackError` with the reason (see the module docstring), unless
    `as_recorded`: then the options only shape a new stack (the demo's, whose defaults are not a
    request). `auth` starts NATS with per-service users; `auth_clusters`: the clusters whose services
    may use an auth server (default: ``default``; None keeps a recorded stack's). `nats_nodes` > 1
    starts a NATS cluster of that many nodes (`nats_port` is then ignored: every node takes free
    ports)."""
    if nats_nodes is not None and (nats_nodes < 1 or nats_nodes > 9 or (nats_nodes > 1 and nats_nodes % 2 == 0)):
        raise StackError(f"a NATS cluster needs an odd number of nodes from 1 to 9 (a majority must survive "
                         f"a lost node), not {nats_nodes}")
    data_dir = Path(data_dir).resolve()
    recorded = _load(data_dir)
    if recorded is not None:
        servers = _servers(recorded)
        running = all(how == RUNNING for how, _pid in servers.values())
        asked = [] if as_recorded else _contradictions(recorded, nats_port=nats_port, pg_port=pg_port, auth=auth,
                                                       tls=tls, nats_nodes=nats_nodes)
        if asked:
            how = ("runs" if running else "is stopped" if not any(h == RUNNING for h, _ in servers.values())
                   else "partly runs")
            raise StackError(
                f"the stack in {data_dir} was started with {describe(recorded)} and {how}; {' '.join(asked)} "
                f"contradicts that, so it is not {'reused' if running else 'started again'} otherwise. Run "
                f"`gpuaware up` without {'it' if len(asked) == 1 else 'them'} to "
                f"{'reuse it' if running else 'start it again as it was'}, or {RESET_HINT}")
        if running:
            return Stack(state=recorded, reused=True)
        return _revive(data_dir, recorded, {name: how == RUNNING for name, (how, _pid) in servers.items()},
                       auth_clusters=auth_clusters)
    return _start(data_dir, nats_port=DEFAULT_NATS_PORT if nats_port is None else nats_port,
                  pg_port=DEFAULT_PG_PORT if pg_port is None else pg_port,
                  env=dict(os.environ if env is None else env), auth=bool(auth), tls=bool(tls),
                  nats_nodes=nats_nodes or 1, auth_clusters=auth_clusters)


def _start(data_dir: Path, *, nats_port: int, pg_port: int, env: dict[str, str], auth: bool, tls: bool,
           nats_nodes: int, auth_clusters: Sequence[str] | None) -> Stack:
    """A new stack (nothing recorded): start it and record how."""
    data_dir.mkdir(parents=True, exist_ok=True)
    nats: NatsProcess | None = None
    cluster = None
    pg: PostgresProcess | None = None
    try:
        if not env.get("NATS_URL") and nats_nodes > 1:
            cluster = start_nats_cluster(data_dir / "nats", size=nats_nodes, detach=True, auth=auth, tls=tls,
                                         auth_clusters=auth_clusters)
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
        {"name": f"n{i}", "pid": n.pid, "started_at": started_at(n.pid), "port": n.port,
         "monitor_port": n.monitor_port, "cluster_port": cluster.cluster_ports[i], "data_dir": f"nats/n{i}"}
        for i, n in enumerate(cluster.nodes)]
    state = StackState(
        nats_url=env.get("NATS_URL") or (nats.url if nats else ",".join(cluster.urls) if cluster else ""),
        database_url=env.get("DATABASE_URL") or (pg.url if pg else ""),
        nats_pid=nats.pid if nats else None,
        nats_port=nats.port if nats else None,
        nats_monitor_port=nats.monitor_port if nats else None,
        postgres_pid=pg.pid if pg else None,
        postgres_port=pg.port if pg else None,
        nats_auth=bool(nats and nats.auth) or (cluster is not None and auth),
        nats_tls_ca=str(nats.tls_ca) if nats and nats.tls_ca else str(cluster.tls_ca) if cluster and cluster.tls_ca
        else "",
        nats_nodes=nodes,
        nats_started_at=started_at(nats.pid) if nats else None,
        postgres_started_at=started_at(pg.pid) if pg else None,
    )
    _save(data_dir, state)
    return Stack(state=state, reused=False)


def _again(what: str, exc: StackError) -> StackError:
    return StackError(f"cannot start {what} again as stack.json records it: {exc}\n(free what stands in its way "
                      f"and run `gpuaware up` again, or {RESET_HINT})")


def _revive(data_dir: Path, state: StackState, alive: dict[str, bool],
            auth_clusters: Sequence[str] | None = None) -> Stack:
    """Start again, where they ran and as they were started, the servers of ours that died; the record is
    saved after each one, so that a failure leaves no running server unrecorded."""
    restarted: list[str] = []
    nats_dir = data_dir / state.nats_data_dir
    if state.nats_nodes:
        nodes = [dict(n) for n in state.nats_nodes]
        ports = [int(n["cluster_port"]) for n in nodes]
        for i, node in enumerate(nodes):
            if alive.get(f"nats-{node['name']}") is False:
                wait_port_free(int(node["port"]))  # the dead node's port can linger a moment
                wait_port_free(int(node["monitor_port"]))
                try:
                    proc = start_cluster_node(nats_dir, i, cluster_ports=ports, port=int(node["port"]),
                                              monitor_port=int(node["monitor_port"]), detach=True,
                                              auth=state.nats_auth, tls=state.nats_tls, auth_clusters=auth_clusters)
                except StackError as exc:
                    raise _again(f"NATS node {node['name']}", exc) from None
                node["pid"], node["started_at"] = proc.pid, started_at(proc.pid)
                state = replace(state, nats_nodes=[dict(n) for n in nodes],
                                nats_tls_ca=str(proc.tls_ca) if proc.tls_ca else "")
                _save(data_dir, state)
                restarted.append(f"nats-{node['name']}")
    if alive.get("nats") is False:
        for port in (state.nats_port, state.nats_monitor_port):
            if port:
                wait_port_free(port)
        try:
            nats = start_nats(nats_dir, port=state.nats_port or 0, monitor_port=state.nats_monitor_port or 0,
                              detach=True, auth=state.nats_auth, tls=state.nats_tls, auth_clusters=auth_clusters)
        except StackError as exc:
            raise _again("NATS", exc) from None
        state = replace(state, nats_pid=nats.pid, nats_started_at=started_at(nats.pid), nats_url=nats.url,
                        nats_tls_ca=str(nats.tls_ca) if nats.tls_ca else "")
        _save(data_dir, state)
        restarted.append("nats")
    if alive.get("postgres") is False:
        if state.postgres_port:
            wait_port_free(state.postgres_port)
        _drop_stale_lock(data_dir / state.postgres_data_dir, state.postgres_pid)
        try:
            pg = start_postgres(data_dir / state.postgres_data_dir, port=state.postgres_port or 0)
        except StackError as exc:
            raise _again("PostgreSQL", exc) from None
        state = replace(state, postgres_pid=pg.pid, postgres_started_at=started_at(pg.pid), database_url=pg.url)
        _save(data_dir, state)
        restarted.append("postgres")
    return Stack(state=state, reused=any(alive.values()), restarted=tuple(restarted))


def _drop_stale_lock(pg_dir: Path, recorded_pid: int | None) -> None:
    """A killed postmaster leaves its lock file naming its PID; PostgreSQL refuses to start while a live
    process holds that PID, so when the lock names the recorded PID (checked: no longer our PostgreSQL)
    the lock is stale and goes."""
    lock = pg_dir / "postmaster.pid"
    try:
        pid = int(lock.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    if pid == recorded_pid:
        lock.unlink(missing_ok=True)


def stack_credentials(data_dir: Path = DEFAULT_DATA_DIR) -> dict[str, tuple[str, str]]:
    """identity -> (user, password) of the stack's NATS (started with `auth=True`)."""
    return credentials(Path(data_dir).resolve() / "nats")


def _stop(data_dir: Path, state: StackState) -> list[str]:
    """Stop the recorded servers that are still the processes recorded (a reused PID is left alone)."""
    servers = _servers(state)
    stopped: list[str] = []
    if servers.get("postgres", (STOPPED, 0))[0] == RUNNING and state.postgres_pid is not None:
        PostgresProcess(port=state.postgres_port or 0, data_dir=data_dir / state.postgres_data_dir,
                        pid=state.postgres_pid).stop()
        stopped.append("postgres")
    for name, (how, pid) in servers.items():
        if name != "postgres" and how == RUNNING:
            terminate(pid, None, 10.0)
            stopped.append(name)
    return stopped


def stack_down(data_dir: Path = DEFAULT_DATA_DIR) -> list[str]:
    """Stop what `up` started (each PID verified first) and forget the stack: its record and its passwords
    (the JetStream stores and the database stay; the next `up` starts with the options it is given).
    Returns what was stopped (empty when nothing ran)."""
    data_dir = Path(data_dir).resolve()
    state = _load(data_dir)
    if state is None:
        return []
    stopped = _stop(data_dir, state)
    _forget(data_dir, state)
    return stopped


def _forget(data_dir: Path, state: StackState | None) -> list[Path]:
    """Delete the record and the passwords (they do not outlive the stack that used them); returns what
    was deleted."""
    nats_dir = data_dir / (state.nats_data_dir if state is not None else "nats")
    deleted = [nats_dir / name for name in forget_credentials(nats_dir)]
    for node in state.nats_nodes if state is not None else []:  # they hold the route password
        config = data_dir / str(node.get("data_dir", "")) / NODE_CONFIG
        if node.get("data_dir") and config.exists():
            config.unlink()
            deleted.append(config)
    if forget_database_passwords(data_dir):
        deleted.append(data_dir / LOGINS)
    if _state_file(data_dir).exists():
        _state_file(data_dir).unlink()
        deleted.append(_state_file(data_dir))
    return deleted


def stack_reset(data_dir: Path = DEFAULT_DATA_DIR) -> tuple[list[str], list[Path]]:
    """Forget how the stack in `data_dir` was started, to start it over otherwise (`up --reset`): stops
    what of it still runs (PIDs verified) and deletes stack.json, the NATS credentials and the database
    logins' passwords. The JetStream stores and the database are kept. Returns (stopped, deleted)."""
    data_dir = Path(data_dir).resolve()
    state = _load(data_dir)
    stopped = _stop(data_dir, state) if state is not None else []
    return stopped, _forget(data_dir, state)


__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_NATS_PORT", "DEFAULT_PG_PORT", "REUSED", "RUNNING", "STOPPED", "Stack",
           "StackState", "describe", "stack_credentials", "stack_down", "stack_health", "stack_reset",
           "stack_servers", "stack_status", "stack_up"]
