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
                                                  ``checkpoint_min_wait_s`` of wall time; the
                                                  request repeated until answered, ``_wait``)
        evict (progress kept if checkpointed)  -> binder.pod.preempted.v1 + binder.pod.pending.v1
    the pod joins its elastic job while it runs -> the resize handshake (a grow)
    bind exactly the decided slices            -> binder.pod.bound.v1
        or the world refuses                   -> binder.pod.bind_failed.v1 with its reason;
                                                  transient: the pod is published pending again

Victims' handshakes run concurrently; a victim already gone (finished, or moved) is skipped.
Each step changes the world before the stream hears of it, so an event whose publish failed stays
owed (``_publish``) and goes out first once NATS answers again: the decision's retry skips a victim
it already evicted and would otherwise never announce that eviction or the victim's new attempt.

A resize (torchrun-style elastic training: checkpoint, new world size, resume) is the checkpoint
handshake with ``reason == "resize"`` and ``world_size`` = the job's worker count once it resumes,
asked of every worker of the job bound now: before a worker of an elastic job that already runs
(at least its minimum bound) is bound - a *grow* - and before victims are evicted from an elastic
job whose other workers keep at least its minimum - a *shrink*, one handshake for all the job's
victims of the decision, which are evicted checkpointed when every worker answered ``completed``
in time. A victim whose job would fall below its minimum is an ordinary preemption. The request
ids are ``<decision>/resize/<worker uid>``; a redelivered decision resizes nothing twice (its pod
is bound, its victims are gone), and a republished request is stored once.
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
    NodePowerRecommended,
    PlacementDecided,
    PlannedPreemption,
    PodBindFailed,
    PodFinished,
    PodPending,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.services.binder.world import ElasticWorkers, World, WorldRefused

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
    """checkpoint handshakes (before an eviction or a resize) asked, completed, unanswered in time"""
    grows: int = 0
    """elastic jobs resized up: a worker bound to a running job after the resize handshake"""
    shrinks: int = 0
    """elastic jobs resized down: workers evicted from a job that keeps running"""
    requeued: int = 0
    pending_published: int = 0
    finished: int = 0
    power_done: int = 0
    power_refused: int = 0
    """node-power recommendations carried out, and answered with a refusal (pods bound there meanwhile)"""


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
        self._owed: dict[str, Event] = {}
        """what the world already did but the stream has not stored (a publish failed), by message id"""
        self._owed_lock = asyncio.Lock()

    def _id(self, kind: str, key: str) -> str:
        return f"{self.cluster}/{kind}/{key}"

    async def _publish(self, event: Event, msg_id: str) -> None:
        """Publish what a decision did to the world, after anything an earlier failure left owed.

        The world changes first and the stream is told after, so a failed publish (NATS down) leaves
        a change only this process knows of. A decision's retry cannot redo it - a victim evicted is
        no longer bound, so the retry skips it - so the event stays owed, in order, until a publish
        goes through; the retry (or the next decision) raises until then."""
        self._owe(event, msg_id)
        await self._settle()

    def _owe(self, event: Event, msg_id: str) -> None:
        self._owed.setdefault(msg_id, event)

    async def _settle(self) -> None:
        async with self._owed_lock:
            while self._owed:
                owed_id, owed = next(iter(self._owed.items()))
                await self.outbox.publish(owed, owed_id)
                del self._owed[owed_id]

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

    # --- node power ---------------------------------------------------------------------------------

    async def on_power(self, rec: NodePowerRecommended) -> str:
        """Carry out a node-power recommendation once (``World.power``) and publish the node's power
        after it (``binder.node.power_changed.v1``, one message per recommendation). Returns ``done``,
        ``refused`` or ``duplicate``; raises only when publishing fails (the redelivery is safe: the
        answer is owed until stored, and the world's switch is idempotent)."""
        key = f"power/{rec.recommendation_id}"
        if rec.cluster != self.cluster or self.applied.seen(key):
            self.stats.duplicates += rec.cluster == self.cluster
            return "duplicate"
        changed = await self.world.power(rec)
        await self._publish(changed, self._id("power", rec.recommendation_id))
        self.applied.remember(key)
        self.stats.power_refused += bool(changed.reason)
        self.stats.power_done += not changed.reason
        return "refused" if changed.reason else "done"

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
            await self._publish(current, self._id("bound", d.decision_id))
            self.applied.remember(d.decision_id)
            self.stats.duplicates += 1
            return "duplicate"
        grows = False
        if current is None and await self.world.state(d.pod_uid) == "pending":
            await self._preempt(d, heartbeat)
            grows = await self._grow(d, heartbeat)
        try:
            bound = await self.world.bind(d)
        except WorldRefused as refused:
            await self._failed(d, refused)
            self.applied.remember(d.decision_id)
            return "failed"
        await self._publish(bound, self._id("bound", d.decision_id))
        self.applied.remember(d.decision_id)
        self.stats.bound += 1
        self.stats.grows += grows
        return "bound"

    async def _failed(self, d: PlacementDecided, refused: WorldRefused) -> None:
        now = self.world.now()
        failed = PodBindFailed(
            source=self.source, emitted_at=now, cluster=self.cluster, pod_uid=d.pod_uid, pod_name=d.pod_name,
            namespace=d.namespace, node=d.node, decision_id=d.decision_id, reason=refused.reason,
            transient=refused.transient, failed_at=now, attempt=d.attempt,
        )
        log.info("decision %s for %s/%s refused: %s", d.decision_id, d.namespace, d.pod_name, refused)
        await self._publish(failed, self._id("bind_failed", d.decision_id))
        self.stats.bind_failed += 1
        if refused.transient and self.requeue_on_bind_failure:
            pending = await self.world.requeue(d.pod_uid)
            if pending is not None:
                await self._publish_pending(pending)
                self.stats.requeued += 1

    def _pending_id(self, pending: PodPending) -> str:
        return self._id("pending", f"{pending.pod_uid}/{pending.attempt}")

    async def _publish_pending(self, pending: PodPending) -> None:
        await self._publish(pending, self._pending_id(pending))
        self.stats.pending_published += 1

    # --- preemptions --------------------------------------------------------------------------------

    async def _preempt(self, d: PlacementDecided, heartbeat: Heartbeat | None) -> None:
        victims = [v for v in d.preemptions if await self.world.state(v.pod_uid) == "bound"]
        self.stats.victims_gone += len(d.preemptions) - len(victims)
        if not victims:
            return
        alone: list[PlannedPreemption] = []
        shrinks: dict[str, tuple[ElasticWorkers, list[PlannedPreemption]]] = {}
        for v in victims:
            job = await self.world.elastic_workers(v.pod_uid)
            if job is None:
                alone.append(v)
            else:
                shrinks.setdefault(job.job, (job, []))[1].append(v)
        for key, (job, leaving) in list(shrinks.items()):
            gone = {v.pod_uid for v in leaving}
            if sum(w.pod_uid not in gone for w in job.running) < job.minimum:
                alone += shrinks.pop(key)[1]  # the job stops: its workers are preempted as usual
        await asyncio.gather(*(self._preempt_one(d, v, heartbeat) for v in alone),
                             *(self._shrink(d, job, leaving, heartbeat) for job, leaving in shrinks.values()))

    async def _shrink(self, d: PlacementDecided, job: ElasticWorkers, leaving: list[PlannedPreemption],
                      heartbeat: Heartbeat | None) -> None:
        """Resize ``job`` down to the workers that stay, then evict the ones leaving."""
        gone = {v.pod_uid for v in leaving}
        grace = min((v.grace_period_s for v in leaving if v.grace_period_s > 0),
                    default=self.checkpoint_deadline_s)
        checkpointed = await self._resize(d, job, len(job.running) - len(gone), grace, heartbeat)
        evicted = await asyncio.gather(*(self._preempt_one(d, v, heartbeat, checkpointed=checkpointed)
                                         for v in leaving))
        self.stats.shrinks += any(evicted)

    async def _grow(self, d: PlacementDecided, heartbeat: Heartbeat | None) -> bool:
        """Resize the decided pod's elastic job up before it joins, when the job already runs."""
        job = await self.world.elastic_workers(d.pod_uid)
        if job is None or not job.runs() or any(w.pod_uid == d.pod_uid for w in job.running):
            return False
        await self._resize(d, job, len(job.running) + 1, self.checkpoint_deadline_s, heartbeat)
        return True

    async def _resize(self, d: PlacementDecided, job: ElasticWorkers, world_size: int, deadline_s: float,
                      heartbeat: Heartbeat | None) -> bool:
        """The resize handshake with every worker of ``job`` bound now; True when all completed."""
        now = self.world.now()
        requests = [CheckpointRequested(
            source=self.source, emitted_at=now, cluster=self.cluster,
            request_id=f"{d.decision_id}/resize/{w.pod_uid}", pod_uid=w.pod_uid, pod_name=w.pod_name, namespace=w.namespace, node=w.node, reason="resize",
            deadline_s=deadline_s, requested_at=now, decision_id=d.decision_id, world_size=world_size,
        ) for w in job.running]
        log.info("decision %s resizes %s from %d to %d workers", d.decision_id, job.job, len(job.running),
                 world_size)
        done = await asyncio.gather(*(self._handshake(r, heartbeat) for r in requests))
        return all(done)

    async def _preempt_one(self, d: PlacementDecided, v: PlannedPreemption, heartbeat: Heartbeat | None, *,
                           checkpointed: bool | None = None) -> bool:
        """Evict one victim (after its own checkpoint handshake unless ``checkpointed`` says how the
        job's resize went); True when it was evicted."""
        if checkpointed is None:
            checkpointed = False
            if v.checkpoint_first and await self.world.checkpointable(v.pod_uid):
                checkpointed = await self._checkpoint(d, v, heartbeat)
        try:
            preempted, pending = await self.world.evict(v, checkpointed=checkpointed, decision=d)
        except WorldRefused as refused:
            log.info("victim %s of decision %s not evicted: %s", v.pod_uid, d.decision_id, refused)
            self.stats.victims_gone += 1
            return False
        # both owed before either is sent: the retry of a decision skips a victim already evicted
        self._owe(preempted, self._id("preempted", f"{v.pod_uid}/{d.decision_id}"))
        if pending is not None:
            self._owe(pending, self._pending_id(pending))
        self.stats.preempted += 1
        self.stats.requeued += pending is not None
        self.stats.pending_published += pending is not None
        await self._settle()
        return True

    async def _checkpoint(self, d: PlacementDecided, v: PlannedPreemption, heartbeat: Heartbeat | None) -> bool:
        """Ask the victim to checkpoint and wait for its answer; True when it completed in time."""
        deadline_s = v.grace_period_s if v.grace_period_s > 0 else self.checkpoint_deadline_s
        now = self.world.now()
        return await self._handshake(CheckpointRequested(
            source=self.source, emitted_at=now, cluster=self.cluster, request_id=f"{d.decision_id}/{v.pod_uid}",
            pod_uid=v.pod_uid, pod_name=v.pod_name, namespace=v.namespace, node=v.node, reason="preemption",
            deadline_s=deadline_s, requested_at=now, decision_id=d.decision_id,
        ), heartbeat)

    async def _handshake(self, request: CheckpointRequested, heartbeat: Heartbeat | None) -> bool:
        """Publish the request, deliver it, wait for the answer; True when it completed in time."""
        request_id, deadline_s = request.request_id, request.deadline_s
        waiter = self._waiters.get(request_id)
        if waiter is None or waiter.done():
            waiter = self._waiters[request_id] = asyncio.get_running_loop().create_future()
        msg_id = self._id("checkpoint-request", request_id)

        async def resend() -> None:
            await self.outbox.publish(request, msg_id)

        try:
            await self.outbox.publish(request, msg_id)
            await self.world.request_checkpoint(request)
            self.stats.checkpoints_requested += 1
            ack = await self._wait(waiter, max(self.world.wall_seconds(deadline_s), self.checkpoint_min_wait_s),
                                   heartbeat, resend)
        except WorldRefused as refused:
            log.info("checkpoint of %s not requested: %s", request.pod_uid, refused)
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
                    heartbeat: Heartbeat | None,
                    resend: Callable[[], Awaitable[None]] | None = None) -> CheckpointAcknowledged | None:
        """Wait up to ``wall_s``, telling the server the decision is in progress and sending the request
        again after 0.5, 1, 2, 4 s and then every 5 s while no answer came.

        Why again: the workload listens on core NATS, which delivers at most once, and now and then
        a request published moments after the client subscribed does not reach it; without a repeat
        the pod would be evicted at the deadline with its work since the last checkpoint lost. The
        repeat carries the same message id (the stream stores it once; core subscribers see it
        again), and the client ignores a request it already answered."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wall_s
        tick = 0.5
        while True:
            left = until - loop.time()
            if left <= 0:
                return None
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), min(left, tick))
            except TimeoutError:
                tick = min(2 * tick, 5.0)
                if heartbeat is not None:
                    await heartbeat()
                if resend is not None and not waiter.done() and until > loop.time():
                    try:
                        await resend()
                    except Exception as exc:  # a repeat is best effort: the first copy is stored
                        log.warning("checkpoint request not sent again: %s", exc)
