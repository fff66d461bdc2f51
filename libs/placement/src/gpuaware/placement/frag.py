"""GPU fragmentation as the FGD paper (Weng et al., ATC'23) and its simulator define it, vectorised.

A node's fragmentation is measured against a workload distribution ("typical pods"): for each
typical pod m with probability p_m, the node's idle GPU milli that m could *not* use counts as
fragment. If m fits (its GPU type is allowed, enough GPUs have >= m's milli free, and the node has
the CPU), only the free milli on GPUs with less than m's request counts; otherwise (no fit, wrong GPU
type, or m is CPU-only) all idle GPU milli counts. F_n = sum_m p_m * frag(n, m).

The arithmetic is organised around the distinct milli thresholds of the typical pods: per node and
threshold we keep how many GPUs have at least that much free (`cnt`) and how much free milli sits on
GPUs below it (`small`). Moving one GPU from a to b free milli changes those two numbers by simple
indicator terms, so "fragmentation after placing the pod on GPU g" is computed for every (node, GPU)
pair without copying node states. The loops themselves are compiled (frag_kernels.py): a decision
rescores a handful of nodes, where numpy's per-call overhead was most of the cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpuaware.placement import frag_kernels as kernels
from gpuaware.placement.model import MILLI, GpuModel, PodRequest

if TYPE_CHECKING:
    from gpuaware.placement.cluster import Snapshot

KernelArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""a typical-pod model's arrays as the kernels take them: u, um, num, cpu, p, access"""
KernelArgs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                   np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""`KernelArrays` and a fragmentation state's cnt, small, total, frag"""

SpecKey = tuple[int, int, int, str]  # (score CPU milli, num GPU, milli per GPU, GPU types "a|b")


@dataclass(frozen=True, slots=True)
class TypicalPods:
    """The most frequent request specs and their renormalised probabilities."""

    keys: tuple[SpecKey, ...]
    p: np.ndarray  # [M] float64, sums to 1

    @property
    def cpu(self) -> np.ndarray:
        return np.array([k[0] for k in self.keys], dtype=np.int64)

    @property
    def num(self) -> np.ndarray:
        return np.array([k[1] for k in self.keys], dtype=np.int64)

    @property
    def milli(self) -> np.ndarray:
        return np.array([k[2] for k in self.keys], dtype=np.int64)

    @classmethod
    def from_counts(
        cls, counts: dict[SpecKey, float], popularity: float = 0.95, step: int = 1
    ) -> TypicalPods:
        """Top specs by count until they cover `popularity` of the total, renormalised.

        Mirrors the FGD simulator's GetTypicalPods: specs sorted by decreasing count (ties: larger
        CPU, then milli, GPUs, type first), added `step` at a time until the covered share reaches
        the threshold; probabilities renormalised over the kept specs.
        """
        if not counts:
            raise ValueError("typical pods need at least one request")
        total = float(sum(counts.values()))
        # ties: the simulator's PodResource.Less order (CPU, milli, GPUs, type), largest first
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][2], kv[0][1], kv[0][3]), reverse=True)
        expected = popularity * total
        kept, cum = 0, 0.0
        target_len = 0
        while cum < expected and kept < len(ranked):
            target_len += step
            while kept < target_len and kept < len(ranked):
                cum += ranked[kept][1]
                kept += 1
        chosen = ranked[:kept]
        p = np.array([c for _, c in chosen], dtype=np.float64) / total
        if kept < len(ranked):
            p = p / (cum / total)
        return cls(tuple(k for k, _ in chosen), p)

    @classmethod
    def from_requests(
        cls,
        requests: Iterable[PodRequest],
        popularity: float = 0.95,
        step: int = 1,
        include_cpu_pods: bool = True,
    ) -> TypicalPods:
        counts: Counter[SpecKey] = Counter()
        for r in requests:
            if r.num_gpu == 0 and not include_cpu_pods:
                continue
            counts[r.spec_key] += 1
        return cls.from_counts(dict(counts), popularity, step)


def type_allowed(models: Sequence[GpuModel], spec: str) -> np.ndarray:
    """[n_models + 1] bool: may a pod with GPU types `spec` use each model (last entry: CPU-only node)."""
    wanted = [t for t in spec.split("|") if t]
    out = np.ones(len(models) + 1, dtype=bool)
    if wanted:
        out[:-1] = [m.name in wanted for m in models]
    out[-1] = not wanted  # a CPU node "accepts" only unconstrained pods (and has no GPUs anyway)
    return out


