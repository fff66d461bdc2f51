"""Heterogeneity: prefer the GPU model on which the pod's job type runs fastest (Gavel, OSDI'20).

Gavel measures each job type's throughput on each GPU type; a placement that puts a job where its
throughput is highest relative to its best gets more work done per GPU-hour. The matrix comes from
configuration (job type -> GPU model -> isolated throughput), so this plugin stays pure; gpuaware.sim
loads Gavel's published matrices. Pods without a known job type score 0 everywhere (neutral), so
the plugin can sit beside a packing scorer in one profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import MAX_NODE_SCORE, CycleState, ScorePlugin
from gpuaware.placement.model import PodRequest


class ThroughputScore(ScorePlugin):
    """Score = 100 * throughput(job type, node's GPU model) / best throughput over the cluster's models.

    profile:
      score:
        - {name: waste-gradient, weight: 1000}
        - {name: throughput, weight: 500, args: {matrix: {"ResNet-50": {V100M32: 4.39, P100: 2.62, K80: 0.62}}}}
      gpu: waste-gradient
    """

    name: ClassVar[str] = "throughput"
    per_node: ClassVar[bool] = True

    def __init__(self, matrix: Mapping[str, Mapping[str, float]]) -> None:
        for job, row in matrix.items():
            for model, value in row.items():
                if value < 0:
                    raise ValueError(f"throughput of {job!r} on {model!r} is negative")
        self.matrix = {job: dict(row) for job, row in matrix.items()}
        self._rows: dict[tuple[int, str], np.ndarray] = {}

    def row(self, snap: Snapshot, job: str) -> np.ndarray:
        """[n_models + 1] scores per GPU model for one job type (last: CPU-only nodes, 0)."""
        key = (snap.cluster_uid, job)
        out = self._rows.get(key)
        if out is None:
            per = self.matrix.get(job, {})
            t = np.array([per.get(m.name, 0.0) for m in snap.models] + [0.0])
            best = t.max()
            out = (MAX_NODE_SCORE * t / best).astype(np.int64) if best > 0 else np.zeros(t.size, np.int64)
            self._rows[key] = out
        return out

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        if pod.num_gpu == 0 or pod.job_type not in self.matrix:
            return np.zeros(nodes.size, dtype=np.int64)
        scores: np.ndarray = self.row(snap, pod.job_type)[snap.model_idx[nodes]]
        return scores
