"""What the binder needs of a world: one small Protocol, spoken in the contract's messages.

A world is where pods really run: the digital twin (``twin_world.TwinWorld``) or Kubernetes (its
own issue: Binding subresource, eviction API, a watch). The binder never knows which; it asks the
world for the truth about a pod, tells it to bind or evict, relays checkpoint requests, and
publishes what the world reports (``run(emit, stop)``: pods arriving, pods finishing, checkpoint
answers). Every method is async because a real world answers over the network.

A world refuses with ``WorldRefused(reason, message, transient)``: ``reason`` is a short code
(``unknown_pod``, ``gpu_over_allocated``, ...) carried verbatim in ``binder.pod.bind_failed.v1``;
``transient`` says whether deciding again can help (it becomes ``PodBindFailed.transient``).

For an elastic job (a gang that may run between its minimum and maximum worker count) the world
also says which of its workers run now (``elastic_workers``), so the binder can resize it through
the checkpoint handshake before it binds a worker more or evicts one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from gpuaware.schemas import (
    CheckpointRequested,
    Event,
    NodePowerChanged,
    NodePowerRecommended,
    PlacementDecided,
    PlannedPreemption,
    PodBound,
    PodPending,
    PodPreempted,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)

__all__ = ["ElasticWorkers", "Emit", "PodStateName", "Worker", "World", "WorldRefused"]

#: publish one event the world reports, with its de-duplication id (unique per stream)
Emit = Callable[[Event, str], Awaitable[None]]

PodStateName = Literal["unknown", "pending", "bound", "finished"]


class WorldRefused(Exception):
    """The world cannot do what it was asked; nothing changed."""

    def __init__(self, reason: str, message: str, *, transient: bool) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.transient = transient


@dataclass(frozen=True, slots=True)
class Worker:
    """A bound worker of an elastic job: where a resize's checkpoint request goes."""

    pod_uid: str
    pod_name: str
    namespace: str
    node: str


@dataclass(frozen=True, slots=True)
class ElasticWorkers:
    """An elastic job as the resize handshake needs it: its minimum and the workers bound now."""

    job: str
    """``<namespace>/<gang id>``"""
    minimum: int
    running: tuple[Worker, ...]

    def runs(self) -> bool:
        """At least its minimum is bound: a worker joining or leaving resizes a running job."""
        return len(self.running) >= self.minimum


class World(Protocol):
    kind: str
    """``twin`` or ``kubernetes``"""
    cluster: str

    def now(self) -> float:
        """The world's time (virtual in the twin): every timestamp the binder writes uses it."""
        ...

    def wall_seconds(self, world_seconds: float) -> float:
        """How long ``world_seconds`` of the world's time last on the wall clock."""
        ...

    async def run(self, emit: Emit, stop: asyncio.Event) -> None:
        """Report what happens in the world (arrivals, departures, checkpoint answers) until ``stop``."""
        ...

    async def state(self, pod_uid: str) -> PodStateName: ...

    async def bound(self, pod_uid: str) -> PodBound | None:
        """How the pod is bound now (with the decision that bound it), or None."""
        ...

    async def checkpointable(self, pod_uid: str) -> bool: ...

    async def elastic_workers(self, pod_uid: str) -> ElasticWorkers | None:
        """The elastic job the pod is a worker of, with its workers bound now; None when the pod is
        not a worker of an elastic job (a fixed gang, a lone pod, an unknown pod)."""
        ...

    async def bind(self, decision: PlacementDecided) -> PodBound:
        """Bind exactly as decided; raises ``WorldRefused``."""
        ...

    async def evict(self, victim: PlannedPreemption, *, checkpointed: bool,
                    decision: PlacementDecided) -> tuple[PodPreempted, PodPending | None]:
        """Evict a planned victim; returns the preemption event and, when the pod goes back to the
        queue, its new pending event. Raises ``WorldRefused`` when the victim is not (or no longer)
        bound where planned."""
        ...

    async def request_checkpoint(self, request: CheckpointRequested) -> None:
        """Deliver a checkpoint request to the pod (the twin schedules its simulated answer)."""
        ...

    async def requeue(self, pod_uid: str) -> PodPending | None:
        """The pod waits again after a failed bind: its pending event (attempt + 1), or None when
        it no longer waits."""
        ...

    async def snapshot(self, request: WorldSnapshotRequest) -> WorldSnapshotReply: ...

    async def power(self, rec: NodePowerRecommended) -> NodePowerChanged:
        """Carry out a node-power recommendation and say the node's power now; a recommendation the
        world cannot carry out (pods bound there meanwhile, power switching not enabled) is answered
        with the node's state as it is and the reason, never raised."""
        ...
