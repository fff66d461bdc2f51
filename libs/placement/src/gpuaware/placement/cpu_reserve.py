"""GpuNodeCpuReserve: keep part of a GPU node's CPU for GPU pods (a Filter plugin).

Why: a GPU that no pod can use because its node's CPU is gone is the cheapest waste to avoid and the
most common one in shared clusters (Alibaba's openb trace has many CPU-only pods; FGD and WasteGradient
count such "stranded" GPUs as waste after the fact). Stock Kubernetes lets CPU-only pods fill GPU
nodes first. This filter stops them at a line: on a node with GPUs, a CPU-only pod passes only when it
leaves at least `fraction` of the node's CPU free. GPU pods and GPU-less nodes are not affected.

It is also the example plugin of libs/placement/README.md: a class with a `name` and one method per
extension point it implements, typed arguments (`args.CpuReserveArgs`), one line in the registry's
table, a test. It reads only its own node's columns, so it declares `per_node` and the cached
scheduler keeps reusing its verdicts for nodes that did not change.

    {"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"},
                {"name": "gpu-node-cpu-reserve", "args": {"fraction": 0.25}}],
     "score": [{"name": "waste-gradient", "weight": 1000}], "gpu": "waste-gradient"}
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import CycleState, FilterPlugin
from gpuaware.placement.model import PodRequest


class GpuNodeCpuReserve(FilterPlugin):
    """CPU-only pods leave `fraction` of a GPU node's CPU free (0.25 of 96 cores: 24 cores stay free)."""

    name: ClassVar[str] = "gpu-node-cpu-reserve"
    per_node: ClassVar[bool] = True

    def __init__(self, fraction: float = 0.25) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"gpu-node-cpu-reserve: fraction must be in 0..1, got {fraction}")
        self.fraction = fraction

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        if pod.num_gpu > 0:
            return np.ones(snap.num_nodes, dtype=bool)
        left = snap.cpu_free - pod.cpu_milli
        keep: np.ndarray = (snap.gpu_count == 0) | (left >= self.fraction * snap.cpu_capacity)
        return keep
