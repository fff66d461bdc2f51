"""Gangs: pods that run together or not at all (distributed training), decided all-or-nothing.

Two pieces, both pure:

- `GangTable` holds the members of each gang as they arrive and says when a gang is *ready*: at
  least `min_members` present (Volcano's minAvailable). Members beyond the minimum that arrive after
  the gang was placed join it as ordinary pods (the gang already runs).
- `place_gang` stages a ready gang on the live cluster: members are scheduled one after another
  (largest GPU request first, so the hard ones choose first), each reserved before the next is
  scheduled so they never count the same free GPU twice; if any member finds no place, every
  reservation made so far is undone and the cluster is exactly as before. This is Volcano's
  Statement (stage, then commit or discard) on our ledger.

Topology across members (one rack, one NVLink domain) is not planned here yet: each member honours
its own `topology` preference only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuaware.placement.cluster import Cluster, Snapshot
from gpuaware.placement.framework import Decision, Status
from gpuaware.placement.model import PodRequest


class SchedulesPods(Protocol):
    def schedule(self, pod: PodRequest, snap: Snapshot) -> Decision | Status: ...


@dataclass(frozen=True, slots=True)
class GangFailure:
    """The member that found no place, and why (`status.code` says whether retrying can help)."""

    member: PodRequest
    status: Status


@dataclass(slots=True)
class Gang:
    gang_id: str
    min_members: int
    members: dict[str, PodRequest] = field(default_factory=dict)
    placed: bool = False

    @property
    def ready(self) -> bool:
        return not self.placed and len(self.members) >= self.min_members


class GangTable:
    """Members by gang, in arrival order."""

    def __init__(self) -> None:
        self.gangs: dict[str, Gang] = {}

    def add(self, pod: PodRequest) -> Gang:
        """Record `pod` (keyed by name) under its gang; returns the gang (check `ready`/`placed`)."""
        gang = self.gangs.get(pod.gang_id)
        if gang is None:
            gang = self.gangs[pod.gang_id] = Gang(pod.gang_id, max(1, pod.gang_min_members))
        gang.min_members = max(gang.min_members, pod.gang_min_members)
        gang.members.setdefault(pod.name, pod)
        return gang

    def waiting(self, gang_id: str) -> int:
        gang = self.gangs.get(gang_id)
        return 0 if gang is None else len(gang.members)

    def mark_placed(self, gang_id: str) -> None:
        self.gangs[gang_id].placed = True

    def remove_member(self, name: str, gang_id: str) -> None:
        gang = self.gangs.get(gang_id)
        if gang is None:
            return
        gang.members.pop(name, None)
        if not gang.members:
            del self.gangs[gang_id]


def place_gang(scheduler: SchedulesPods, cluster: Cluster,
               members: Sequence[PodRequest]) -> list[Decision] | GangFailure:
    """Reserve every member, or none. On success the reservations are made (commit them by
    publishing the decisions, or undo them with `Cluster.unreserve`)."""
    order = sorted(members, key=lambda p: (-p.total_gpu_milli, -p.cpu_milli, p.name))
    decided: list[Decision] = []
    for pod in order:
        result = scheduler.schedule(pod, cluster.snapshot())
        if isinstance(result, Status):
            for d in decided:
                cluster.unreserve(d.pod)
            return GangFailure(pod, result)
        cluster.reserve(pod, result.node, result.gpus)
        decided.append(result)
    return decided
