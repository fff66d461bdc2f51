"""Compile the engine's kernels before the first real decision needs them.

Why: the fragmentation kernels (frag_kernels.py) are compiled on first use, which takes seconds
when numba's disk cache is empty (a new container, a fresh /tmp). A placement
instance would pay that on its first pod, and a standby on the first pod after it takes over the
lease, when the queue is longest. `warm_up` decides four pods (sharing a GPU, one whole GPU, two
whole GPUs, CPU only) with the service's own profile on a two-node cluster whose GPUs carry
health, thermal and forecast signals, through the same framework and score cache the service
decides with, so every kernel that profile uses is compiled for the argument types it will be called
with; then the filters and the usable-GPU check once more on a copy of the rows, as preemption plans
call them. With numba's cache filled it is quick.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.cluster import Cluster
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.framework import CycleState, Decision, rows_view, usable_gpus
from gpuaware.placement.model import GPU_CATALOG, MILLI, NodeSpec, PodRequest

__all__ = ["warm_up"]

_PODS = (
    PodRequest("warm-up-share", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=500),
    PodRequest("warm-up-one", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=MILLI),
    PodRequest("warm-up-two", cpu_milli=2000, memory_mib=2048, num_gpu=2, gpu_milli=MILLI),
    PodRequest("warm-up-cpu", cpu_milli=500, memory_mib=512),
)


def warm_up(config: Mapping[str, Any]) -> float:
    """Decide the warm-up pods with profile `config` on a throwaway cluster; returns the seconds taken.
    Raises what building the profile raises (an invalid profile is the caller's to report)."""
    start = time.perf_counter()
    model = next(iter(GPU_CATALOG.values())).name
    cluster = Cluster([NodeSpec(f"warm-up-{i}", cpu_milli=32_000, memory_mib=131_072, num_gpu=4, gpu_model=model)
                       for i in range(2)])
    # one GPU with every kind of signal, so the signal scores compute rather than return their constant
    cluster.set_gpu_signals(0, 1, health_score=80.0, temp_c=70.0, power_frac=0.5, util_forecast=0.5)
    typical = TypicalPods.from_requests(_PODS)
    gpus = float(cluster.gpu_count.sum())
    framework = REGISTRY.build_framework(config, typical=typical, name="warm-up", capacity=lambda: gpus)
    for pod in _PODS:
        decision = framework.scheduler.schedule(pod, cluster.snapshot())
        if isinstance(decision, Decision):
            cluster.reserve(pod, decision.node, decision.gpus)
    # preemption plans check what-if copies of a few rows (writable arrays: their own compiled variants)
    view = rows_view(cluster.snapshot(), np.arange(cluster.num_nodes))
    filters = framework.scheduler.inner.filters
    for pod in _PODS:
        for f in filters:
            f.filter(CycleState(), pod, view)
        usable_gpus(pod, view)
    return time.perf_counter() - start
