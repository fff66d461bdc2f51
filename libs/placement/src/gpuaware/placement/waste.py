"""Waste gradient: place each pod where it grows the cluster's *expected wasted GPU* least.

FGD (frag.py) measures a node's waste as the GPU milli that the next typical pod could not use.
There are two kinds of waste it does not see:

1. GPUs stranded by CPU. CPU can be nearly as scarce as GPU, and node types differ tenfold in CPU
   per GPU. FGD only notices CPU when a typical pod no longer fits; by then the node's remaining
   GPUs are dead. We add a smooth term: stranded(n) = max(0, free_gpu - free_cpu / rho), rho being
   the typical GPU pod's CPU per GPU milli, i.e. the GPU that the node's CPU can no longer feed.
2. Gaps nobody will fill. FGD counts a GPU's free milli as fragment when the next pod cannot use
   it, so a 350-milli gap (waiting for the common 320-milli pods) looks *worse* than a 210-milli gap
   (which only the rare 160-milli pods fit). We value each GPU gap g by W(g), the expected milli
   left unfilled at the end, from a small dynamic programme over the typical pods' GPU shares:
       W(g) = (1 - phi(g)) * g + phi(g) * E[W(g - s) | share s fits in g],
       phi(g) = min(1, kappa * P(share <= g))
   phi is the chance a gap is filled at all: small shares are rare and many gaps compete for them
   (every 810-milli pod leaves a 190-milli gap), so a gap that only rare pods fit mostly stays
   empty. kappa sets that scarcity; kappa -> infinity gives the "random fill" model.

waste(n) = F(n) + strand_weight * stranded(n) + gap_weight * sum_gpus W(free)
score    = int(100 * sigmoid((waste_before - waste_after) / 1000)), ties to the seeded node rank,
exactly FGD's scale and tie-break (the truncation plus rank tie-break is worth about one point of
allocation: the same objective scored in floating point packs worse, see the FGD-Float variant).
Sharing pods try every GPU of the node and keep the best; whole-GPU pods take fully free GPUs.

Below saturation those two terms alone cost pods: both move flexible pods onto GPUs that other
pods have no alternative to, and a pod that finds no node is never retried:

- Pods restricted to GPU types. The strand term credits a pod for feeding a CPU-poor node and
  charges CPU-heavy pods on balanced ones, so flexible pods crowd onto the CPU-poor models, which
  the pods that may only use those types need.
- Rare wide pods. A CPU-heavy one-GPU pod strands GPU on a partly used node, so it breaks an idle
  big node instead, which the rare 8-GPU pods asking most of a node's CPU need. They are too rare
  by count to be typical pods, so no term built on the typical pods sees them.

Hence a price for taking GPU that others cannot do without, paid by the pods that have a choice:

3. Reserved GPUs. r_t, the GPU demand of the typical pods restricted by gpu_spec that may use model
   t, spread over their allowed models in proportion to capacity, per unit of t's capacity (1 =
   those pods alone would fill t at a load equal to the cluster). A share min(1, reserve * (r_t +
   reserve_floor)) of t's GPUs is reserved, on t's CPU-richest nodes first; reserve_floor keeps a
   little of every model for the restricted pods too rare to be typical. A reserved node costs
   reserve_cost per milli-GPU taken: a flat price on a set of nodes rather than a price r_t on all
   of t, because a few percent of restricted demand priced over all of t never outweighs the strand
   credit. The floor applies only when some typical pod names GPU types and the cluster has more
   than one model.
4. Capable nodes last. A node able to host the whole-node pods of more node shapes (GPU count, CPU
   capacity) is where the rare big pods can go: c(n) = sum over shapes s whose idle node n could
   hold (>= s's GPUs and CPU) of cap(s) / cap(shapes that could hold s). It costs capability * c(n)
   per milli-GPU.

A pod pays (cost(n) - the least cost among the nodes that could ever hold it) * its GPU milli: a pod
restricted to reserved nodes pays nothing, and on its cheapest nodes no pod's score moves (the
integer sigmoid buckets, hence the ties, stay FGD's). Both prices are fixed per node (its model, GPU
count and CPU capacity) and computed once per cluster, so a node's score still depends on the node
alone: the per-spec cache and the score cache stay exact. The defaults (reserve 2, floor 0.02, cost
2.5 per milli, capability 0.2) and how they compare with FGD are in bench/results/placement.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from gpuaware.placement import frag_kernels as kernels
from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.frag import TypicalPods, sigmoid_score, type_allowed
from gpuaware.placement.framework import CycleState
from gpuaware.placement.model import MILLI, GpuModel, PodRequest
from gpuaware.placement.policies import FgdScore


def gpu_share_distribution(typical: TypicalPods) -> np.ndarray:
    """q[0..1000]: probability that a one-GPU typical pod asks for that many milli."""
    q = np.zeros(MILLI + 1)
    for (_, num, milli, _), p in zip(typical.keys, typical.p, strict=True):
        if num == 1:
            q[milli] += p
    total = q.sum()
    return q / total if total > 0 else q


def gap_waste_table(typical: TypicalPods, kappa: float) -> np.ndarray:
    """W[g], g = 0..1000: expected milli of a g-milli GPU gap that stays unfilled (see module doc)."""
    q = gpu_share_distribution(typical)
    cdf = np.cumsum(q)
    sizes = np.flatnonzero(q)
    w = np.zeros(MILLI + 1)
    for g in range(MILLI + 1):
        fit = sizes[sizes <= g]
        if fit.size == 0:
            w[g] = g
            continue
        expect = float((q[fit] * w[g - fit]).sum() / q[fit].sum())
        phi = min(1.0, kappa * float(cdf[g]))
        w[g] = (1.0 - phi) * g + phi * expect
    return w


def cpu_per_gpu_milli(typical: TypicalPods) -> float:
    """rho: the typical GPU pod's CPU milli per GPU milli (CPU-only pods excluded)."""
    gpu = np.array([k[1] * k[2] for k in typical.keys], dtype=np.float64)
    cpu = np.array([k[0] for k in typical.keys], dtype=np.float64)
    m = gpu > 0
    if not m.any():
        return 1.0
    return float((typical.p[m] * cpu[m]).sum() / (typical.p[m] * gpu[m]).sum())


