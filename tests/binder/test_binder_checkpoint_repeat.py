"""The binder repeats a checkpoint request until the workload answers: the workload listens on core
NATS (at most once), and a request it did not receive would otherwise end in an eviction at the
deadline with its work lost. The repeat carries the same message id, so the stream stores one
request. In process: the binder over the twin, whose own delivery of the request is switched off
(the workload hears only the bus), and an outbox that loses the first copy on its way to the
workload, as core NATS now and then does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from binder_helpers import decision, sim_pod, twin_world

from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    Event,
    PlannedPreemption,
    PodPreempted,
)
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.twin_world import TwinWorld


class DeafTwinWorld(TwinWorld):
    """The twin, except that it does not hand checkpoint requests to its pods: only the bus does."""

    async def request_checkpoint(self, request: CheckpointRequested) -> None:
        return None


@dataclass
class LossyBus:
    """Stores each message id once (the stream); hands every copy of a checkpoint request to the
    workload, which loses the first and answers the next."""

    stored: dict[str, Event] = field(default_factory=dict)
    copies_seen: int = 0
    binder: Binder | None = None

    async def publish(self, event: Event, msg_id: str) -> None:
        self.stored.setdefault(msg_id, event)
        if isinstance(event, CheckpointRequested):
            self.copies_seen += 1
            if self.copies_seen == 2 and self.binder is not None:
                self.binder.on_checkpoint_answer(CheckpointAcknowledged(
                    source="workload", emitted_at=event.requested_at, cluster=event.cluster,
                    request_id=event.request_id, pod_uid=event.pod_uid, namespace=event.namespace,
                    status=CheckpointStatus.COMPLETED, acknowledged_at=event.requested_at))


async def test_a_lost_request_is_sent_again_and_the_victim_keeps_its_work() -> None:
    plain = twin_world(sim_pod("victim", ckpt=True), sim_pod("hi", priority=100))
    world = DeafTwinWorld(plain.twin, plain.clock, source="binder/test", skip_idle=False, tick_s=0.05)
    bus = LossyBus()
    binder = Binder(world, bus, source="binder/test", checkpoint_deadline_s=60.0)
    bus.binder = binder
    stop = asyncio.Event()
    loop = asyncio.create_task(world.run(binder.emit, stop))
    try:
        while await world.state("hi") != "pending" or await world.state("victim") != "pending":
            await asyncio.sleep(0.02)
        assert await binder.on_decision(decision(world, "d-victim", "victim", "n2", [(0, 1000, 0)])) == "bound"
        plan = PlannedPreemption(pod_uid="victim", pod_name="victim", namespace="t", node="n2", reason="priority",
                                 grace_period_s=60.0, checkpoint_first=True)
        assert await binder.on_decision(decision(world, "d-hi", "hi", "n2", [(0, 1000, 0)], (plan,))) == "bound"
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)
    requests = [e for e in bus.stored.values() if isinstance(e, CheckpointRequested)]
    preempted = [e for e in bus.stored.values() if isinstance(e, PodPreempted)]
    assert bus.copies_seen >= 2 and len(requests) == 1       # sent again, stored once
    assert [p.checkpointed for p in preempted] == [True]      # answered in time: the work is kept
    assert binder.stats.checkpoint_timeouts == 0
