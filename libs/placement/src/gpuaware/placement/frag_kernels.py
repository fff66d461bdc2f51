"""The fragmentation arithmetic of frag.py and waste.py, compiled: loops over the nodes being rescored.

Why compiled: a placement decision rescores only the nodes that changed since its request shape
was last seen, typically one to a few dozen. Written as numpy over so few rows, each score is some
60 array calls whose fixed overhead, not their arithmetic, is the time; as loops over the rows the
cost barely depends on the number of rows, and one pass replaces the [K, G, U] temporaries numpy
would build. numba compiles each kernel on first use and keeps the machine code on disk
(compiled.py).

The definitions (frag.py's module doc): node n's fragmentation against typical pod m is the free
milli on its GPUs below m's request when m fits the node (GPU type allowed, enough GPUs with at
least m's milli free, the CPU), else all its free milli; F_n = sum_m p_m frag(n, m). Per node and
distinct threshold u we keep ``cnt`` (GPUs with >= u free) and ``small`` (free milli on GPUs below
u); a pod taking milli from one GPU moves that GPU from one side of each threshold to the other,
which is what the delta kernels evaluate. Sums over m run in m's order.

The delta kernels take the same leading arguments: the rows, the snapshot's gpu_free, cpu_free and
model_idx, the model's arrays (``FragModel.arrays``: u, um, num, cpu, p, access) and the cached
state's (cnt, small, total, frag: ``FragState.kernel_args``), so they stay free of Python objects.
"""

from __future__ import annotations

import math

import numpy as np

from gpuaware.placement.compiled import kernel

__all__ = ["fill_rows", "gpu_pick", "priced_scores", "share_deltas", "sigmoid_scores", "waste_share", "waste_whole", "whole_deltas"]


@kernel
def _sigmoid_int(delta: float) -> int:
    """FGD's node score: int(100 * sigmoid(delta / 1000)), truncated like the Go simulator (0 where
    exp overflows)."""
    return int(1.0 / (1.0 + math.exp(min(-delta / 1000.0, 700.0))) * 100.0)


@kernel
def priced_scores(value: np.ndarray, nodes: np.ndarray, price: np.ndarray, base: float, gpu_milli: int) -> np.ndarray:
    """`_sigmoid_int` of value[n] - (price[n] - base) * gpu_milli for each n of `nodes` (waste.py's price
    of GPU others cannot do without)."""
    out = np.empty(nodes.size, np.int64)
    for k in range(nodes.size):
        n = nodes[k]
        out[k] = _sigmoid_int(value[n] - (price[n] - base) * gpu_milli)
    return out


@kernel
def sigmoid_scores(delta: np.ndarray) -> np.ndarray:
    """`_sigmoid_int` over an array (any shape)."""
    out = np.empty(delta.shape, np.int64)
    flat_in = delta.ravel()
    flat_out = out.ravel()
    for i in range(flat_in.size):
        flat_out[i] = _sigmoid_int(flat_in[i])
    return out


@kernel
def _model_row(model_idx: np.ndarray, n: int, access: np.ndarray) -> int:
    """Node n's row of `access` (the last row: CPU-only nodes, model index -1)."""
    return int(model_idx[n]) if model_idx[n] >= 0 else access.shape[0] - 1


@kernel
def _frag(allowed: bool, cnt_j: int, num_m: int, cpu: int, cpu_m: int, small_j: int, total: int) -> int:
    """frag(node, m): the free milli on GPUs below m's request (`small_j`) when m fits (its GPU type
    `allowed`, `cnt_j` >= `num_m` GPUs with enough free, `cpu` >= `cpu_m`), else all of it (`total`).
    Scalars only, so the compiler inlines it into the loops over m."""
    return small_j if allowed and cnt_j >= num_m and cpu >= cpu_m else total


@kernel
def fill_rows(rows: np.ndarray, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray,
              u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
              access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
              F: np.ndarray) -> None:
    """Compute cnt, small, total, frag and F of node states `rows` in place (frag.py: FragState)."""
    n_gpu = gpu_free.shape[1]
    n_u = u.size
    for n in rows:
        t = 0
        for j in range(n_u):
            cnt[n, j] = 0
            small[n, j] = 0
        for g in range(n_gpu):
            a = gpu_free[n, g]
            t += a
            for j in range(n_u):
                if a >= u[j]:
                    cnt[n, j] += 1
                else:
                    small[n, j] += a
        total[n] = t
        mi = _model_row(model_idx, n, access)
        f = 0.0
        for m in range(p.size):
            v = _frag(access[mi, m], cnt[n, um[m]], num[m], cpu_free[n], cpu_req[m], small[n, um[m]], t)
            frag[n, m] = v
            f += v * p[m]
        F[n] = f


@kernel
def _share_delta(n: int, a: int, milli: int, cpu: int, model_idx: np.ndarray, cpu_free: np.ndarray,
                 u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
                 access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
                 cnt2: np.ndarray, small2: np.ndarray) -> float:
    """F before - F after on node n when a pod takes `milli` (and `cpu`) from one of its GPUs with `a` free."""
    b = a - milli
    for j in range(u.size):
        ga = a >= u[j]
        gb = b >= u[j]
        cnt2[j] = cnt[n, j] - ga + gb
        small2[j] = small[n, j] - (0 if ga else a) + (0 if gb else b)
    mi = _model_row(model_idx, n, access)
    c2 = cpu_free[n] - cpu
    t2 = total[n] - milli
    d = 0.0
    for m in range(p.size):
        d += (frag[n, m] - _frag(access[mi, m], cnt2[um[m]], num[m], c2, cpu_req[m], small2[um[m]], t2)) * p[m]
    return d


