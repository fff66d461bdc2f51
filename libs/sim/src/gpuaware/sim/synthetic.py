"""Synthetic clusters and pod traces shaped like openb, for tests and scale benchmarks.

Nothing here is derived from the research-only trace files at run time: the shapes (node types,
request mix) are small hand-written tables that resemble the published openb statistics, so tests
and the 10,000-node latency check run anywhere.
"""

from __future__ import annotations

import numpy as np

from gpuaware.placement import NodeSpec, PodRequest

# (GPU model, GPUs, CPU milli, memory MiB, weight)
NODE_TYPES = (
    ("G2", 8, 96_000, 393_216, 0.45),
    ("T4", 2, 104_000, 524_288, 0.32),
    ("P100", 2, 64_000, 262_144, 0.10),
    ("G3", 8, 128_000, 786_432, 0.04),
    ("V100M16", 4, 32_000, 131_072, 0.03),
    ("V100M32", 8, 96_000, 786_432, 0.03),
    ("T4", 4, 96_000, 393_216, 0.03),
)

# (num_gpu, gpu_milli or None for "sharing share drawn from SHARES", CPU milli choices, weight)
POD_TYPES = (
    (0, 0, (2_000, 4_000, 8_000, 12_500, 16_000), 0.13),
    (1, None, (2_000, 4_000, 6_000, 8_000), 0.37),
    (1, 1000, (4_000, 8_000, 12_000, 16_000), 0.45),
    (2, 1000, (16_000, 24_000), 0.02),
    (4, 1000, (32_000, 48_000), 0.02),
    (8, 1000, (64_000, 88_000), 0.01),
)
SHARES = (810, 470, 320, 650, 230, 460, 590, 160, 550, 220, 500, 250)


def synthetic_nodes(num_nodes: int, seed: int = 0) -> list[NodeSpec]:
    rng = np.random.default_rng(seed)
    w = np.array([t[4] for t in NODE_TYPES])
    kinds = rng.choice(len(NODE_TYPES), size=num_nodes, p=w / w.sum())
    nodes = []
    for i, k in enumerate(kinds):
        model, gpus, cpu, mem, _ = NODE_TYPES[k]
        nodes.append(NodeSpec(f"syn-node-{i:05d}", cpu, mem, gpus, model))
    return nodes


def synthetic_pods(
    num_pods: int, seed: int = 0, gpu_types: tuple[str, ...] = (), typed_fraction: float = 0.0
) -> list[PodRequest]:
    """`typed_fraction` of GPU pods are constrained to one model drawn from `gpu_types`."""
    rng = np.random.default_rng(seed)
    w = np.array([t[3] for t in POD_TYPES])
    kinds = rng.choice(len(POD_TYPES), size=num_pods, p=w / w.sum())
    pods = []
    for i, k in enumerate(kinds):
        num, milli, cpus, _ = POD_TYPES[k]
        if milli is None:
            milli = int(rng.choice(SHARES))
        cpu = int(rng.choice(cpus))
        types: tuple[str, ...] = ()
        if num and gpu_types and rng.random() < typed_fraction:
            types = (str(rng.choice(gpu_types)),)
        pods.append(PodRequest(f"syn-pod-{i:05d}", cpu, cpu // 250, num, milli, gpu_types=types))
    return pods
