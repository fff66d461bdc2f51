"""The binder on the bus: decode, call ``Binder``, publish. No domain logic here.

    consumed (durable)                          what happens
    placement.pod.decided.v1    (<durable>)     Binder.on_decision; a failed publish -> TransientError
                                                (redelivered: safe, the decision is idempotent)
    binder.checkpoint.acknowledged.v1           Binder.on_checkpoint_answer (wakes the waiting decision)
                                (<durable>-checkpoints)
    the world's loop (a task)                   Binder.emit: pending pods, finished pods, and the
                                                twin's checkpoint answers, published in order
    world.snapshot (request/reply)              Binder.snapshot: one page of nodes and bound pods
    HTTP GET /metrics/<node> (exporter_port)    the twin's GPUs as dcgm-exporter text (exporter.py),
                                                on this loop, for telemetry agents in other processes

Decisions are handled one at a time (concurrency 1): two decisions may name the same GPU, and the
world must see them in the order placement made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gpuaware import bus
from gpuaware.runtime import Mount, Sample, ServiceContext, consumer_samples, counter, supervise
from gpuaware.schemas import (
    BINDER,
    PLACEMENT,
    WORLD_SNAPSHOT,
    CheckpointAcknowledged,
    CheckpointRequested,
    Event,
    NodePowerChanged,
    NodePowerRecommended,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    WorldSnapshotRequest,
    checkpoint_durable,
    power_durable,
)
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.exporter import start_exporter
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import build_world
from gpuaware.services.binder.world import World

__all__ = ["DECISIONS", "OUT", "JetStreamOutbox", "WorldLoop", "make_mount", "mount"]

log = logging.getLogger(__name__)

DECISIONS = bus.event_channel(PlacementDecided)
ANSWERS = bus.event_channel(CheckpointAcknowledged)
UNSCHEDULABLE = bus.event_channel(PodUnschedulable)
RECOMMENDATIONS = bus.event_channel(NodePowerRecommended)
OUT: dict[type, bus.Channel[Any]] = {
    PodPending: bus.event_channel(PodPending),
    PodBound: bus.event_channel(PodBound),
    PodBindFailed: bus.event_channel(PodBindFailed),
    PodPreempted: bus.event_channel(PodPreempted),
    PodFinished: bus.event_channel(PodFinished),
    CheckpointRequested: bus.event_channel(CheckpointRequested),
    CheckpointAcknowledged: ANSWERS,
    NodePowerChanged: bus.event_channel(NodePowerChanged),
}


class JetStreamOutbox:
    """``Outbox`` over JetStream: each event on its subject, stored once per message id."""

    def __init__(self, js: bus.JetStream, timeout: float) -> None:
        self.js = js
        self.timeout = timeout
        self.counts: dict[str, int] = {}

    async def publish(self, event: Event, msg_id: str) -> None:
        channel = OUT[type(event)]
        ack = await bus.publish(self.js, channel, event, msg_id=msg_id, timeout=self.timeout)
        if not ack.duplicate:
            self.counts[channel.subject] = self.counts.get(channel.subject, 0) + 1


class WorldLoop:
    """The world's ``run`` as a task that survives hiccups: a failed publish is retried after a pause
    (the world keeps the event), anything else is logged and the loop restarts."""

    def __init__(self, world: World, binder: Binder) -> None:
        self._stop = asyncio.Event()
        self._task = supervise("binder world loop", lambda: self._run(world, binder), until=self._stop.is_set)

    async def _run(self, world: World, binder: Binder) -> None:
        while not self._stop.is_set():
            try:
                await world.run(binder.emit, self._stop)
            except Exception:
                log.exception("world loop failed; restarting in 1s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 1.0)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait([self._task])


def _default_world(settings: BinderSettings, source: str) -> World:
    if settings.world == "kubernetes":
        from gpuaware.k8s import core_api
        from gpuaware.services.binder.kube_world import KubeWorld

        lease = None
        if settings.leader_election == "kubernetes":
            from gpuaware.k8s import KubeLeaderLease

            lease = KubeLeaderLease(settings.lease_k8s_namespace(), f"gpuaware-binder-{settings.cluster}",
                                    source.rsplit("/", 1)[-1])
        return KubeWorld(core_api(), cluster=settings.cluster, source=source, lease=lease,
                         node_power=settings.node_power)
    return build_world(settings, source=source)


def binder_samples(binder: Binder, consumers: list[Any]) -> Iterable[Sample]:
    """The binder's Prometheus series: decisions applied, pods bound / failed / preempted / finished,
    checkpoint handshakes, elastic jobs resized, and its durable consumers' lag and dead letters."""
    st = binder.stats
    for outcome, n in (("bound", st.bound), ("failed", st.bind_failed), ("duplicate", st.duplicates)):
        yield counter("gpuaware_binder_binds", "placement decisions applied, by outcome", n, outcome=outcome)
    yield counter("gpuaware_binder_preempted", "pods evicted by a decision's preemption plan", st.preempted)
    yield counter("gpuaware_binder_finished", "pods that finished", st.finished)
    for outcome, n in (("requested", st.checkpoints_requested), ("completed", st.checkpoints_completed),
                       ("timed_out", st.checkpoint_timeouts)):
        yield counter("gpuaware_binder_checkpoints", "checkpoint handshakes before an eviction or a resize", n,
                      outcome=outcome)
    for direction, n in (("grow", st.grows), ("shrink", st.shrinks)):
        yield counter("gpuaware_binder_resizes", "elastic jobs resized through the checkpoint handshake", n,
                      direction=direction)
    for outcome, n in (("done", st.power_done), ("refused", st.power_refused)):
        yield counter("gpuaware_binder_node_power", "node-power recommendations carried out or refused", n,
                      outcome=outcome)
    yield from consumer_samples(consumers)


