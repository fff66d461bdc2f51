"""A pod waiting for GPUs: everything placement and quota need to decide, nothing more.

The binder turns a Kubernetes Pod (its requests, annotations, priority class, owner CRDs) or a
digital-twin job into one ``PodPending``; from then on no service looks at Kubernetes objects.
A pod asking only ``nvidia.com/gpu: N`` becomes ``num_gpu=N, gpu_milli=1000`` with every
other field at its default, so the plain case stays plain.

Fractions: ``gpu_milli`` is the share of *one* GPU's compute (0..1000) and is meaningful only with
``num_gpu == 1``; multi-GPU pods take whole GPUs. ``gpu_memory_mib`` is the memory asked of each
GPU (0 = no explicit limit: the whole GPU when ``gpu_milli == 1000``). A ``mig_profile`` asks
for one MIG instance of that profile instead of a time/space-shared fraction.

Closed sets that change placement's logic are enums (topology preference, QoS); open sets are
strings (GPU model names, queue names, priority class names).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, Label, MiB, Milli, Name, NonNegInt, Seconds, Timestamp

__all__ = [
    "POD_PENDING",
    "GpuCapabilities",
    "PodPending",
    "QosClass",
    "TopologyPreference",
]

POD_PENDING = "binder.pod.pending.v1"


class TopologyPreference(StrEnum):
    """Where the GPUs of one pod (or of one gang) should sit relative to each other."""

    NONE = "none"
    SAME_NVLINK_ISLAND = "same-nvlink-island"
    SAME_NUMA = "same-numa"
    SAME_RACK = "same-rack"


class QosClass(StrEnum):
    """Kubernetes QoS class (Guaranteed / Burstable / BestEffort), in this contract's spelling."""

    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BEST_EFFORT = "best-effort"


class GpuCapabilities(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What any GPU given to the pod must have; defaults ask for nothing."""

    tensor_cores: bool = False
    fp8: bool = False
    nvlink: bool = False
    min_memory_mib: MiB = 0
    """total memory of the GPU model, not free memory (that is ``gpu_memory_mib``)"""
    min_compute_capability: Annotated[str, Meta(pattern=r"^[0-9]+\.[0-9]+$")] | None = None


class PodPending(Event, frozen=True, kw_only=True, tag=POD_PENDING):
    """A pod waiting for placement, with everything placement and quota need to decide."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    submitted_at: Timestamp
    cpu_milli: NonNegInt = 0
    memory_mib: MiB = 0
    num_gpu: Annotated[int, Meta(ge=0, le=64)] = 0
    gpu_milli: Milli = 1000
    gpu_memory_mib: MiB = 0
    gpu_types: Annotated[tuple[Name, ...], Meta(max_length=64)] = ()
    """allowed GPU models (as inventory names them, or a short alias such as ``A100-80GB``); empty = any"""
    capabilities: GpuCapabilities = msgspec.field(default_factory=GpuCapabilities)
    mig_profile: Name | None = None
    gang_id: Name | None = None
    gang_min_members: Annotated[int, Meta(ge=1)] = 1
    gang_max_members: Annotated[int, Meta(ge=0, le=4096)] = 0
    """an elastic gang's most members (min..max workers, torchrun-style); 0: fixed at ``gang_min_members``"""
    topology: TopologyPreference = TopologyPreference.NONE
    queue: Name = "default"
    priority: int = 0
    priority_class: Label = ""
    checkpointable: bool = False
    deferrable: bool = False
    qos: QosClass = QosClass.BEST_EFFORT
    expected_duration_s: Seconds | None = None
    """a hint (trace replay, user estimate) for backfill and deferral; None = unknown"""
    attempt: NonNegInt = 0
    """how many times the pod was re-queued (bind failure, preemption, unschedulable retry)"""
    job_preemptions: NonNegInt = 0
    """how many times the pod's job was preempted before this pod existed: a Job's (JobSet's,
    PyTorchJob's) replacement for an evicted pod has a new uid and attempt 0, and inherits its job's
    count here, so a cap on preemptions per job holds across replacements"""

    def __post_init__(self) -> None:
        if self.num_gpu >= 1 and self.gpu_milli == 0 and self.mig_profile is None:
            raise ValueError(f"`gpu_milli` 0 with `num_gpu` {self.num_gpu}: a GPU pod asks 1..1000 thousandths of "
                             "a GPU (or a `mig_profile`)")
        if self.gpu_milli < 1000 and self.num_gpu != 1:
            raise ValueError(f"`gpu_milli` {self.gpu_milli} < 1000 needs `num_gpu` == 1, got {self.num_gpu}")
        if self.mig_profile is not None and self.num_gpu != 1:
            raise ValueError(f"`mig_profile` needs `num_gpu` == 1, got {self.num_gpu}")
        if self.gang_min_members > 1 and self.gang_id is None:
            raise ValueError("`gang_min_members` > 1 needs a `gang_id`")
        if self.gang_max_members and self.gang_id is None:
            raise ValueError("`gang_max_members` needs a `gang_id`")
        if self.gang_max_members and self.gang_max_members < self.gang_min_members:
            raise ValueError(f"`gang_max_members` {self.gang_max_members} is below `gang_min_members` "
                             f"{self.gang_min_members}")

    @property
    def gpu_milli_total(self) -> int:
        """GPU compute asked in thousandths of a GPU, across all GPUs (what quota counts)."""
        return self.gpu_milli if self.num_gpu == 1 else 1000 * self.num_gpu


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (PodPending,)
