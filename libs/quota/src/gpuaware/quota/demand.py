"""What quota counts: a pod's demand as a resource vector, and a running pod as quota sees it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuaware.quota.tree import ANY_TYPE, RESOURCES

__all__ = ["GPU_MILLI", "Allocation", "Demand", "demand_of", "guarded"]

GPU_MILLI = RESOURCES.index("gpu_milli")


def guarded(g: np.ndarray) -> np.ndarray:
    """The resources a guarantee speaks for: GPUs always, the others only when it names them (a queue
    guaranteed 4 GPUs and no CPU does not borrow because its pods ask for CPU)."""
    mask = g > 0
    mask[:2] = True
    return mask


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod asks for, as a resource vector (see ``RESOURCES``) and the GPU type it takes."""

    vector: np.ndarray
    gpu_type: str = ANY_TYPE

    @classmethod
    def of(cls, *, gpus: int = 0, gpu_milli: int = 0, gpu_memory_mib: int = 0, cpu_milli: int = 0,
           memory_mib: int = 0, gpu_type: str = ANY_TYPE) -> Demand:
        return cls(np.array([gpus, gpu_milli, gpu_memory_mib, cpu_milli, memory_mib], dtype=np.int64), gpu_type)


def demand_of(num_gpu: int, gpu_milli: int, gpu_memory_mib: int, cpu_milli: int, memory_mib: int,
              gpu_type: str = ANY_TYPE, gpu_milli_total: int | None = None) -> Demand:
    """A pod's demand: whole GPUs count as devices; a fraction counts only as compute and memory."""
    whole = num_gpu if gpu_milli >= 1000 else 0
    total = gpu_milli_total if gpu_milli_total is not None else (gpu_milli if num_gpu == 1 else 1000 * num_gpu)
    return Demand.of(gpus=whole, gpu_milli=total, gpu_memory_mib=gpu_memory_mib * max(num_gpu, 1),
                     cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_type=gpu_type)


@dataclass(slots=True)
class Allocation:
    """A running pod as quota sees it."""

    uid: str
    queue: str
    demand: Demand
    started_at: float
    node: str | None = None
    priority: int = 0
    checkpointable: bool = False
    last_checkpoint_at: float | None = None
    name: str = ""
    namespace: str = ""
    preemptions: int = 0
    """times the pod (or, for a controller's replacement pod, its job) was preempted before this run
    (``QuotaLedger.bind`` raises it to the ledger's count): the tree's ``max_preemptions_per_pod``
    stops quota's plans naming it again"""

    def progress_at_risk(self, now: float) -> float:
        """Seconds of work lost if stopped now: since the last checkpoint (or since start)."""
        since = self.last_checkpoint_at if self.checkpointable and self.last_checkpoint_at else self.started_at
        return max(0.0, now - since)
