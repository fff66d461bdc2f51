"""The world's truth on request: every node with its GPUs, and every bound pod with its slices.

Placement keeps the allocation ledger but the *world* (Kubernetes, or the digital twin) is the
truth; a placement leader that starts (or takes over) asks the binder ``world.snapshot`` and
rebuilds its ledger from the answer, then follows ``binder.pod.*`` events from there.

Why the endpoint is ``world.snapshot`` and not ``binder.snapshot``: the BINDER stream captures
``binder.>``, and a stream capturing a request subject answers the request with a PubAck before
the service can reply. The question is about the world anyway; whichever binder serves the
cluster's world answers it.

Paging: a 1,213-node cluster with every GPU listed is close to NATS' default 1 MiB payload limit,
so nodes and pods come in pages of at most ``limit`` items each. Ask again with
``node_offset=reply.next_node_offset`` / ``pod_offset=reply.next_pod_offset`` until both are
None. ``generation`` changes whenever the truth changes: pages of one generation are one consistent
view; when it moves between pages, the bound/finished/preempted events since then tell the rest.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import GpuIndex, Label, MiB, Name, NonNegInt, Reply, Request, Timestamp
from gpuaware.schemas.placement import GpuSlice

__all__ = [
    "WORLD_SNAPSHOT",
    "WorldGpu",
    "WorldNode",
    "WorldPod",
    "WorldSnapshotReply",
    "WorldSnapshotRequest",
]

WORLD_SNAPSHOT = "world.snapshot"


class WorldGpu(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One GPU as the world has it."""

    uuid: Name
    index: GpuIndex
    model: Name
    """as placement's catalog names it (``A100``, ``T4``, openb's ``G2``), not NVML's long name"""
    memory_mib: MiB = 0
    """0 = undisclosed (placement does not account memory on such GPUs)"""
    nvlink_island: Label | None = None
    numa_node: NonNegInt | None = None


class WorldNode(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One node: capacity, GPUs in index order, placement labels."""

    name: Name
    cpu_milli: NonNegInt
    memory_mib: MiB
    gpu_model: Label = ""
    gpus: tuple[WorldGpu, ...] = ()
    rack: Label | None = None
    zone: Label | None = None
    labels: dict[Label, Label] = msgspec.field(default_factory=dict)


class WorldPod(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A bound pod and exactly what it holds."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    slices: tuple[GpuSlice, ...]
    bound_at: Timestamp
    decision_id: Label | None = None
    """the decision that bound it; None when the binding was observed, not made"""
    queue: Name = "default"
    priority: int = 0
    cpu_milli: NonNegInt = 0
    memory_mib: MiB = 0
    checkpointable: bool = False
    gang_id: Label | None = None


class WorldSnapshotRequest(Request, frozen=True, kw_only=True, tag="world.snapshot.request"):
    """Ask for one page of nodes and one page of bound pods."""

    include_nodes: bool = True
    include_pods: bool = True
    node_offset: NonNegInt = 0
    pod_offset: NonNegInt = 0
    limit: Annotated[int, Meta(ge=1, le=5000)] = 500
    """items per page, for nodes and pods each"""


class WorldSnapshotReply(Reply, frozen=True, kw_only=True, tag="world.snapshot.reply"):
    """One page of the world's truth at ``at`` (the world's time; virtual in the twin)."""

    world: Name
    """``twin`` or ``kubernetes``"""
    at: Timestamp
    generation: NonNegInt
    nodes: tuple[WorldNode, ...] = ()
    pods: tuple[WorldPod, ...] = ()
    total_nodes: NonNegInt = 0
    total_pods: NonNegInt = 0
    """bound pods in the world"""
    pending_pods: NonNegInt = 0
    next_node_offset: NonNegInt | None = None
    next_pod_offset: NonNegInt | None = None


#: the request/reply endpoints this module defines
ENDPOINTS: dict[str, tuple[type[Request], type[Reply]]] = {WORLD_SNAPSHOT: (WorldSnapshotRequest, WorldSnapshotReply)}
