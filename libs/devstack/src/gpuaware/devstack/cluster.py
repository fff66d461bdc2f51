"""A NATS JetStream cluster on loopback ports: how gpuaware grows past one machine, on NATS's own
clustering, tried here without a second machine.

Each node is a real nats-server (`start_nats`) with its own port, data folder and server name, and
routes to the others; JetStream places R3 streams on three nodes and keeps them available while a
majority runs. `NatsCluster.urls` is what clients connect to (every node: a client moves to another
when its node dies). Used by the fault tests, where one node is killed mid-replay.

`auth=True` and `tls=True` give every node the same users and the same certificates, as
`start_nats(auth=True, tls=True)` gives one server: the users and their passwords are drawn once for
the cluster (``auth.conf`` and ``credentials.json`` in the cluster's folder, so `credentials(data_dir)`
reads them as for one server), and one throwaway CA in ``<data_dir>/tls`` signs the certificate all
nodes serve. The routes between nodes are guarded by the same means: with auth, a route user whose
password is drawn once (``route-credentials.json``, 0600) and which every node's routes present; with
TLS, the routes speak TLS verified both ways against that CA (nats-server requires the dialling node's
certificate too). A node's configuration (``n<i>/node.conf``, 0600: it holds the route password) is
written again at each start, from those shared files, so a node started again after a crash rejoins
with the same users, passwords and certificates.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.nats import (
    AUTH_CONFIG,
    ROUTE_CREDENTIALS,
    NatsProcess,
    credentials,
    start_nats,
    with_store_limit,
    write_auth_config,
    write_private,
)
from gpuaware.devstack.ports import free_port
from gpuaware.devstack.tls import make_server_certificates

__all__ = ["NatsCluster", "route_credentials", "start_cluster_node", "start_nats_cluster"]

CLUSTER_NAME = "gpuaware"
NODE_CONFIG = "node.conf"
"""a node's own configuration, in its folder (its server name, routes, and the shared users and TLS)"""
ROUTE_USER = "route"
ROUTE_TLS_TIMEOUT_S = 5.0
"""the routes' TLS handshake limit: nats-server's default (2 s) is short for nodes on loaded cores"""


@dataclass
class NatsCluster:
    nodes: list[NatsProcess]
    cluster_ports: list[int] = field(default_factory=list)
    data_dir: Path | None = None
    """the cluster's folder (the nodes' folders, the shared credentials and CA)"""

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def tls_ca(self) -> Path | None:
        """the CA certificate clients verify every node with (None: the nodes speak plain NATS)"""
        return self.nodes[0].tls_ca if self.nodes else None

    def credentials(self) -> dict[str, tuple[str, str]]:
        """identity -> (user, password), the same on every node (`start_nats_cluster(auth=True)`)."""
        if self.data_dir is None:
            raise StackError("the cluster's folder is unknown: no credentials to read")
        return credentials(self.data_dir)

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash: no goodbye to its peers)."""
        self.nodes[i].kill()

    def restart(self, i: int) -> NatsProcess:
        """Start node ``i`` again on its ports and data (it rejoins and catches its streams up)."""
        self.nodes[i] = self.nodes[i].restart()
        return self.nodes[i]

    def stop(self) -> None:
        for n in self.nodes:
            if n.alive():
                n.stop()


def start_nats_cluster(data_dir: Path, *, size: int = 3, timeout: float = 30.0, detach: bool = False,
                       auth: bool = False, tls: bool = False,
                       auth_clusters: Sequence[str] | None = None) -> NatsCluster:
    """Start ``size`` routed nats-servers with JetStream under ``data_dir/n<i>`` (``detach``: in sessions
    of their own, to outlive the launcher, as `gpuaware up --nats-cluster` runs them). ``auth`` /
    ``tls``: every node requires the per-service users / speaks TLS only, routes included (see the
    module docstring); ``auth_clusters`` as `start_nats`'s."""
    if size < 1:
        raise StackError("a NATS cluster needs at least one node")
    data_dir = Path(data_dir)
    if auth:  # drawn (or hashed) once for all the nodes
        write_auth_config(data_dir, clusters=auth_clusters)
    ports = [free_port() for _ in range(size)]
    nodes: list[NatsProcess] = []
    try:
        for i in range(size):
            nodes.append(start_cluster_node(data_dir, i, cluster_ports=ports, timeout=timeout, detach=detach,
                                            auth=auth, tls=tls))
    except StackError:
        for n in nodes:
            n.stop()
        raise
    return NatsCluster(nodes=nodes, cluster_ports=ports, data_dir=data_dir)


def route_credentials(data_dir: Path) -> tuple[str, str]:
    """The route user and password of the cluster in ``data_dir``: drawn the first time, then kept."""
    path = Path(data_dir) / ROUTE_CREDENTIALS
    try:
        raw = json.loads(path.read_text())
        return str(raw["user"]), str(raw["password"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    write_private(path, json.dumps({"user": ROUTE_USER, "password": password}) + "\n")
    return ROUTE_USER, password


def _node_config(data_dir: Path, i: int, cluster_ports: Sequence[int], *, auth: bool, tls: bool,
                 auth_clusters: Sequence[str] | None) -> Path:
    """Write node ``i``'s configuration: its name and routes, and with ``auth`` / ``tls`` the cluster's
    users, route user and certificates (see the module docstring)."""
    config: dict[str, Any] = {}
    if auth:
        if auth_clusters is not None or not (data_dir / AUTH_CONFIG).exists():
            write_auth_config(data_dir, clusters=auth_clusters)
        config = json.loads((data_dir / AUTH_CONFIG).read_text())
    cluster: dict[str, Any] = {"name": CLUSTER_NAME, "listen": f"127.0.0.1:{cluster_ports[i]}"}
    login = ""
    if auth:
        user, password = route_credentials(data_dir)
        cluster["authorization"] = {"user": user, "password": password}
        login = f"{user}:{password}@"
    cluster["routes"] = [f"nats://{login}127.0.0.1:{p}" for p in cluster_ports]
    if tls:
        files = make_server_certificates(data_dir / "tls")
        cluster["tls"] = {"cert_file": str(files.cert), "key_file": str(files.key), "ca_file": str(files.ca),
                          "timeout": ROUTE_TLS_TIMEOUT_S}
    path = data_dir / f"n{i}" / NODE_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, with_store_limit({**config, "server_name": f"n{i}", "cluster": cluster}))
    return path


def start_cluster_node(data_dir: Path, i: int, *, cluster_ports: list[int], port: int = 0, monitor_port: int = 0,
                       timeout: float = 30.0, detach: bool = False, auth: bool = False, tls: bool = False,
                       auth_clusters: Sequence[str] | None = None) -> NatsProcess:
    """Node ``i`` of the cluster whose route ports are ``cluster_ports``: started, or started again on
    its ports and data after it died (it rejoins and catches its streams up), with the cluster's users
    (``auth``) and certificates (``tls``)."""
    data_dir = Path(data_dir)
    config = _node_config(data_dir, i, cluster_ports, auth=auth, tls=tls, auth_clusters=auth_clusters)
    return start_nats(data_dir / f"n{i}", port=port, monitor_port=monitor_port, config_file=config, tls=tls,
                      tls_dir=data_dir / "tls" if tls else None, timeout=timeout, detach=detach)