async def _published(js: bus.JetStream, cluster: str) -> list[Event]:
    """Everything a binder of ``cluster`` published that is still on the BINDER stream, in order."""
    events: list[Event] = []

    def keep(ev: Event, _d: bus.FollowDelivery) -> None:
        if getattr(ev, "cluster", None) == cluster:
            events.append(ev)

    follower = await bus.follow(js, list(OUT.values()), keep, stream=BINDER.name, with_suffixes=True,
                                name="binder-restore", inactive_threshold=5.0)
    try:
        await follower.sync(timeout=60.0)
    finally:  # the binder may not delete consumers on BINDER (placement's durable is there)
        await follower.stop(delete=False)
    return events


def make_mount(world_factory: Callable[[BinderSettings, str], World] | None = None,
               on_binder: Callable[[Binder], None] | None = None) -> Mount:
    """A ``mount`` for ``run_service``; tests pass their own world (and get the ``Binder`` back)."""

    async def mount_binder(ctx: ServiceContext) -> list[bus.Endpoint]:
        settings: BinderSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
        source = f"{settings.service_name}/{ctx.instance_id}"
        world = (world_factory or _default_world)(settings, source)
        binder = Binder(world, JetStreamOutbox(ctx.js, settings.publish_timeout_s), source=source,
                        checkpoint_deadline_s=settings.checkpoint_deadline_s,
                        checkpoint_min_wait_s=settings.checkpoint_min_wait_s,
                        requeue_on_bind_failure=settings.requeue_on_bind_failure,
                        dedupe_capacity=settings.dedupe_capacity)
        if on_binder is not None:
            on_binder(binder)
        restore = getattr(world, "restore", None)
        if restore is not None:  # the twin: a restarted binder finds its simulated cluster as it was
            counts = restore(await _published(ctx.js, settings.cluster))
            if counts["events"]:
                log.info("binder: twin restored from %d published events: %s", counts["events"], counts)
        exporter = await start_exporter(world, settings)
        if settings.webhook_port:
            from gpuaware.services.binder.webhook import WebhookServer

            hooks = WebhookServer(settings.webhook_port, settings.webhook_cert_dir,
                                  default_queue=settings.webhook_default_queue)
            await hooks.start()
            ctx.on_stop(hooks)
        if exporter is not None:
            ctx.on_stop(exporter)

        async def on_answer(ack: CheckpointAcknowledged, _delivery: bus.Delivery) -> None:
            binder.on_checkpoint_answer(ack)

        async def on_decision(decision: PlacementDecided, delivery: bus.Delivery) -> None:
            try:
                await binder.on_decision(decision, heartbeat=delivery.in_progress)
            except bus.BusError as exc:
                raise bus.TransientError(f"publishing the outcome failed: {exc}", delay=1.0) from exc

        async def on_power(rec: NodePowerRecommended, _delivery: bus.Delivery) -> None:
            try:
                await binder.on_power(rec)
            except bus.BusError as exc:
                raise bus.TransientError(f"publishing the node's power failed: {exc}", delay=1.0) from exc

        consumers: list[bus.DurableConsumer[Any]] = [
            await bus.subscribe_durable(
                ctx.js, ANSWERS, checkpoint_durable(settings.durable), on_answer, deliver_policy="new",
                ack_wait=settings.ack_wait_s, poll=settings.poll_s),
            await bus.subscribe_durable(
                ctx.js, DECISIONS, settings.durable, on_decision, ack_wait=settings.ack_wait_s,
                max_deliver=settings.max_deliver, poll=settings.poll_s),
            await bus.subscribe_durable(
                ctx.js, RECOMMENDATIONS, power_durable(settings.durable), on_power, ack_wait=settings.ack_wait_s,
                max_deliver=settings.max_deliver, poll=settings.poll_s)]
        for consumer in consumers:
            ctx.on_stop(consumer)
        ctx.metrics.source(lambda: binder_samples(binder, consumers))
        ctx.on_stop(WorldLoop(world, binder))
        explain = getattr(world, "unschedulable", None)
        if explain is not None:  # Kubernetes: placement's "why pending" becomes an Event on the pod
            async def on_unschedulable(ev: PodUnschedulable, _delivery: bus.FollowDelivery) -> None:
                await explain(ev)

            ctx.on_stop(await bus.follow(ctx.js, [UNSCHEDULABLE], on_unschedulable, stream=PLACEMENT.name,
                                         deliver="new", with_suffixes=True, name="binder-unschedulable"))
        log.info("binder: %s world, cluster %s", world.kind, world.cluster)
        return [bus.Endpoint(name="snapshot", subject=WORLD_SNAPSHOT, request_type=WorldSnapshotRequest,
                             handler=binder.snapshot)]

    return mount_binder


mount = make_mount()
