"""The six published placement policies of the FGD paper, reproduced from its simulator.

Each scorer keeps the simulator's integer arithmetic on purpose (k8s scores are int64, truncated),
because the truncation decides which nodes tie and ties decide a large part of the outcome. The
formulas, with MaxSpec = 128,000 CPU milli and 8,000 GPU milli:

- FGD: 100 * sigmoid((F_before - F_after) / 1000) with F the typical-pod fragmentation (see frag.py);
  sharing pods try every GPU of the node and keep the best, whole-GPU pods take fully free GPUs.
- BestFit: 100 * (1 - [0.5 (cpu_free - cpu) / 128000 + 0.5 (gpu_free - gpu) / 8000]), then min-max
  normalised across the feasible nodes.
- DotProd (Tetris, "merge"): 100 * (1 - (node_free . pod_req) / 2) on MaxSpec-normalised 2-D vectors.
- GpuPacking: tiers — sharing on a partly used GPU: 100 - free%/10 (floor 50); needs fully free GPUs
  on a used node: 50 - GPUs used (floor 33); idle node: 33 - free GPUs. CPU-only pods score 0.
- GpuClustering: band + 25 (8000 - free) / 8000 with band 75 (node hosts only this pod's label),
  50 (mixed, including it), 25 (no GPU pods), 0 (only other labels). CPU-only pods score 0.
- Random: one uniformly random feasible node scores 100.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from gpuaware.placement import frag_kernels as kernels
from gpuaware.placement import row_kernels
from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.frag import (
    FragModel,
    FragState,
    TypicalPods,
    frag_delta_share,
    frag_delta_whole,
    sigmoid_score,
)
from gpuaware.placement.framework import MAX_NODE_SCORE, MIN_NODE_SCORE, CycleState, ScorePlugin
from gpuaware.placement.model import MAX_SPEC_CPU, MAX_SPEC_GPU, MILLI, PodRequest


def min_max_normalize(scores: np.ndarray) -> np.ndarray:
    """The simulator's NormalizeScore: integer min-max onto 0..100 (all 0 when every score is equal)."""
    if scores.size == 0:
        return scores
    lo, hi = scores.min(), scores.max()
    if hi == lo:
        return np.zeros_like(scores)
    out: np.ndarray = (scores - lo) * (MAX_NODE_SCORE - MIN_NODE_SCORE) // (hi - lo) + MIN_NODE_SCORE
    return out


class _SpecCache:
    """Per request-spec score cache, valid per node while the node's version is unchanged."""

    __slots__ = ("entries", "uid")

    def __init__(self) -> None:
        self.entries: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.uid = -1

    def get(self, snap: Snapshot, key: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if snap.cluster_uid != self.uid:
            self.entries.clear()
            self.uid = snap.cluster_uid
        e = self.entries.get(key)
        if e is None:
            n = snap.num_nodes
            e = (np.full(n, -1, np.int64), np.zeros(n, np.float64), np.zeros(n, np.int64))
            self.entries[key] = e
        return e

    def values(self, snap: Snapshot, key: Any, nodes: np.ndarray,
               compute: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]) -> tuple[np.ndarray, np.ndarray]:
        """The entry's (value, GPU) arrays over all nodes, with `nodes` up to date: `compute(stale)` gives
        (value, GPU or None) for the members of `nodes` that changed since theirs was computed."""
        ver, val, gpu = self.get(snap, key)
        stale = row_kernels.stale_rows(nodes, ver, snap.version)
        if stale.size:
            v, g = compute(stale)
            if g is None:
                row_kernels.store_values(stale, v, ver, val, snap.version)
            else:
                row_kernels.store_rows(stale, v, g, ver, val, gpu, snap.version)
        return val, gpu


