"""Gangs: pods that run together or not at all (distributed training), decided all-or-nothing.

`GangTable` holds the members of each gang as they arrive and says when a gang is *ready*: at least
`min_members` present (Volcano's minAvailable). Members beyond the minimum that arrive after the
gang was placed join it as ordinary pods (the gang already runs).

Placing a ready gang is the scheduling session's (`Session.allocate_gang`): every member staged in
one statement, the largest GPU request first, all committed or all discarded.

Topology across members (one rack, one NVLink domain) is not planned yet: each member honours its
own `topology` preference only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaware.placement.model import PodRequest


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
