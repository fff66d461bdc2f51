"""The built-in filters' per-node checks (framework.py: ResourcesFit, GpuFit, WholeGpuOnly), compiled.

Why compiled: the score cache (cache.py) filters only the nodes that changed since a request shape
was last seen, usually a handful. As numpy over those rows, GpuFit alone made about twenty array
calls (gathering six columns, comparing, reducing) whose fixed overhead was the cost; as loops over
the rows it is one call. The rules stay in one place: `usable_gpus`, `fit_gpus` and the filters all
call `_usable`.

The rule for one GPU (`_usable`): compute free >= what the pod takes on it (its share, or the whole
GPU), GPU memory free >= what it would hold there (`memory_held`, the one rule: reservations use it
too), and not DEGRADED unless the pod tolerates failure. Quarantined GPUs have no free compute.
"""

from __future__ import annotations

import numpy as np

from gpuaware.placement.compiled import kernel
from gpuaware.placement.model import MILLI

__all__ = ["gpu_fit", "memory_held", "resources_fit", "usable_rows", "whole_gpu_free"]


@kernel
def memory_held(total: int, mem_ask: int, milli: int) -> int:
    """GPU memory a pod holds on a GPU of `total` MiB: what it asks (`mem_ask`), else its compute share
    (`milli`) of the GPU's memory, rounded down; 0 where memory is not accounted (total 0)."""
    if mem_ask:
        return mem_ask if total > 0 else 0
    return total * milli // MILLI


@kernel
def _usable(n: int, g: int, gpu_free: np.ndarray, gpu_mem_free: np.ndarray, gpu_mem_total: np.ndarray,
            gpu_health: np.ndarray, need: int, mem_ask: int, milli: int, tolerates: bool, degraded: int) -> bool:
    if gpu_free[n, g] < need:
        return False
    if gpu_mem_free[n, g] < memory_held(gpu_mem_total[n, g], mem_ask, milli):
        return False
    return tolerates or gpu_health[n, g] != degraded


@kernel
def usable_rows(rows: np.ndarray, gpu_free: np.ndarray, gpu_mem_free: np.ndarray, gpu_mem_total: np.ndarray,
                gpu_health: np.ndarray, need: int, mem_ask: int, milli: int, tolerates: bool, degraded: int) -> np.ndarray:
    """[K, G] bool: the GPUs of `rows` that can take the pod (module doc)."""
    n_gpu = gpu_free.shape[1]
    out = np.zeros((rows.size, n_gpu), np.bool_)
    for k in range(rows.size):
        for g in range(n_gpu):
            out[k, g] = _usable(rows[k], g, gpu_free, gpu_mem_free, gpu_mem_total, gpu_health, need, mem_ask, milli,
                                tolerates, degraded)
    return out


@kernel
def gpu_fit(rows: np.ndarray, model_ok: np.ndarray, model_idx: np.ndarray, gpu_free: np.ndarray,
            gpu_mem_free: np.ndarray, gpu_mem_total: np.ndarray, gpu_health: np.ndarray, groups: np.ndarray,
            need: int, mem_ask: int, milli: int, tolerates: bool, degraded: int, num_gpu: int, share: bool,
            grouped: bool) -> np.ndarray:
    """[K] bool, GpuFit on `rows`: the node's model is allowed (`model_ok`, last entry: CPU-only nodes)
    and it has one usable GPU (a sharing pod) or `num_gpu` usable ones, all in one group of `groups`
    (NVLink island or NUMA node per GPU, -1: none) when `grouped`."""
    n_gpu = gpu_free.shape[1]
    cpu_row = model_ok.size - 1
    out = np.zeros(rows.size, np.bool_)
    ok = np.zeros(n_gpu, np.bool_)
    want = 1 if share else num_gpu
    for k in range(rows.size):
        n = rows[k]
        if not model_ok[model_idx[n] if model_idx[n] >= 0 else cpu_row]:
            continue
        count = 0
        for g in range(n_gpu):
            ok[g] = _usable(n, g, gpu_free, gpu_mem_free, gpu_mem_total, gpu_health, need, mem_ask, milli, tolerates,
                            degraded)
            count += ok[g]
            if count >= want and not grouped:
                break
        if not grouped or share:
            out[k] = count >= want
            continue
        best = 0
        for g in range(n_gpu):
            gid = groups[n, g]
            if gid < 0:
                continue
            in_group = 0
            for h in range(n_gpu):
                in_group += ok[h] and groups[n, h] == gid
            best = max(best, in_group)
        out[k] = best >= num_gpu
    return out


@kernel
def resources_fit(rows: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, cpu: int, mem: int) -> np.ndarray:
    """[K] bool, ResourcesFit on `rows`: the CPU and memory requests fit what is free."""
    out = np.empty(rows.size, np.bool_)
    for k in range(rows.size):
        out[k] = cpu_free[rows[k]] >= cpu and mem_free[rows[k]] >= mem
    return out


@kernel
def whole_gpu_free(rows: np.ndarray, gpu_free: np.ndarray, milli: int) -> np.ndarray:
    """[K] bool, WholeGpuOnly for a sharing pod on `rows`: some GPU is entirely free."""
    out = np.zeros(rows.size, np.bool_)
    for k in range(rows.size):
        for g in range(gpu_free.shape[1]):
            if gpu_free[rows[k], g] >= milli:
                out[k] = True
                break
    return out