class FgdScore(ScorePlugin):
    """Fragmentation Gradient Descent: prefer the placement that grows expected fragmentation least.

    Scores are cached per request spec and node version (a node's score only changes when the node
    does), so a decision recomputes only the nodes changed since the spec was last seen.

    profile:
      score: [{name: fgd, weight: 1000}]
      gpu: fgd
    """

    name: ClassVar[str] = "fgd"
    per_node: ClassVar[bool] = True
    gpu_key: ClassVar[str] = "fgd.gpu"

    def __init__(self, typical: TypicalPods) -> None:
        self.typical = typical
        self.state: FragState | None = None
        self.cache = _SpecCache()

    def frag_state(self, snap: Snapshot) -> FragState:
        if self.state is None or self.state.cluster_uid != snap.cluster_uid:
            self.state = FragState.build(FragModel(self.typical, snap.models), snap)
        return self.state

    def deltas(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(best F_before - F_after per node, GPU achieving it) for `rows` (feasible nodes)."""
        st = self.frag_state(snap)
        st.refresh(snap, rows)
        if pod.is_gpu_share:
            delta, valid = frag_delta_share(st, snap, rows, pod.gpu_milli, pod.score_cpu_milli)
            return self.pick_gpu(delta, valid)
        d = frag_delta_whole(st, snap, rows, pod.num_gpu, pod.score_cpu_milli)
        return d, np.full(rows.size, -1, dtype=np.int64)

    @staticmethod
    def pick_gpu(delta: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the valid GPU with the best integer score (first on ties): (its delta, its index)."""
        return kernels.gpu_pick(delta, valid)

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        val, gpu = self.cache.values(snap, (pod.score_cpu_milli, pod.num_gpu, pod.gpu_milli), nodes,
                                     lambda rows: self.deltas(pod, snap, rows))
        cycle[self.gpu_key] = (nodes, gpu[nodes])
        return sigmoid_score(val[nodes])


class BestFitScore(ScorePlugin):
    """Best fit: least CPU and GPU left after placement, normalised across feasible nodes.

    profile:
      score: [{name: bestfit, weight: 1000}]
      gpu: best
    """

    name: ClassVar[str] = "bestfit"
    per_node: ClassVar[bool] = False  # min-max normalised across the feasible nodes

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        cpu_left = (snap.cpu_free[nodes] - pod.score_cpu_milli) / MAX_SPEC_CPU * 0.5
        gpu_left = (snap.gpu_free[nodes].sum(axis=1) - pod.total_gpu_milli) / MAX_SPEC_GPU * 0.5
        out: np.ndarray = ((1.0 - (cpu_left + gpu_left)) * MAX_NODE_SCORE).astype(np.int64)
        return out

    def normalize(self, cycle: CycleState, pod: PodRequest, scores: np.ndarray) -> np.ndarray:
        return min_max_normalize(scores)


class DotProdScore(ScorePlugin):
    """Tetris dot product, "merge" form: prefer nodes whose free (CPU, GPU) vector aligns least.

    profile:
      score: [{name: dotprod, weight: 1000}]
      gpu: best
    """

    name: ClassVar[str] = "dotprod"
    per_node: ClassVar[bool] = True

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        cpu_free = snap.cpu_free[nodes]
        gpu_free = snap.gpu_free[nodes].sum(axis=1)
        dot = (cpu_free / MAX_SPEC_CPU) * (pod.score_cpu_milli / MAX_SPEC_CPU) + (gpu_free / MAX_SPEC_GPU) * (
            pod.total_gpu_milli / MAX_SPEC_GPU
        )
        s = (MAX_NODE_SCORE * (1 - dot / 2)).astype(np.int64)
        return np.where(cpu_free >= pod.score_cpu_milli, s, MIN_NODE_SCORE)


class GpuPackingScore(ScorePlugin):
    """GPU packing tiers: fill partly used GPUs, then used nodes, then idle nodes (fewest GPUs first).

    profile:
      score: [{name: gpupacking, weight: 1000}]
      gpu: best
    """

    name: ClassVar[str] = "gpupacking"
    per_node: ClassVar[bool] = True

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        if pod.num_gpu == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        free = snap.gpu_free[nodes]
        full = (free >= MILLI).sum(axis=1)
        count = snap.gpu_count[nodes]
        idle = np.maximum(MAX_NODE_SCORE // 3 - full, full)  # case 3: every GPU on the node is free
        if pod.is_gpu_share:
            tight = np.where(free >= pod.gpu_milli, free, MILLI + 1).min(axis=1)
            used_full = (tight >= MILLI).astype(np.int64)
            shared = np.maximum(MAX_NODE_SCORE - (tight * 100 // MILLI) // 10, MAX_NODE_SCORE // 2)
        else:
            used_full = np.full(nodes.size, pod.num_gpu, dtype=np.int64)
            shared = np.zeros(nodes.size, dtype=np.int64)
        on_used = np.maximum(MAX_NODE_SCORE // 2 - used_full, MAX_NODE_SCORE // 3)  # case 2
        out: np.ndarray = np.where(full == count, idle, np.where(used_full > 0, on_used, shared))
        return out


class GpuClusteringScore(ScorePlugin):
    """GPU clustering: keep pods of one label ("share" or "k-gpu") together on the same nodes.

    profile:
      score: [{name: gpuclustering, weight: 1000}]
      gpu: best
    """

    name: ClassVar[str] = "gpuclustering"
    per_node: ClassVar[bool] = True

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        tag = pod.affinity_tag
        if tag < 0:
            return np.zeros(nodes.size, dtype=np.int64)
        counts = snap.tag_counts[nodes]
        has = counts[:, min(tag, counts.shape[1] - 1)] > 0
        kinds = (counts > 0).sum(axis=1)
        band = np.where(has, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        left = snap.gpu_free[nodes].sum(axis=1)
        out: np.ndarray = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU + band
        return out


class RandomScore(ScorePlugin):
    """Random fit: one uniformly random feasible node scores 100, the rest 0.

    profile:
      score: [{name: random, weight: 1000}]
      gpu: random
      seed: 42
    """

    name: ClassVar[str] = "random"
    per_node: ClassVar[bool] = False  # a fresh draw per decision

    def __init__(self, seed: int | None = None, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(seed)

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        out = np.zeros(nodes.size, dtype=np.int64)
        out[self.rng.integers(nodes.size)] = MAX_NODE_SCORE
        return out
