"""Placement's answers: where a pod goes (or why nowhere), and explanations on demand.

``PlacementDecided`` is a command to the binder as much as a fact: the binder binds exactly the
named GPU slices after executing the planned preemptions, and dedupes on ``decision_id`` (a
redelivered decision never binds twice). A decision names GPUs by uuid; ``gpu_index`` travels
along because node-side enforcement (device plugin env, HAMi-compatible annotations) speaks indexes.

``PodUnschedulable`` carries a short ``reason`` code (an open set: ``UnschedulableReason`` lists the
codes placement emits today) and the same per-node-class breakdown an explanation has, so "why is
my pod pending" is answered from the event stream without asking.

``placement.explain`` is a request/reply endpoint answering that question for a pending pod (by uid)
or a hypothetical one (a full ``PodPending``) against the current snapshot, without deciding.
Nodes are grouped into *node classes* (same GPU model, count and topology) so a 5,000-node answer
stays a dozen lines, like kube-scheduler's "0/5000 nodes are available: 4980 Insufficient ...".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import (
    Event,
    GpuIndex,
    Label,
    MiB,
    Milli,
    Name,
    NonNegInt,
    Reply,
    Request,
    Score,
    Seconds,
    Text,
    Timestamp,
)
from gpuaware.schemas.pods import PodPending

__all__ = [
    "NODE_POWER_RECOMMENDED",
    "PLACEMENT_DECIDED",
    "PLACEMENT_EXPLAIN",
    "PLACEMENT_EXPLAINED",
    "POD_UNSCHEDULABLE",
    "ExplainReply",
    "ExplainRequest",
    "Explanation",
    "GpuSlice",
    "NodeClassVerdict",
    "NodePowerRecommended",
    "PlacementDecided",
    "PlacementExplained",
    "PlannedPreemption",
    "PodUnschedulable",
    "UnschedulableReason",
]

PLACEMENT_DECIDED = "placement.pod.decided.v1"
NODE_POWER_RECOMMENDED = "placement.node.power_recommended.v1"
POD_UNSCHEDULABLE = "placement.pod.unschedulable.v1"
PLACEMENT_EXPLAINED = "placement.pod.explained.v1"
PLACEMENT_EXPLAIN = "placement.explain"


class UnschedulableReason(StrEnum):
    """Reason codes placement emits today; readers must accept others (the field is a string)."""

    INSUFFICIENT_GPU = "insufficient_gpu"
    NO_MATCHING_GPU_TYPE = "no_matching_gpu_type"
    NO_MATCHING_MIG_PROFILE = "no_matching_mig_profile"
    TOPOLOGY_UNSATISFIABLE = "topology_unsatisfiable"
    GANG_INCOMPLETE = "gang_incomplete"
    ELASTIC_GROW = "elastic_grow"
    """a worker beyond its elastic job's minimum: it runs only on GPUs no other waiting pod can use"""
    QUOTA_EXCEEDED = "quota_exceeded"
    UNHEALTHY_GPUS = "unhealthy_gpus"
    FRAGMENTED = "fragmented"
    DEFERRED = "deferred"
    INSUFFICIENT_GPU_MEMORY = "insufficient_gpu_memory"
    """the GPU model has less memory than the pod asks of each GPU"""
    MISSING_GPU_CAPABILITY = "missing_gpu_capability"
    TOO_FEW_GPUS = "too_few_gpus"
    """the node has fewer GPUs than the pod asks, even when idle"""
    INSUFFICIENT_CPU = "insufficient_cpu"
    INSUFFICIENT_MEMORY = "insufficient_memory"
    INVALID_REQUEST = "invalid_request"
    """the request contradicts itself; it is also dead-lettered"""


