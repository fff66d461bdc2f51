"""What a node has: its GPUs, their MIG layout and where they sit (NVLink island, NUMA, rack).

The node agent announces a *full* snapshot of its node on start, on every change (MIG
reconfiguration, a GPU lost) and periodically, so a reader that joins late or whose stream aged
out rebuilds the view from the latest message per node alone; there are no incremental diffs to
replay. Placement keeps the cluster view; the collector persists it.

Topology is given the way placement consumes it: ``nvlink_island`` is an opaque id shared by every
GPU reachable over NVLink from each other (the whole node on NVSwitch boards, a pair on PCIe
bridges, a rack on NVL72), ``numa_node`` is the CPU socket the GPU hangs off, ``rack``/``zone``
are failure and bandwidth domains from node labels.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, GpuIndex, Label, MiB, Name, NonNegInt

__all__ = ["NODE_INVENTORY", "GpuInfo", "MigInstance", "MigMode", "MigProfile", "NodeInventory"]

NODE_INVENTORY = "telemetry.node.inventory.v1"


class MigMode(StrEnum):
    UNSUPPORTED = "unsupported"
    DISABLED = "disabled"
    ENABLED = "enabled"
    PENDING = "pending"
    """a mode change waits for a GPU reset; treat the GPU as unavailable for new work"""


class MigProfile(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A GPU instance profile the GPU supports (``nvmlDeviceGetGpuInstanceProfileInfo``)."""

    name: Name
    """e.g. ``1g.10gb``, ``3g.40gb``"""
    profile_id: NonNegInt
    slices: Annotated[int, Meta(ge=1, le=8)]
    memory_mib: MiB
    max_instances: Annotated[int, Meta(ge=1, le=8)]


class MigInstance(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A MIG device that exists now."""

    uuid: Name
    """``MIG-...``"""
    profile: Name
    gpu_instance_id: NonNegInt
    compute_instance_id: NonNegInt
    memory_mib: MiB
    placement_start: NonNegInt | None = None
    """first slice of the instance; placement uses it to reason about fragmentation"""


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One physical GPU: identity, capabilities, topology and MIG layout."""

    uuid: Name
    """``GPU-...``; the stable identity every other message uses"""
    index: GpuIndex
    model: Name
    """as NVML names it, e.g. ``NVIDIA A100-SXM4-80GB``"""
    memory_mib: MiB
    pci_bus_id: Name
    """e.g. ``00000000:07:00.0``"""
    compute_capability: Annotated[str, Meta(pattern=r"^[0-9]+\.[0-9]+$")] = "0.0"
    tensor_cores: bool = False
    fp8: bool = False
    nvlink_links: Annotated[int, Meta(ge=0, le=36)] = 0
    """active NVLink links; 0 = PCIe only"""
    nvlink_island: Label | None = None
    """GPUs with the same id talk over NVLink; None = no NVLink peers"""
    numa_node: NonNegInt | None = None
    mig_mode: MigMode = MigMode.UNSUPPORTED
    power_limit_w: Annotated[float, Meta(ge=0)] | None = None
    """the enforced board power limit; None = unknown (placement then cannot judge power headroom)"""
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_instances: tuple[MigInstance, ...] = ()


class NodeInventory(Event, frozen=True, kw_only=True, tag=NODE_INVENTORY):
    """Full inventory snapshot of one node; the latest one per node replaces all earlier ones."""

    node: Name
    gpus: tuple[GpuInfo, ...]
    rack: Label | None = None
    zone: Label | None = None
    driver_version: Label | None = None
    cuda_version: Label | None = None
    cpu_milli: NonNegInt = 0
    memory_mib: MiB = 0
    labels: dict[Label, Label] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        uuids = {g.uuid for g in self.gpus}
        indexes = {g.index for g in self.gpus}
        if len(uuids) != len(self.gpus) or len(indexes) != len(self.gpus):
            raise ValueError(f"`gpus` of node {self.node!r} repeats a uuid or an index")


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (NodeInventory,)
