"""Per-seed arrival sequences, built the way the FGD simulator builds them.

For one seed: pods sorted by name are shuffled; then the workload is "tuned" to `inflation` times the
cluster's GPU capacity — if it asks for less, pods drawn uniformly (with replacement) from the
name-sorted trace are appended as `<name>-tuned-<i>` until the next draw's per-GPU milli would pass
the target (the simulator compares the per-GPU share, not the pod's total, and so do we); if it asks
for more, uniformly random pods are removed until it fits. Finally a random permutation of the nodes
gives each node its tie-break rank. One generator, in that order, so every policy sees the same
arrivals and the same ranks for a given seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuaware.placement import PodRequest


@dataclass(frozen=True, slots=True)
class Workload:
    seed: int
    pods: tuple[PodRequest, ...]  # arrival order
    tie_rank: np.ndarray  # [N] node rank for tie-breaks (lower wins)
    target_gpu_milli: float
    requested_gpu_milli: int


def build_workload(
    requests: Sequence[PodRequest], num_nodes: int, capacity_gpu_milli: int, inflation: float, seed: int
) -> Workload:
    rng = np.random.default_rng(seed)
    base = sorted(requests, key=lambda r: r.name)
    arrivals = [base[i] for i in rng.permutation(len(base))]
    total = sum(r.total_gpu_milli for r in arrivals)
    target = inflation * capacity_gpu_milli
    if inflation > 0 and total > target:
        while total > target and arrivals:
            victim = arrivals.pop(int(rng.integers(len(arrivals))))
            total -= victim.total_gpu_milli
    elif inflation > 0 and total < target and any(r.gpu_milli for r in base):
        i = 0
        while True:
            pick = base[int(rng.integers(len(base)))]
            if total + pick.gpu_milli > target:
                break
            arrivals.append(dataclasses.replace(pick, name=f"{pick.name}-tuned-{i}"))
            total += pick.total_gpu_milli
            i += 1
    tie_rank = rng.permutation(num_nodes)
    return Workload(seed, tuple(arrivals), tie_rank, target, total)