def type_reserve_demand(typical: TypicalPods, models: Sequence[GpuModel], gpus: np.ndarray) -> np.ndarray:
    """r[t] per GPU model: GPU demand of the gpu_spec-restricted typical pods that may use t, spread
    over their allowed models by capacity, per unit of t's capacity, relative to all demand per unit
    of cluster capacity (`gpus[t]`: the cluster's GPUs of model t). Pods that may use every model
    the cluster has (no gpu_spec, or one naming them all) add nothing."""
    cap = np.asarray(gpus, dtype=np.float64)
    r = np.zeros(len(models))
    demand = 0.0
    for (_, num, milli, spec), p in zip(typical.keys, typical.p, strict=True):
        g = p * num * milli
        demand += g
        if not spec or g == 0:
            continue
        ok = type_allowed(models, spec)[:-1]
        if ok[cap > 0].all():
            continue  # it names every model the cluster has: not restricted here
        if cap[ok].sum() > 0:
            r[ok] += g / cap[ok].sum()
    return r * cap.sum() / demand if demand > 0 else r


def reserved_nodes(
    model_idx: np.ndarray, gpu_count: np.ndarray, cpu_capacity: np.ndarray, share: np.ndarray
) -> np.ndarray:
    """bool[N]: per model t, the fewest nodes, CPU-richest first (then by index), holding at least
    `share[t]` of t's GPUs."""
    out = np.zeros(model_idx.size, dtype=bool)
    for t in np.unique(model_idx[gpu_count > 0]):
        if share[t] <= 0:
            continue
        idx = np.flatnonzero((model_idx == t) & (gpu_count > 0))
        order = idx[np.lexsort((idx, -cpu_capacity[idx]))]
        cum = np.cumsum(gpu_count[order])
        k = int(np.searchsorted(cum, min(1.0, share[t]) * cum[-1] - 1e-9)) + 1
        out[order[:k]] = True
    return out


