"""Quota: may this pod run now, and how much of its share is each tenant queue using?

``quota.admit`` is a synchronous question placement asks before committing a decision (NATS
micro request/reply, answered by the quota service from its in-memory ledger). The reply names the
queue that was charged and, when admission needs capacity lent to other queues back, the pods
that would be reclaimed; placement turns those into planned preemptions. ``dry_run`` asks without
reserving (used by ``placement.explain``).

``QuotaUsageReported`` is the periodic snapshot of every queue (guaranteed, limit, used, fair share,
weight), for dashboards, the forecaster and late joiners. Amounts use ``Resources`` with GPU
compute in thousandths of a GPU, like the rest of the contract.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, Label, MiB, Name, NonNegInt, Reply, Request, Seconds, Text, Timestamp
from gpuaware.schemas.pods import PodPending

__all__ = [
    "QUOTA_ADMIT",
    "QUOTA_USAGE_REPORTED",
    "AdmitReply",
    "AdmitRequest",
    "QueueUsage",
    "QuotaUsageReported",
    "ReclaimCandidate",
    "Resources",
]

QUOTA_ADMIT = "quota.admit"
QUOTA_USAGE_REPORTED = "quota.usage.reported.v1"


class Resources(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An amount of resources; GPU compute in thousandths of a GPU."""

    gpu_milli: NonNegInt = 0
    """GPU compute in thousandths of a GPU: 8 whole GPUs = 8000"""
    gpu_memory_mib: MiB = 0
    cpu_milli: NonNegInt = 0
    memory_mib: MiB = 0


class AdmitRequest(Request, frozen=True, kw_only=True, tag="quota.admit.request"):
    """May this pod run now? Asked by placement before it commits a decision."""

    pod: PodPending
    node: Label | None = None
    """the node placement chose, when it has chosen (quota may be per node pool)"""
    gpu_milli: NonNegInt | None = None
    """GPU compute the decision really takes, if it differs from the pod's request (MIG rounding)"""
    allow_reclaim: bool = True
    dry_run: bool = False


class ReclaimCandidate(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A running pod of another queue whose eviction would return borrowed capacity."""

    pod_uid: Name
    pod_name: Name
    namespace: Name
    queue: Name
    node: Name
    frees: Resources
    reason: Text = "reclaim"


class AdmitReply(Reply, frozen=True, kw_only=True, tag="quota.admit.reply"):
    """Quota's answer: admitted or not, the queue charged, and what admission would reclaim."""

    pod_uid: Name
    admitted: bool
    queue: Name
    """the queue charged (after defaulting and hierarchy resolution)"""
    reason: Text = ""
    """why not (``over_limit``, ``over_fair_share``, ``queue_unknown`` ...), or how (``borrowed``)"""
    would_reclaim: tuple[ReclaimCandidate, ...] = ()
    retry_after_s: Seconds | None = None
    """when refused: the earliest time worth asking again, if quota can tell"""

    def __post_init__(self) -> None:
        if self.would_reclaim and not self.admitted:
            raise ValueError("`would_reclaim` is only meaningful when `admitted`")


class QueueUsage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tenant queue: its share parameters and current use."""

    queue: Name
    parent: Label | None = None
    weight: Annotated[float, Meta(gt=0)] = 1.0
    guaranteed: Resources = msgspec.field(default_factory=Resources)
    limit: Resources | None = None
    """None = no upper bound besides the cluster"""
    used: Resources = msgspec.field(default_factory=Resources)
    fair_share: Resources = msgspec.field(default_factory=Resources)
    running_pods: NonNegInt = 0
    pending_pods: NonNegInt = 0


class QuotaUsageReported(Event, frozen=True, kw_only=True, tag=QUOTA_USAGE_REPORTED):
    """Every queue of one cluster at ``as_of``; the latest one replaces all earlier ones."""

    as_of: Timestamp
    queues: tuple[QueueUsage, ...]
    jain_index: Annotated[float, Meta(ge=0.0, le=1.0, title="Jain's index")] | None = None
    """Jain's index over the leaf queues asking for GPUs, of held / water-filled fair share (1 = fair);
    None when fewer than two queues ask"""
    reclaims: NonNegInt = 0
    """reclaim plans answered since the service started"""


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (QuotaUsageReported,)

#: the request/reply endpoints this module defines
ENDPOINTS: dict[str, tuple[type[Request], type[Reply]]] = {QUOTA_ADMIT: (AdmitRequest, AdmitReply)}
