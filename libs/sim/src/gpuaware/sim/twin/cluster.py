"""The twin's nodes: the openb cluster when its node list is at hand, else a built-in mixed cluster.

Nodes are ``gpuaware.placement.NodeSpec`` - the vocabulary placement already speaks (GPU model
names from the one GPU catalog, ``gpuaware.schemas.gpus.GPU_CATALOG``, NVLink island and NUMA node
per GPU), so a ledger rebuilt from the twin's snapshot needs no translation.

``default_cluster(n)`` is a heterogeneous cluster of the kinds a real GPU fleet mixes
(``NODE_KINDS``): NVSwitch boards (one NVLink island of 8), PCIe A100s with NVLink bridges (islands
of two), V100 hybrid cube meshes (two fully connected quads), and PCIe-only T4/L4 inference nodes,
two NUMA nodes each. Counts per kind are apportioned by weight with largest remainders, so a small
cluster still has every kind and the same ``n`` always gives the same nodes.

``openb_cluster(path)`` reads the openb GPU node list (1,213 nodes, 6,212 GPUs). The trace says
nothing about topology, so NVLink-capable models get the usual board layout (whole-node island up
to 4 GPUs, two quads on 8-GPU V100/P100 boards, whole node on A100/H100) and the rest none.

The same catalog record gives the physical envelope ``gpuaware.gpu`` simulates for telemetry (power,
clocks, memory), so the twin's truth and its telemetry agree on every disclosed model's memory.
openb's undisclosed G1/G2/G3 are simulated as the catalog's stand-in for them (``stand_in``); the
twin's truth keeps the trace's model name and no memory limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuaware.placement import NodeSpec
from gpuaware.schemas import find_gpu_model
from gpuaware.sim.traces import load_nodes, shared_data_dir

__all__ = [
    "NODE_KINDS",
    "NodeKind",
    "default_cluster",
    "gpu_memory_mib",
    "openb_cluster",
    "openb_node_list",
]

def gpu_memory_mib(model: str) -> int:
    """Memory of one GPU of ``model`` as the GPU catalog knows it (0 = undisclosed or unknown)."""
    m = find_gpu_model(model)
    return m.memory_mib or 0 if m is not None else 0


@dataclass(frozen=True, slots=True)
class NodeKind:
    """One kind of node of the default cluster."""

    key: str
    """short name used in node names: ``twin-h100-000``"""
    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    islands: tuple[int, ...]
    """NVLink island per GPU (-1 = no NVLink peer)"""
    weight: float


NODE_KINDS: tuple[NodeKind, ...] = (
    NodeKind("h100", "H100", 8, 224_000, 2_097_152, (0,) * 8, 2.0),
    NodeKind("a100", "A100", 8, 256_000, 1_048_576, (0,) * 8, 3.0),
    NodeKind("a100pcie", "A100", 4, 128_000, 524_288, (0, 0, 1, 1), 2.0),
    NodeKind("v100", "V100M32", 8, 80_000, 524_288, (0, 0, 0, 0, 1, 1, 1, 1), 2.0),
    NodeKind("t4", "T4", 4, 96_000, 393_216, (-1,) * 4, 3.0),
    NodeKind("l4", "L4", 8, 96_000, 393_216, (-1,) * 8, 2.0),
)


def _numa(gpus: int) -> tuple[int, ...]:
    """First half of the GPUs on socket 0, second half on socket 1."""
    return tuple(i * 2 // gpus if gpus > 1 else 0 for i in range(gpus))


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Largest-remainder apportionment, at least one of each kind when ``total`` allows."""
    if total < len(weights):
        order = sorted(range(len(weights)), key=lambda k: (-weights[k], k))
        return [1 if k in order[:total] else 0 for k in range(len(weights))]
    s = sum(weights)
    exact = [1 + (total - len(weights)) * w / s for w in weights]
    counts = [int(x) for x in exact]
    rest = total - sum(counts)
    for k in sorted(range(len(weights)), key=lambda k: (-(exact[k] - counts[k]), k))[:rest]:
        counts[k] += 1
    return counts


def default_cluster(nodes: int = 16, *, prefix: str = "twin", kinds: Sequence[NodeKind] = NODE_KINDS,
                    nodes_per_rack: int = 8) -> tuple[NodeSpec, ...]:
    """``nodes`` nodes mixed by ``kinds`` weights (16 -> 3 each of H100x8, A100x8, A100x4 PCIe and T4x4,
    2 each of V100x8 and L4x8: 104 GPUs)."""
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, got {nodes}")
    out: list[NodeSpec] = []
    for kind, count in zip(kinds, _apportion(nodes, [k.weight for k in kinds]), strict=True):
        for j in range(count):
            i = len(out)
            out.append(NodeSpec(
                name=f"{prefix}-{kind.key}-{j:03d}", cpu_milli=kind.cpu_milli, memory_mib=kind.memory_mib,
                num_gpu=kind.gpus, gpu_model=kind.model, rack=f"rack-{i // nodes_per_rack:02d}", zone="zone-a",
                nvlink_islands=kind.islands, numa_nodes=_numa(kind.gpus),
                labels=(("gpuaware.io/node-kind", kind.key),),
            ))
    return tuple(out)


def _board_islands(model: str, gpus: int) -> tuple[int, ...]:
    m = find_gpu_model(model)
    if m is None or not m.nvlink or gpus < 2:
        return ()
    if model in ("A100", "H100") or gpus <= 4:
        return (0,) * gpus
    return tuple(i * 2 // gpus for i in range(gpus))  # two fully connected halves (hybrid cube mesh)


def openb_node_list(shared_data: Path | None = None) -> Path:
    """Where the openb GPU node list lives (GPUAWARE_SHARED_DATA or ../shared/data)."""
    root = shared_data if shared_data is not None else shared_data_dir()
    return root / "openb" / "openb_node_list_gpu_node.csv"


def openb_cluster(path: Path | str | None = None, *, nodes_per_rack: int = 16) -> tuple[NodeSpec, ...]:
    """The openb GPU nodes (reads the node list: the only I/O of this module), with board topology."""
    specs = load_nodes(openb_node_list() if path is None else path)
    out = []
    for i, s in enumerate(specs):
        if s.num_gpu == 0:
            continue
        out.append(NodeSpec(
            name=s.name, cpu_milli=s.cpu_milli, memory_mib=s.memory_mib, num_gpu=s.num_gpu,
            gpu_model=s.gpu_model, rack=f"rack-{i // nodes_per_rack:03d}", zone="zone-a",
            nvlink_islands=_board_islands(s.gpu_model, s.num_gpu), numa_nodes=_numa(s.num_gpu),
        ))
    return tuple(out)
