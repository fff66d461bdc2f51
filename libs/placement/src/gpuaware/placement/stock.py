"""KubeDefault: stock Kubernetes GPU scheduling, registered as a policy so the demo's baseline runs
through the same services and code paths as gpuaware's own policy.

What stock Kubernetes does with GPUs (kube-scheduler + the NVIDIA device plugin): ``nvidia.com/gpu``
is an integer, so a pod gets whole GPUs and a fractional request is rounded up to one GPU; the
queue is FIFO within a priority; nothing is preempted to undo fragmentation. This profile
reproduces that with two plugins:

* ``first-fit`` (score): the lowest-indexed feasible node wins (nodes are in name order in the
  placement service's view), so pods pile onto the first nodes as a first-fit bin packer does; a
  pod asking a fraction of a GPU ranks every node with a fully free GPU above every node without.
* ``whole-gpu`` (GPU selector): every pod takes fully free GPUs, the first by index. A fractional
  pod is thus alone on its GPU as long as any whole GPU is free.

Known gap: filters are not part of a profile (``build_scheduler`` builds the default
``ResourcesFit`` + ``GpuFit`` filters), so when *no* feasible node has a fully free GPU left a
fractional pod shares a GPU (first fit) instead of waiting as it would on stock Kubernetes. That
favours the baseline; the demo counts how often it happened (``shared_fallbacks``). A ``filter``
list in profiles would close it.

Importing this module registers the policy (``gpuaware.placement.registry.register_policy``);
a placement process chooses it with ``GPUAWARE_PLACEMENT_POLICY=KubeDefault`` once this module is
imported there. Sample configuration::

    {"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import CycleState, exclusive_gpus
from gpuaware.placement.model import MILLI, PodRequest
from gpuaware.placement.registry import PluginContext, register_gpu_selector, register_policy, register_score

__all__ = ["KUBE_DEFAULT", "KUBE_DEFAULT_CONFIG", "FirstFitScore", "WholeGpu", "shared_fallback"]

KUBE_DEFAULT = "KubeDefault"
KUBE_DEFAULT_CONFIG: dict[str, Any] = {"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}


class FirstFitScore:
    """Score ``2N - i`` for node ``i`` of ``N`` when the pod can have a fully free GPU there, else ``N - i``:
    first fit in node order, nodes with a whole free GPU first for fractional pods.

    ``{"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}``
    """

    name: ClassVar[str] = "first-fit"

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        n = snap.num_nodes
        out = n - nodes.astype(np.int64)
        if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
            whole = (snap.gpu_free[nodes] >= MILLI).any(axis=1)
            out = out + np.where(whole, n, 0)
        return out


class WholeGpu:
    """Every pod takes the first fully free GPUs of the node; a fractional pod falls back to the
    first GPU that fits only when the node has no whole GPU free (see the module docstring).

    ``{"score": [{"name": "first-fit", "weight": 1}], "gpu": "whole-gpu"}``
    """

    name: ClassVar[str] = "whole-gpu"

    def select(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, node: int) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        row = snap.gpu_free[node]
        if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
            whole = np.flatnonzero(row >= MILLI)
            if whole.size:
                return (int(whole[0]),)
            return (int(np.flatnonzero(row >= pod.gpu_milli)[0]),)
        return exclusive_gpus(row, pod.num_gpu)


def shared_fallback(gpu_used_milli_before: int, gpu_milli: int) -> bool:
    """Whether a KubeDefault placement of a ``gpu_milli`` pod on a GPU already holding
    ``gpu_used_milli_before`` is the documented fallback (a fraction sharing a GPU)."""
    return gpu_milli < MILLI and gpu_used_milli_before > 0


def _first_fit(ctx: PluginContext, args: Mapping[str, Any]) -> FirstFitScore:
    return FirstFitScore()


def _whole(ctx: PluginContext, args: Mapping[str, Any]) -> WholeGpu:
    return WholeGpu()


register_score("first-fit", _first_fit)
register_gpu_selector("whole-gpu", _whole)
register_policy(KUBE_DEFAULT, KUBE_DEFAULT_CONFIG)
