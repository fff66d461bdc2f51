"""Applying placement decisions to the world exactly once, preemptions and checkpoints included.

No NATS here: the binder gets decisions and checkpoint answers as values and publishes through an
``Outbox`` (``handlers.py`` wires both to JetStream), so the logic is tested without a server too.

Exactly once, in two layers (``gpuaware.bus.dedupe`` explains why both):

1. an in-memory LRU of decision ids already applied: a redelivery or a decision published twice
   is acknowledged and nothing else happens;
2. the world's truth, which survives restarts: when the pod is already bound *by this decision*
   the binder only says so again, with the same ``Nats-Msg-Id`` (``<cluster>/bound/<decision>``),
   which the stream stores once. A pod bound by *another* decision refuses (``already_bound``).

A decision is applied in this order, each step idempotent:

    pod unknown / finished / bound elsewhere   -> bind_failed (permanent), no victim is touched
    each planned victim still bound where planned:
        checkpoint_first and checkpointable    -> binder.checkpoint.requested.v1, wait for the answer
                                                  (its deadline in world time, at least
                                                  ``checkpoint_min_wait_s`` of wall time)
        evict (progress kept if checkpointed)  -> binder.pod.preempted.v1 + binder.pod.pending.v1
    bind exactly the decided slices            -> binder.pod.bound.v1
        or the world refuses                   -> binder.pod.bind_failed.v1 with its reason;
                                                  transient: the pod is published pending again

Victims' handshakes run concurrently; a victim already gone (finished, or moved) is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gpuaware.bus import Deduper
from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    Event,
    PlacementDecided,
    PlannedPreemption,
    PodBindFailed,
    PodFinished,
    PodPending,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.services.binder.world import World, WorldRefused

__all__ = ["Binder", "BinderStats", "Outbox"]

log = logging.getLogger(__name__)

Heartbeat = Callable[[], Awaitable[None]]


class Outbox(Protocol):
    async def publish(self, event: Event, msg_id: str) -> None:
        """Store ``event`` durably under ``msg_id`` (a second publish with the same id is a no-op)."""
        ...


@dataclass(slots=True)
class BinderStats:
    decisions: int = 0
    bound: int = 0
    bind_failed: int = 0
    duplicates: int = 0
    """decisions already applied (in-memory dedupe or the world's truth)"""
    preempted: int = 0
    victims_gone: int = 0
    """planned victims no longer bound where planned: skipped"""
    checkpoints_requested: int = 0
    checkpoints_completed: int = 0
    checkpoint_timeouts: int = 0
    requeued: int = 0
    pending_published: int = 0
    finished: int = 0


class Binder:
    """The binder's logic over one world (see the module docstring)."""

    def __init__(self, world: World, outbox: Outbox, *, source: str, checkpoint_deadline_s: float = 60.0,
                 checkpoint_min_wait_s: float = 1.0, requeue_on_bind_failure: bool = True,
                 dedupe_capacity: int = 100_000) -> None:
        self.world = world
        self.outbox = outbox
        self.source = source
        self.cluster = world.cluster
        self.checkpoint_deadline_s = checkpoint_deadline_s
        self.checkpoint_min_wait_s = checkpoint_min_wait_s
        self.requeue_on_bind_failure = requeue_on_bind_failure
        self.applied = Deduper(dedupe_capacity)
        self.stats = BinderStats()
        self._waiters: dict[str, asyncio.Future[CheckpointAcknowledged]] = {}

    def _id(self, kind: str, key: str) -> str:
        return f"{self.cluster}/{kind}/{key}"

    # --- what the world reports ---------------------------------------------------------------------

    async def emit(self, event: Event, msg_id: str) -> None:
        """Publish an event the world reported (arrival, departure, checkpoint answer)."""
        await self.outbox.publish(event, msg_id)
        if isinstance(event, PodPending):
            self.stats.pending_published += 1
        elif isinstance(event, PodFinished):
            self.stats.finished += 1

    def on_checkpoint_answer(self, ack: CheckpointAcknowledged) -> bool:
        """Hand an answer to the decision waiting for it; False when nobody waits (late, or not ours)."""
        waiter = self._waiters.get(ack.request_id)
        if waiter is None or waiter.done():
            return False
        waiter.set_result(ack)
        return True

    async def snapshot(self, request: WorldSnapshotRequest) -> WorldSnapshotReply:
        return await self.world.snapshot(request)

    # --- decisions ----------------------------------------------------------------------------------

    async def on_decision(self, d: PlacementDecided, heartbeat: Heartbeat | None = None) -> str:
        """Apply one decision; returns ``bound``, ``failed`` or ``duplicate``. Raises only when
        publishing fails (the caller retries the whole decision, which is safe)."""
        self.stats.decisions += 1
        if self.applied.seen(d.decision_id):
            self.stats.duplicates += 1
            return "duplicate"
        current = await self.world.bound(d.pod_uid)
        if current is not None and current.decision_id == d.decision_id:
            await self.outbox.publish(current, self._id("bound", d.decision_id))
            self.applied.remember(d.decision_id)
            self.stats.duplicates += 1
            return "duplicate"
        if current is None and await self.world.state(d.pod_uid) == "pending":
            await self._preempt(d, heartbeat)
        try:
            bound = await self.world.bind(d)
        except WorldRefused as refused:
            await self._failed(d, refused)
            self.applied.remember(d.decision_id)
            return "failed"
        await self.outbox.publish(bound, self._id("bound", d.decision_id))
        self.applied.remember(d.decision_id)
        self.stats.bound += 1
        return "bound"

    async def _failed(self, d: PlacementDecided, refused: WorldRefused) -> None:
        now = self.world.now()
        failed = PodBindFailed(
            source=self.source, emitted_at=now, cluster=self.cluster, pod_uid=d.pod_uid, pod_name=d.pod_name,
            namespace=d.namespace, node=d.node, decision_id=d.decision_id, reason=refused.reason,
            transient=refused.transient, failed_at=now, attempt=d.attempt,
        )
        log.info("decision %s for %s/%s refused: %s", d.decision_id, d.namespace, d.pod_name, refused)
        await self.outbox.publish(failed, self._id("bind_failed", d.decision_id))
        self.stats.bind_failed += 1
        if refused.transient and self.requeue_on_bind_failure:
            pending = await self.world.requeue(d.pod_uid)
            if pending is not None:
                await self._publish_pending(pending)
                self.stats.requeued += 1

    async def _publish_pending(self, pending: PodPending) -> None:
        await self.outbox.publish(pending, self._id("pending", f"{pending.pod_uid}/{pending.attempt}"))
        self.stats.pending_published += 1

    # --- preemptions --------------------------------------------------------------------------------

    async def _preempt(self, d: PlacementDecided, heartbeat: Heartbeat | None) -> None:
        victims = [v for v in d.preemptions if await self.world.state(v.pod_uid) == "bound"]
        self.stats.victims_gone += len(d.preemptions) - len(victims)
        if victims:
            await asyncio.gather(*(self._preempt_one(d, v, heartbeat) for v in victims))

    async def _preempt_one(self, d: PlacementDecided, v: PlannedPreemption, heartbeat: Heartbeat | None) -> None:
        checkpointed = False
        if v.checkpoint_first and await self.world.checkpointable(v.pod_uid):
            checkpointed = await self._checkpoint(d, v, heartbeat)
        try:
            preempted, pending = await self.world.evict(v, checkpointed=checkpointed, decision=d)
        except WorldRefused as refused:
            log.info("victim %s of decision %s not evicted: %s", v.pod_uid, d.decision_id, refused)
            self.stats.victims_gone += 1
            return
        await self.outbox.publish(preempted, self._id("preempted", f"{v.pod_uid}/{d.decision_id}"))
        self.stats.preempted += 1
        if pending is not None:
            await self._publish_pending(pending)
            self.stats.requeued += 1

    async def _checkpoint(self, d: PlacementDecided, v: PlannedPreemption, heartbeat: Heartbeat | None) -> bool:
        """Ask the victim to checkpoint and wait for its answer; True when it completed in time."""
        request_id = f"{d.decision_id}/{v.pod_uid}"
        deadline_s = v.grace_period_s if v.grace_period_s > 0 else self.checkpoint_deadline_s
        now = self.world.now()
        request = CheckpointRequested(
            source=self.source, emitted_at=now, cluster=self.cluster, request_id=request_id, pod_uid=v.pod_uid,
            pod_name=v.pod_name, namespace=v.namespace, node=v.node, reason="preemption", deadline_s=deadline_s,
            requested_at=now, decision_id=d.decision_id,
        )
        waiter = self._waiters.get(request_id)
        if waiter is None or waiter.done():
            waiter = self._waiters[request_id] = asyncio.get_running_loop().create_future()
        try:
            await self.outbox.publish(request, self._id("checkpoint-request", request_id))
            await self.world.request_checkpoint(request)
            self.stats.checkpoints_requested += 1
            ack = await self._wait(waiter, max(self.world.wall_seconds(deadline_s), self.checkpoint_min_wait_s),
                                   heartbeat)
        except WorldRefused as refused:
            log.info("checkpoint of %s not requested: %s", v.pod_uid, refused)
            return False
        finally:
            self._waiters.pop(request_id, None)
        if ack is None:
            self.stats.checkpoint_timeouts += 1
            log.warning("checkpoint %s: no answer within %.1fs (world time), evicting anyway", request_id, deadline_s)
            return False
        done = ack.status == CheckpointStatus.COMPLETED
        self.stats.checkpoints_completed += done
        return done

    @staticmethod
    async def _wait(waiter: asyncio.Future[CheckpointAcknowledged], wall_s: float,
                    heartbeat: Heartbeat | None) -> CheckpointAcknowledged | None:
        """Wait up to ``wall_s``, telling the server every few seconds the decision is in progress."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wall_s
        while True:
            left = until - loop.time()
            if left <= 0:
                return None
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), min(left, 5.0))
            except TimeoutError:
                if heartbeat is not None:
                    await heartbeat()