@kernel
def share_deltas(rows: np.ndarray, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray,
                 u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
                 access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
                 milli: int, cpu: int) -> tuple[np.ndarray, np.ndarray]:
    """(delta[K, G], valid[K, G]) for a GPU-sharing pod on each GPU of `rows`: valid marks GPUs with
    >= milli free, delta is 0 elsewhere. A node's GPUs with the same free milli are evaluated once."""
    k_rows = rows.size
    n_gpu = gpu_free.shape[1]
    delta = np.zeros((k_rows, n_gpu))
    valid = np.zeros((k_rows, n_gpu), np.bool_)
    cnt2 = np.empty(u.size, np.int64)
    small2 = np.empty(u.size, np.int64)
    for k in range(k_rows):
        n = rows[k]
        for g in range(n_gpu):
            a = gpu_free[n, g]
            if a < milli:
                continue
            valid[k, g] = True
            same = -1
            for h in range(g):
                if valid[k, h] and gpu_free[n, h] == a:
                    same = h
                    break
            if same >= 0:
                delta[k, g] = delta[k, same]
            else:
                delta[k, g] = _share_delta(n, a, milli, cpu, model_idx, cpu_free, u, um, num, cpu_req, p, access,
                                           cnt, small, total, frag, cnt2, small2)
    return delta, valid


@kernel
def whole_deltas(rows: np.ndarray, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray,
                 u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
                 access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
                 num_gpu: int, cpu: int, milli_per_gpu: int) -> np.ndarray:
    """F before - F after for a pod taking `num_gpu` whole GPUs (0: CPU-only) on each node of `rows`:
    num_gpu fewer GPUs above every threshold, `small` unchanged (a whole GPU sits above them all)."""
    out = np.empty(rows.size)
    for k in range(rows.size):
        n = rows[k]
        mi = _model_row(model_idx, n, access)
        c2 = cpu_free[n] - cpu
        t2 = total[n] - milli_per_gpu * num_gpu
        d = 0.0
        for m in range(p.size):
            j = um[m]
            d += (frag[n, m] - _frag(access[mi, m], cnt[n, j] - num_gpu, num[m], c2, cpu_req[m], small[n, j], t2)) * p[m]
        out[k] = d
    return out


@kernel
def gpu_pick(delta: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FGD's GPU for each row: the valid GPU with the highest `_sigmoid_int` score, the first on ties
    (GPU 0 when none is valid); returns (its delta, its index)."""
    k_rows, n_gpu = delta.shape
    best = np.empty(k_rows)
    gpu = np.zeros(k_rows, np.int64)
    for k in range(k_rows):
        top = -1
        for g in range(n_gpu):
            if valid[k, g]:
                s = _sigmoid_int(delta[k, g])
                if s > top:
                    top = s
                    gpu[k] = g
        best[k] = delta[k, gpu[k]]
    return best, gpu


@kernel
def _stranded(cpu_free: float, gpu_free: float, rho: float) -> float:
    return max(0.0, gpu_free - cpu_free / rho)


@kernel
def _strand(n: int, cpu_free: np.ndarray, total: np.ndarray, cpu: int, gpu_milli: int, rho: float,
            weight: float) -> float:
    c = float(cpu_free[n])
    t = float(total[n])
    return weight * (_stranded(c, t, rho) - _stranded(c - cpu, t - gpu_milli, rho))


@kernel
def waste_share(rows: np.ndarray, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray,
                u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
                access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
                milli: int, cpu: int, gpu_milli: int, gap: np.ndarray, gap_weight: float,
                strand_weight: float, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """waste.py's value of a GPU-sharing pod on each node of `rows` and the GPU it takes there: per GPU
    `share_deltas` plus the gap term gap_weight * (W[a] - W[a - milli]), the GPU by `gpu_pick`'s rule,
    plus the node's stranded-GPU term for `cpu` and `gpu_milli` (the pod's total GPU milli)."""
    delta, valid = share_deltas(rows, gpu_free, cpu_free, model_idx, u, um, num, cpu_req, p, access, cnt, small,
                                total, frag, milli, cpu)
    for k in range(rows.size):
        for g in range(delta.shape[1]):
            a = gpu_free[rows[k], g]
            delta[k, g] += gap_weight * (gap[a] - gap[max(a - milli, 0)])
    best, gpu = gpu_pick(delta, valid)
    for k in range(rows.size):
        best[k] += _strand(rows[k], cpu_free, total, cpu, gpu_milli, rho, strand_weight)
    return best, gpu


@kernel
def waste_whole(rows: np.ndarray, gpu_free: np.ndarray, cpu_free: np.ndarray, model_idx: np.ndarray,
                u: np.ndarray, um: np.ndarray, num: np.ndarray, cpu_req: np.ndarray, p: np.ndarray,
                access: np.ndarray, cnt: np.ndarray, small: np.ndarray, total: np.ndarray, frag: np.ndarray,
                num_gpu: int, cpu: int, milli_per_gpu: int, gpu_milli: int, strand_weight: float, rho: float) -> np.ndarray:
    """waste.py's value of a whole-GPU (or CPU-only) pod on each node of `rows`: the fragmentation delta
    plus the stranded-GPU term for `cpu` and `gpu_milli` (every node loses the same W(1000) per GPU
    taken: no gap term)."""
    out = whole_deltas(rows, gpu_free, cpu_free, model_idx, u, um, num, cpu_req, p, access, cnt, small, total, frag,
                       num_gpu, cpu, milli_per_gpu)
    for k in range(rows.size):
        out[k] += _strand(rows[k], cpu_free, total, cpu, gpu_milli, rho, strand_weight)
    return out