def capability(gpu_count: np.ndarray, cpu_capacity: np.ndarray) -> np.ndarray:
    """c[N]: over node shapes s (GPU count, CPU capacity), the capacity share of s's whole-node pods
    that node n's shape could host: sum_s [n holds s] cap(s) / cap(shapes holding s). CPU-only: 0."""
    gpu = gpu_count > 0
    shapes, inv = np.unique(np.stack([gpu_count, cpu_capacity], axis=1)[gpu], axis=0, return_inverse=True)
    cap = shapes[:, 0] * np.bincount(inv.ravel()).astype(np.float64)
    holds = (shapes[:, None, 0] >= shapes[None, :, 0]) & (shapes[:, None, 1] >= shapes[None, :, 1])  # [n, s]
    per_shape = holds @ (cap / (holds * cap[:, None]).sum(axis=0))
    out = np.zeros(gpu_count.size)
    out[gpu] = per_shape[inv.ravel()]
    return out


class WasteGradientScore(FgdScore):
    """Minimise expected wasted GPU: FGD fragmentation + GPU stranded by CPU + unfillable gaps, with
    a price on GPU that other pods have no alternative to (reserved models, capable nodes).

    profile:
      score: [{name: waste-gradient, weight: 1000, args: {strand: 2.0, gap: 4.0, kappa: 30}}]
      gpu: waste-gradient

    The prices' keyword arguments (reserve 2.0, reserve_floor 0.02, reserve_cost 2.5, capability 0.2)
    are not in a profile's ``args`` until WasteGradientArgs (args.py) lists them; profiles get the
    defaults.
    """

    name: ClassVar[str] = "waste-gradient"
    gpu_key: ClassVar[str] = "waste.gpu"

    def __init__(
        self,
        typical: TypicalPods,
        strand: float = 2.0,
        gap: float = 4.0,
        kappa: float = 30.0,
        reserve: float = 2.0,
        reserve_floor: float = 0.02,
        reserve_cost: float = 2.5,
        capability: float = 0.2,
    ) -> None:
        super().__init__(typical)
        if strand < 0 or gap < 0 or kappa <= 0:
            raise ValueError("waste-gradient: strand and gap must be >= 0, kappa > 0")
        if min(reserve, reserve_floor, reserve_cost, capability) < 0:
            raise ValueError(
                "waste-gradient: reserve, reserve_floor, reserve_cost and capability must be >= 0"
            )
        self.strand_weight = float(strand)
        self.gap_weight = float(gap)
        self.rho = cpu_per_gpu_milli(typical)
        self.gap = gap_waste_table(typical, kappa)
        self.reserve = float(reserve)
        self.reserve_floor = float(reserve_floor)
        self.reserve_cost = float(reserve_cost)
        self.capability_cost = float(capability)
        self._price_uid = -1
        self._price = np.zeros(0)
        self._base: dict[tuple[str, int, int], float] = {}

    def deltas(self, pod: PodRequest, snap: Snapshot, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value per node: fragmentation delta + gap + strand terms, GPU taken there; -1 for whole GPUs)."""
        st = self.frag_state(snap)
        st.refresh(snap, rows)
        if pod.is_gpu_share:  # the GPU: FGD's rule on the fragmentation + gap terms
            return kernels.waste_share(rows, snap.gpu_free, snap.cpu_free, snap.model_idx, *st.kernel_args(),
                                       pod.gpu_milli, pod.score_cpu_milli, pod.total_gpu_milli, self.gap,
                                       self.gap_weight, self.strand_weight, self.rho)
        # whole GPUs: every node loses the same W(1000) per GPU taken, so the gap term drops out
        d = kernels.waste_whole(rows, snap.gpu_free, snap.cpu_free, snap.model_idx, *st.kernel_args(), pod.num_gpu,
                                pod.score_cpu_milli, MILLI, pod.total_gpu_milli, self.strand_weight, self.rho)
        return d, np.full(rows.size, -1, dtype=np.int64)

    # -- the price of GPU others cannot do without (terms 3 and 4 of the module doc) ----------------

    def prices(self, snap: Snapshot) -> np.ndarray:
        """Per node, per milli-GPU taken: reserve_cost on reserved nodes + capability * c(n)."""
        if self._price_uid != snap.cluster_uid:
            gpus = np.bincount(
                snap.model_idx[snap.gpu_count > 0],
                weights=snap.gpu_count[snap.gpu_count > 0],
                minlength=len(snap.models),
            )
            # the floor only where pods name GPU types at all and there is more than one to name
            restricted = any(k[3] for k in self.typical.keys) and np.count_nonzero(gpus) > 1
            floor = self.reserve_floor if restricted else 0.0
            share = self.reserve * (type_reserve_demand(self.typical, snap.models, gpus) + floor)
            reserved = (
                reserved_nodes(snap.model_idx, snap.gpu_count, snap.cpu_capacity, share)
                if self.reserve
                else None
            )
            price = self.capability_cost * capability(snap.gpu_count, snap.cpu_capacity)
            if reserved is not None:
                price = price + self.reserve_cost * reserved
            self._price, self._price_uid, self._base = price, snap.cluster_uid, {}
        return self._price

    def price_base(self, pod: PodRequest, snap: Snapshot) -> tuple[np.ndarray, float]:
        """(price per node and milli-GPU, the pod's base): the pod pays (price - base) * its GPU milli on
        a node, base being the cheapest price among the nodes that could ever hold it (model, GPU
        count, CPU capacity)."""
        price = self.prices(snap)
        key = (pod.gpu_spec, pod.num_gpu, pod.cpu_milli)
        base = self._base.get(key)
        if base is None:
            can = (
                type_allowed(snap.models, pod.gpu_spec)[snap.model_idx]
                & (snap.gpu_count >= pod.num_gpu)
                & (snap.cpu_capacity >= pod.cpu_milli)
                & (snap.gpu_count > 0)
            )
            base = self._base[key] = float(price[can].min()) if can.any() else 0.0
        return price, base

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        val, gpu = self.cache.values(snap, (pod.score_cpu_milli, pod.num_gpu, pod.gpu_milli), nodes,
                                     lambda rows: self.deltas(pod, snap, rows))
        cycle[self.gpu_key] = (nodes, gpu[nodes])
        if pod.num_gpu == 0 or not (self.reserve_cost or self.capability_cost):
            return sigmoid_score(val[nodes])
        # the price depends on the pod's GPU types, which the per-spec cache key leaves out: added here
        price, base = self.price_base(pod, snap)
        return kernels.priced_scores(val, nodes, price, base, pod.total_gpu_milli)


class FgdFloatScore(FgdScore):
    """FGD scored in floating point (no int truncation): an ablation showing what the coarse
    integer scale plus the rank tie-break contributes. Not for production use.

    profile:
      score: [{name: fgd-float, weight: 1}]
      gpu: fgd-float
    """

    name: ClassVar[str] = "fgd-float"
    gpu_key: ClassVar[str] = "fgd-float.gpu"

    @staticmethod
    def pick_gpu(delta: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.where(valid, delta, -np.inf)
        gpu = s.argmax(axis=1)
        return delta[np.arange(delta.shape[0]), gpu], gpu

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        val, gpu = self.cache.values(snap, (pod.score_cpu_milli, pod.num_gpu, pod.gpu_milli), nodes,
                                     lambda rows: self.deltas(pod, snap, rows))
        cycle[self.gpu_key] = (nodes, gpu[nodes])
        with np.errstate(over="ignore"):
            out: np.ndarray = 100.0 / (1.0 + np.exp(-val[nodes] / 1000.0))
            return out