class FragModel:
    """Typical pods bound to one cluster's GPU model list, as the arrays the kernels read."""

    def __init__(self, typical: TypicalPods, models: Sequence[GpuModel]) -> None:
        self.typical = typical
        milli = typical.milli
        self.is_gpu = milli > 0
        self.u = np.unique(milli[self.is_gpu]) if self.is_gpu.any() else np.array([MILLI], dtype=np.int64)
        self.um = np.searchsorted(self.u, np.where(self.is_gpu, milli, self.u[0]))
        self.num = typical.num
        self.cpu = typical.cpu
        self.p = typical.p.astype(np.float64)
        # access[model + 1 row for CPU nodes, m]: can m ever be "satisfied" (Q3) on that model?
        acc = np.zeros((len(models) + 1, len(typical.keys)), dtype=bool)
        for j, key in enumerate(typical.keys):
            if self.is_gpu[j]:
                acc[:, j] = type_allowed(models, key[3])
        acc[-1, :] = False
        self.access = acc
        self.arrays: KernelArrays = (self.u.astype(np.int64), self.um.astype(np.int64), self.num.astype(np.int64),
                       self.cpu.astype(np.int64), self.p, np.ascontiguousarray(acc))
        """what the kernels take: u, um, num, cpu, p, access"""

    def node_frag(self, left: np.ndarray, cpu: np.ndarray, model_idx: np.ndarray) -> np.ndarray:
        """F[K] = sum_m p_m frag(node, m) for K node states (free milli per GPU, free CPU, model index)."""
        k = left.shape[0]
        rows = np.arange(k)
        cnt = np.zeros((k, len(self.u)), dtype=np.int64)
        small = np.zeros((k, len(self.u)), dtype=np.int64)
        frag = np.zeros((k, len(self.p)), dtype=np.int64)
        F = np.zeros(k, dtype=np.float64)
        kernels.fill_rows(rows, np.ascontiguousarray(left, dtype=np.int64), np.ascontiguousarray(cpu, dtype=np.int64),
                          np.ascontiguousarray(model_idx, dtype=np.int64), *self.arrays, cnt, small,
                          np.zeros(k, dtype=np.int64), frag, F)
        return F


@dataclass(slots=True)
class FragState:
    """Cached per-node statistics for one FragModel, refreshed only for nodes whose version moved."""

    model: FragModel
    cluster_uid: int
    version: np.ndarray
    cnt: np.ndarray
    small: np.ndarray
    total: np.ndarray
    frag: np.ndarray  # [N, M]
    F: np.ndarray  # [N]

    @classmethod
    def build(cls, model: FragModel, snap: Snapshot) -> FragState:
        n = snap.num_nodes
        st = cls(
            model,
            snap.cluster_uid,
            np.full(n, -1, dtype=np.int64),
            np.zeros((n, len(model.u)), dtype=np.int64),
            np.zeros((n, len(model.u)), dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            np.zeros((n, len(model.p)), dtype=np.int64),
            np.zeros(n, dtype=np.float64),
        )
        st.refresh(snap)
        return st

    def refresh(self, snap: Snapshot, rows: np.ndarray | None = None) -> None:
        if snap.cluster_uid != self.cluster_uid:
            raise ValueError("FragState belongs to another cluster")
        if rows is None:
            stale = np.flatnonzero(self.version != snap.version)
        else:
            stale = rows[self.version[rows] != snap.version[rows]]
        if stale.size == 0:
            return
        kernels.fill_rows(stale, snap.gpu_free, snap.cpu_free, snap.model_idx, *self.model.arrays, self.cnt,
                          self.small, self.total, self.frag, self.F)
        self.version[stale] = snap.version[stale]

    def kernel_args(self) -> KernelArgs:
        """The model's and this state's arrays in the order the delta kernels take them (after the rows
        and the snapshot's columns)."""
        return (*self.model.arrays, self.cnt, self.small, self.total, self.frag)


def frag_delta_share(
    st: FragState, snap: Snapshot, rows: np.ndarray, milli: int, cpu: int
) -> tuple[np.ndarray, np.ndarray]:
    """F_before - F_after for a GPU-sharing pod placed on each GPU of each node in `rows`.

    Returns (delta[K, G], valid[K, G]); valid marks GPUs with >= `milli` free (delta is 0 elsewhere).
    GPUs of one node with the same free milli give the same result and are evaluated once.
    """
    return kernels.share_deltas(rows, snap.gpu_free, snap.cpu_free, snap.model_idx, *st.kernel_args(), milli, cpu)


def frag_delta_whole(st: FragState, snap: Snapshot, rows: np.ndarray, num_gpu: int, cpu: int) -> np.ndarray:
    """F_before - F_after for a pod taking `num_gpu` whole GPUs (0 = CPU-only) on each node in `rows`."""
    return kernels.whole_deltas(rows, snap.gpu_free, snap.cpu_free, snap.model_idx, *st.kernel_args(), num_gpu, cpu,
                                MILLI)


def sigmoid_score(delta: np.ndarray) -> np.ndarray:
    """FGD's node score: int64(100 * sigmoid(delta / 1000)), truncated like the Go simulator."""
    return kernels.sigmoid_scores(np.asarray(delta, dtype=np.float64))