class GpuSlice(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The part of one GPU given to a pod: a fraction, a whole GPU (1000), or a MIG instance."""

    gpu_uuid: Name
    gpu_index: GpuIndex
    gpu_milli: Milli
    memory_mib: MiB
    mig_profile: Label | None = None
    mig_instance_uuid: Label | None = None
    """set when an existing MIG instance is assigned; None with a profile = create one"""


class PlannedPreemption(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A pod to evict (after an optional checkpoint) before the decision can bind."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    reason: Text
    """``priority``, ``reclaim`` (quota), ``defragment``, ``gang``, ``shrink`` (a worker beyond its elastic
    job's minimum: the job keeps running at a smaller world size)"""
    checkpoint_first: bool = False
    """ask the pod to checkpoint (``binder.checkpoint.requested.v1``) and wait before evicting"""
    grace_period_s: Seconds = 30.0


class PlacementDecided(Event, frozen=True, kw_only=True, tag=PLACEMENT_DECIDED):
    """Where a pod goes: node, GPU slices, and the preemptions to execute first."""

    decision_id: Name
    """unique per decision; the binder's idempotency key"""
    pod_uid: Name
    pod_name: Name
    namespace: Name
    node: Name
    slices: tuple[GpuSlice, ...]
    policy: Name
    """the named policy/profile that decided, e.g. ``binpack-fragmentation``"""
    score: Score
    decided_at: Timestamp
    preemptions: tuple[PlannedPreemption, ...] = ()
    gang_id: Label | None = None
    queue: Name = "default"
    attempt: NonNegInt = 0
    cpu_milli: NonNegInt = 0
    """CPU the decision reserves on the node (so a standby placement's ledger matches the leader's)"""
    memory_mib: MiB = 0
    """memory the decision reserves on the node"""
    priority: int = 0
    """the pod's priority (a standby's ledger knows whom a later plan may preempt)"""
    checkpointable: bool = False
    """the pod can checkpoint and resume (a preemption then loses no progress)"""

    def __post_init__(self) -> None:
        uuids = [s.gpu_uuid for s in self.slices]
        if len(set(uuids)) != len(uuids):
            raise ValueError("`slices` names a GPU twice")


class NodeClassVerdict(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How the nodes of one class fared: each node counts once, under its first failing filter."""

    node_class: Name
    """e.g. ``8xA100-SXM4-80GB/nvswitch``"""
    nodes: NonNegInt
    feasible: NonNegInt = 0
    rejected: dict[Label, NonNegInt] = msgspec.field(default_factory=dict)
    """reason code -> nodes rejected for it"""
    best_node: Label | None = None
    best_score: Score | None = None

    def __post_init__(self) -> None:
        if self.feasible + sum(self.rejected.values()) != self.nodes:
            raise ValueError(
                f"node class {self.node_class}: feasible {self.feasible} + rejected "
                f"{sum(self.rejected.values())} != nodes {self.nodes}"
            )


class Explanation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Placement's reasoning for one pod against one snapshot."""

    schedulable: bool
    summary: Text
    """one line for humans, e.g. ``0/12 nodes: 8 insufficient_gpu, 4 no_matching_gpu_type``"""
    node_classes: tuple[NodeClassVerdict, ...] = ()
    best_node: Label | None = None
    best_score: Score | None = None
    quota_admitted: bool | None = None
    """None: quota was not asked"""
    quota_reason: Text = ""


class PodUnschedulable(Event, frozen=True, kw_only=True, tag=POD_UNSCHEDULABLE):
    """Placement found no place for a pod now, with the reason and per-node-class counts."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    reason: Name
    """a code, see ``UnschedulableReason``"""
    message: Text = ""
    node_classes: tuple[NodeClassVerdict, ...] = ()
    retry_after_s: Seconds | None = None
    """when placement will try again on its own, if it knows; None = on the next relevant event"""
    attempt: NonNegInt = 0
    pod: PodPending | None = None
    """the request itself, when placement keeps the pod waiting (so a standby rebuilds its queue)"""


class ExplainRequest(Request, frozen=True, kw_only=True, tag="placement.explain.request"):
    """Explain the placement of a pending pod (``pod_uid``) or a hypothetical one (``pod``)."""

    pod_uid: Label | None = None
    """a pending pod placement already knows"""
    pod: PodPending | None = None
    """or a hypothetical pod to evaluate as if it were pending"""
    ask_quota: bool = True
    max_node_classes: Annotated[int, Meta(ge=1, le=1000)] = 50

    def __post_init__(self) -> None:
        if (self.pod_uid is None) == (self.pod is None):
            raise ValueError("give exactly one of `pod_uid` and `pod`")


class ExplainReply(Reply, frozen=True, kw_only=True, tag="placement.explain.reply"):
    """Why a pod can or cannot be placed now, per node class."""

    pod_uid: Name
    explanation: Explanation


class PlacementExplained(Event, frozen=True, kw_only=True, tag=PLACEMENT_EXPLAINED):
    """An explanation kept for audit.

    Published when placement answers ``placement.explain`` and when a pod stays pending longer than
    the configured threshold.
    """

    pod_uid: Name
    pod_name: Name
    namespace: Name
    explanation: Explanation
    explained_at: Timestamp


class NodePowerRecommended(Event, frozen=True, kw_only=True, tag=NODE_POWER_RECOMMENDED):
    """Switch one idle GPU node off, or one switched-off node on, ahead of demand (the node-power
    planner of ``gpuaware.power``, run by the placement leader). The binder carries it out (the twin
    switches the node; in Kubernetes it cordons the node and annotates it for the autoscaler or BMC
    tool that switches it) and answers with ``binder.node.power_changed.v1``. Placement takes no pod
    to a node it recommended off from the moment it recommends it, and none to a node switched on
    until it is ready.
    """

    recommendation_id: Label
    """unique per recommendation (the dedupe id and what the binder's answer names)"""
    node: Name
    action: Literal["power-down", "power-up"]
    recommended_at: Timestamp
    """on the world's clock (a twin's virtual one)"""
    reason: Text
    """the planner's arithmetic, e.g. ``keep 12 of 16 nodes powered: p90 demand 9.3 nodes + buffer 2``"""
    powered_target: NonNegInt
    """GPU nodes the planner keeps powered (on or booting) from now"""
    demand_nodes: NonNegInt
    """nodes busy now, with the pending pods' GPUs in nodes"""
    forecast_nodes: Annotated[float, Meta(ge=0)] | None = None
    """the forecast's p90 peak over the boot delay, in nodes; None when no forecast was at hand"""


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (PlacementDecided, PodUnschedulable, PlacementExplained, NodePowerRecommended)

#: the request/reply endpoints this module defines
ENDPOINTS: dict[str, tuple[type[Request], type[Reply]]] = {PLACEMENT_EXPLAIN: (ExplainRequest, ExplainReply)}
