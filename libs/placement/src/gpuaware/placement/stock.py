"""KubeDefault: stock Kubernetes GPU scheduling, a policy of the registry like any other, so the demo's
baseline runs through the same services and code paths as gpuaware's own policy.

What stock Kubernetes does with GPUs (kube-scheduler + the NVIDIA device plugin): ``nvidia.com/gpu``
is an integer, so a pod gets whole GPUs and a fractional request is rounded up to one GPU; the
queue is FIFO within a priority; nothing is preempted to undo fragmentation. This profile
reproduces that with three plugins:

* ``whole-gpu-only`` (filter, framework.py): a pod asking a fraction of a GPU needs a fully free GPU,
  so when none is left it stays pending (UNSCHEDULABLE, retried on the next departure) as on stock
  Kubernetes, instead of sharing a GPU;
* ``first-fit`` (score): the lowest-indexed feasible node wins (nodes are in name order in the
  placement service's view), so pods pile onto the first nodes as a first-fit bin packer does;
* ``whole-gpu`` (GPU selector): every pod takes fully free GPUs, the first by index, so a fractional
  pod is alone on its GPU.

This module only defines the two plugins and the profile; the registry
(``gpuaware.placement.registry``, the one place every plugin and policy is listed) names them, so
importing this module changes nothing and a plain ``python -m gpuaware.services.placement`` runs
``GPUAWARE_PLACEMENT_POLICY=KubeDefault``. Sample configuration::

    {"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}],
     "score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import CycleState, GpuSelector, ScorePlugin, exclusive_gpus
from gpuaware.placement.model import MILLI, PodRequest

__all__ = ["KUBE_DEFAULT", "KUBE_DEFAULT_CONFIG", "FirstFitScore", "WholeGpu"]

KUBE_DEFAULT = "KubeDefault"
KUBE_DEFAULT_CONFIG: dict[str, Any] = {
    "filter": [{"name": "resources-fit"}, {"name": "gpu-fit"}, {"name": "whole-gpu-only"}],
    "score": [{"name": "first-fit", "weight": 1}],
    "gpu": "whole-gpu",
}


class FirstFitScore(ScorePlugin):
    """Score ``N - i`` for node ``i`` of ``N``: first fit in node order.

    ``{"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}``
    """

    name: ClassVar[str] = "first-fit"
    per_node: ClassVar[bool] = True

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return snap.num_nodes - nodes.astype(np.int64)


class WholeGpu(GpuSelector):
    """Every pod takes the first fully free GPUs of the node. A fractional pod always finds one under
    the ``whole-gpu-only`` filter; in a profile without that filter it falls back to the first GPU
    that fits.

    ``{"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}``
    """

    name: ClassVar[str] = "whole-gpu"

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        row = snap.gpu_free[node]
        if pod.is_gpu_share:
            whole = np.flatnonzero(row >= MILLI)
            if whole.size:
                return (int(whole[0]),)
            return (int(np.flatnonzero(row >= pod.gpu_milli)[0]),)
        return exclusive_gpus(row, pod.num_gpu)

