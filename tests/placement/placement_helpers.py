"""Tiny clusters for the placement tables: build nodes, then put them into a given state."""

from __future__ import annotations

from gpuaware.placement import Cluster, NodeSpec, PodRequest

_filler = 0


def node(name: str, gpus: int = 2, model: str = "T4", cpu: int = 32_000, mem: int = 131_072) -> NodeSpec:
    return NodeSpec(name, cpu, mem, gpus, model if gpus else "")


def occupy(cluster: Cluster, node_name: str, gpu_used: dict[int, int] | None = None, cpu_used: int = 0,
           whole: tuple[int, ...] = ()) -> None:
    """Reserve filler pods so that GPU g of the node has gpu_used[g] milli taken, `whole` GPUs are taken
    by one whole-GPU pod, and `cpu_used` milli CPU is taken."""
    global _filler
    i = cluster.index[node_name]
    for g, milli in (gpu_used or {}).items():
        _filler += 1
        cluster.reserve(PodRequest(f"filler-{_filler}", 0, 0, 1, milli), i, (g,))
    if whole:
        _filler += 1
        cluster.reserve(PodRequest(f"filler-{_filler}", 0, 0, len(whole), 1000), i, whole)
    if cpu_used:
        _filler += 1
        cluster.reserve(PodRequest(f"filler-{_filler}", cpu_used, 0), i, ())


def share(name: str = "p", milli: int = 500, cpu: int = 4_000, mem: int = 1_024, types: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(name, cpu, mem, 1, milli, gpu_types=types)


def whole(name: str = "p", gpus: int = 1, cpu: int = 4_000, mem: int = 1_024, types: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(name, cpu, mem, gpus, 1000, gpu_types=types)


def cpu_only(name: str = "p", cpu: int = 4_000, mem: int = 1_024) -> PodRequest:
    return PodRequest(name, cpu, mem)
