"""A NATS JetStream cluster on loopback ports: how gpuaware grows past one machine, on NATS's own
clustering, tried here without a second machine.

Each node is a real nats-server (`start_nats`) with its own port, data folder and server name, and
routes to the others; JetStream places R3 streams on three nodes and keeps them available while a
majority runs. `NatsCluster.urls` is what clients connect to (every node: a client moves to another
when its node dies). Used by the fault tests, where one node is killed mid-replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.nats import NatsProcess, start_nats
from gpuaware.devstack.ports import free_port

__all__ = ["NatsCluster", "start_cluster_node", "start_nats_cluster"]

CLUSTER_NAME = "gpuaware"


@dataclass
class NatsCluster:
    nodes: list[NatsProcess]
    cluster_ports: list[int] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

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


def start_nats_cluster(data_dir: Path, *, size: int = 3, timeout: float = 30.0, detach: bool = False) -> NatsCluster:
    """Start ``size`` routed nats-servers with JetStream under ``data_dir/n<i>`` (``detach``: in sessions
    of their own, to outlive the launcher, as `gpuaware up --nats-cluster` runs them)."""
    if size < 1:
        raise StackError("a NATS cluster needs at least one node")
    data_dir = Path(data_dir)
    ports = [free_port() for _ in range(size)]
    nodes: list[NatsProcess] = []
    try:
        for i in range(size):
            nodes.append(start_cluster_node(data_dir, i, cluster_ports=ports, timeout=timeout, detach=detach))
    except StackError:
        for n in nodes:
            n.stop()
        raise
    return NatsCluster(nodes=nodes, cluster_ports=ports)


def start_cluster_node(data_dir: Path, i: int, *, cluster_ports: list[int], port: int = 0, monitor_port: int = 0,
                       timeout: float = 30.0, detach: bool = False) -> NatsProcess:
    """Node ``i`` of the cluster whose route ports are ``cluster_ports``: started, or started again on
    its ports and data after it died (it rejoins and catches its streams up)."""
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
    extra = ("--server_name", f"n{i}", "--cluster_name", CLUSTER_NAME,
             "--cluster", f"nats://127.0.0.1:{cluster_ports[i]}", "--routes", routes)
    return start_nats(Path(data_dir) / f"n{i}", port=port, monitor_port=monitor_port, extra_args=extra,
                      timeout=timeout, detach=detach)
