"""Health-scoring handlers: decode (the bus), score (``state.View`` over gpuaware.health), publish,
checkpoint (PostgreSQL), acknowledge.

    reads / serves                                        does
    durable <durable> on telemetry.gpu.sampled.v1.<c>.>   every GPU row of the batch -> HealthBook ->
      (telemetry.gpu.rolledup.v1.<c>.> with INPUT=rolledup) publish -> checkpoint -> ack (pipelined)
    follow telemetry.node.inventory.v1[.>] (last each)    the GPUs' node, index and model (slowdown
                                                          temperature) before the first sample
    follow placement.pod.decided.v1[.>] and binder.pod.   which pods hold which GPUs (for drain
      {bind_failed,preempted,finished}.v1[.>] (all)       recommendations), rebuilt by replay on start
    every tick_s                                          stale telemetry: scored, alerted, state held
    health.cordon (request/reply, every instance)         cordon / uncordon, audited (who, when, why);
                                                          a standby relays it to the leader
    health.cordon.leader.<cluster> (the leader only)      the leader applies what standbys relay
    health.stats  (request/reply)                         counters: states, bad input, publications

    publishes  health.gpu.scored.v1.<c>.<node>         once per GPU per score window, on a change
               health.gpu.state_changed.v1.<c>.<node>  on every transition (placement follows it)
               alerts.gpu.raised.v1.<c> / alerts.gpu.resolved.v1.<c>   AlertBook's decisions
               health.gpu.drain_recommended.v1.<c>.<node>   with a transition into degraded or
                                                            quarantined of a GPU holding pods

Why raw samples by default (``INPUT``): they carry what the score needs (cumulative ECC counters,
corrected ones included, pending/failed row remaps, NVLink links, power limits, throttle reasons)
within a second of the agent reading them; the collector's rollups lack most of that and arrive
after its 90-s grace, too late to keep the next pods off a GPU that fell off the bus. The inventory
is followed (every instance needs all of it, and the latest per node is the whole truth), not
consumed.

Dispositions (gpuaware.bus): an undecodable or schema-violating message is dead-lettered with the
reason by the consumer; another cluster's message is acked untouched; a publish that fails, or a
checkpoint that does not commit within ``hold_s``, is a ``TransientError`` (redelivered, then
skipped as already applied and acked once stored: ``checkpoint.py``). Bad input inside a valid
message (late, duplicated or missing samples, counter resets, unknown XIDs) is gpuaware.health's to
refuse or repair; it never flips a state and is counted per kind in ``health.stats``.

Two replicas, one leader (a NATS KV lease per cluster, ``lease_bucket``, as placement's): a GPU's
history must be in one book, so only the leader consumes the durable, ticks, checkpoints, publishes
and applies ``health.cordon``. Every instance answers ``health.cordon`` (an endpoint of its one micro
service, so an operator's ``gpuaware health cordon`` always finds a responder): a standby relays the
request to ``health.cordon.leader.<cluster>``, which only the leader serves (``bus.serve``, a plain
subscription from its takeover to its step-down; a second micro service of the same name on one
connection would get two replies per ``$SRV.PING``, both refused by an authenticated server), and
holds it while nobody leads, up to ``leader_wait_s``, then answers 503. The lease's KV bucket and
``gpuaware_health_leading`` say who leads. Every instance follows the
inventories and the pods on GPUs, so a standby has them when it takes over. What a standby does not
keep is the GPUs' tracks: they are the leader's, and a takeover rebuilds them from where the leader
left them durable, not from a copy that may have drifted:

    takeover (the lease won)        the last checkpoint read back (tracks, open alerts), the inventories
                                    applied again on top; then the durable consumer created: what the
                                    old leader had not acknowledged (not checkpointed) is delivered again
                                    and scored again with the same message ids (JetStream stores each
                                    publication once); then the tick
    step-down (lease lost, stop)    the consumer stopped (in-flight messages finish), the tick stopped,
                                    a last checkpoint written, the leader's cordon subject withdrawn

A leader that dies leaves its unacknowledged samples to the durable's ack wait (``ack_wait_s``); the
new leader scores them then (a sample older than what its GPU's track already holds is skipped as
redelivered, as after a restart). One replica simply wins the lease at start and behaves as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import Sample, ServiceContext, consumer_samples, counter, gauge, supervise
from gpuaware.schemas import (
    BINDER,
    HEALTH_CORDON,
    HEALTH_STATS,
    PLACEMENT,
    TELEMETRY,
    CordonReply,
    CordonRequest,
    GpuRolledUp,
    GpuSampled,
    HealthStats,
    NodeInventory,
    PlacementDecided,
    PodBindFailed,
    PodFinished,
    PodPreempted,
    StatsRequest,
    health_cordon_leader,
)
from gpuaware.services.health_scoring.checkpoint import Checkpointer, Outbox
from gpuaware.services.health_scoring.settings import HealthScoringSettings
from gpuaware.services.health_scoring.state import UnknownGpu, View

log = logging.getLogger(__name__)

INVENTORY = bus.event_channel(NodeInventory)
DECIDED = bus.event_channel(PlacementDecided)
PODS_GONE = (bus.event_channel(PodBindFailed), bus.event_channel(PodPreempted),
             bus.event_channel(PodFinished))


def telemetry_channel(settings: HealthScoringSettings) -> bus.Channel[Any]:
    """The durable's filter: this cluster's samples (or one-minute rollups), every node."""
    if settings.input == "rolledup":
        return bus.event_channel(GpuRolledUp).under(settings.cluster)
    return bus.event_channel(GpuSampled).under(settings.cluster)


class HealthService:
    """The service's state and its handlers."""

    def __init__(self, settings: HealthScoringSettings, js: Any, pool: Any, instance: str, *,
                 clock: Any = time.time, nc: Any = None) -> None:
        self.settings = settings
        self.js = js
        self.nc = nc
        """the connection the leader's ``health.cordon`` is served on (None: not served, tests)"""
        self.pool = pool
        self.instance = instance
        self.clock = clock
        self.source = f"{settings.service_name}/{instance}"
        self.view = View(settings.health_config(), cluster=settings.cluster, source=self.source,
                         score_window_s=settings.score_window_s, score_delta=settings.score_delta,
                         alert_resend_s=settings.alert_resend_s or None,
                         agent_heartbeat_s=settings.agent_heartbeat_s if settings.input == "sampled" else 0.0)
        self.outbox = Outbox(js)
        self.checkpointer = Checkpointer(self.view, self.outbox, pool, interval_s=settings.checkpoint_s,
                                         hold_s=settings.hold_s)
        self.consumer: bus.DurableConsumer[Any] | None = None
        self.follower: bus.Follower | None = None
        self.pod_followers: list[bus.Follower] = []
        self.restored = (0, 0)
        self.started = time.monotonic()
        self._stop = asyncio.Event()
        self._ticker: asyncio.Task[None] | None = None
        self._last_maintenance = 0.0
        self.lease: bus.LeaderLease | None = None
        self.inventories: dict[str, NodeInventory] = {}
        """the latest inventory of each node (applied again over a checkpoint read back at takeover)"""
        self.leading_since: float | None = None
        self.takeovers = 0
        self._lead_task: asyncio.Task[None] | None = None
        self.cordon_subject = health_cordon_leader(settings.cluster)
        self._cordon_leader: bus.Responder | None = None
        """what answers ``cordon_subject`` while leading (a subscription, not a second micro service)"""
        self.relayed = 0
        """cordons this instance received as a standby and the leader answered"""
        self._checkpointing = False

    # --- life ----------------------------------------------------------------------------------------
    async def restore(self) -> None:
        """The last checkpoint: every GPU's track and the open alerts (a restart flips and re-raises nothing)."""
        async with self.pool.connection() as conn:
            tracks, alerts = await tsdb.load_health_state(conn, self.settings.cluster)
        self.view.restore(tracks, alerts)
        self.checkpointer.committed = self.view.version
        self.restored = (len(tracks), len(alerts))
        if tracks or alerts:
            log.info("restored %d GPUs and %d open alerts of cluster %s", len(tracks), len(alerts),
                     self.settings.cluster)

    async def start(self, ctx: ServiceContext) -> None:
        """Follow the inventories and the pods on GPUs (every instance), then campaign for the lease.
        Returns once this instance leads and its takeover is done, or once a standby it is (the lease
        held by another instance after a few polls)."""
        s = self.settings
        self.follower = await bus.follow(self.js, [INVENTORY], self._on_inventory, stream=TELEMETRY.name,
                                         deliver="last_per_subject", with_suffixes=True, name="health-inventory")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.follower.caught_up.wait(), s.inventory_wait_s)
        self.pod_followers = [
            await bus.follow(self.js, [DECIDED], self._on_decided, stream=PLACEMENT.name, deliver="all",
                             with_suffixes=True, name="health-decided"),
            await bus.follow(self.js, list(PODS_GONE), self._on_pod_gone, stream=BINDER.name, deliver="all",
                             with_suffixes=True, name="health-pods-gone")]
        self.lease = bus.LeaderLease(self.js, s.lease_bucket, s.cluster, self.instance, ttl_s=s.lease_ttl_s,
                                     poll_s=s.lease_poll_s, on_change=self._on_lease)
        await self.lease.start()
        # one replica wins at its first try: it consumes before `start` returns, as a lone instance always did
        if await self.lease.wait_leading(timeout=4 * s.lease_poll_s) and self._lead_task is not None:
            with contextlib.suppress(Exception):  # a failed takeover is `_lead_ended`'s to handle
                await asyncio.shield(self._lead_task)

    @property
    def leading(self) -> bool:
        return self.lease is not None and self.lease.leading and self.leading_since is not None

    async def _on_lease(self, leading: bool) -> None:
        if leading:
            self._lead_task = asyncio.create_task(self._lead(), name="health takeover")
            self._lead_task.add_done_callback(self._lead_ended)
        else:
            await self._step_down()

    async def _lead(self) -> None:
        """The takeover (module docstring): the last checkpoint, the inventories over it, the durable
        consumer, the tick, the cordon endpoint."""
        s = self.settings
        await self.restore()
        for inv in list(self.inventories.values()):
            self.view.describe(inv)
        self.checkpointer = Checkpointer(self.view, self.outbox, self.pool, interval_s=s.checkpoint_s,
                                         hold_s=s.hold_s)
        self.checkpointer.committed = self.view.version
        self.checkpointer.start()
        self._checkpointing = True
        self.started = time.monotonic()  # the backlog is consumed before anything may count as stale
        self.consumer = await bus.subscribe_pipelined(
            self.js, telemetry_channel(s), s.durable_name(), self.on_telemetry, stream=TELEMETRY.name,
            ack_wait=s.ack_wait_s, max_deliver=s.max_deliver, max_ack_pending=s.max_ack_pending,
            batch=s.fetch_batch, poll=s.poll_s, retry=bus.RetryPolicy(base=1.0, cap=30.0))
        self._ticker = supervise("health tick", self._tick_loop, until=self._stop.is_set)
        if self.nc is not None:
            self._cordon_leader = await bus.serve(
                self.nc, bus.Endpoint(name="cordon-leader", subject=self.cordon_subject, request_type=CordonRequest,
                                      handler=self._leader_cordon), service=s.service_name)
        self.leading_since = time.monotonic()
        self.takeovers += 1
        log.info("health-scoring leads cluster %s (%d GPUs restored)", s.cluster, self.restored[0])

    def _lead_ended(self, task: asyncio.Task[None]) -> None:
        """A takeover that failed (the database or the bus away) gives the lease up, so a standby (or
        this instance, after the cooldown) tries again: never a leader that renews and does not score."""
        if task.cancelled() or task is not self._lead_task:
            return
        exc = task.exception()
        if exc is None:
            return
        log.error("health-scoring takeover of cluster %s failed (%s: %s); giving the lease up",
                  self.settings.cluster, type(exc).__name__, exc)
        if self.lease is not None and self.lease.leading:
            self.lease.resign(self.settings.lease_ttl_s)

    async def _step_down(self) -> None:
        """Stop leading: the takeover if still running, the consumer (its in-flight messages finish),
        the tick, a last checkpoint, the cordon endpoint."""
        self.leading_since = None
        task, self._lead_task = self._lead_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._cordon_leader is not None:
            responder, self._cordon_leader = self._cordon_leader, None
            await responder.stop()
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            with contextlib.suppress(Exception):
                await consumer.stop()
        if self._ticker is not None:
            ticker, self._ticker = self._ticker, None
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await ticker
        if self._checkpointing:  # a standby never writes: its view holds no tracks of its own
            self._checkpointing = False
            await self.checkpointer.stop()

    async def stop(self) -> None:
        """Step down (consumer, tick, last checkpoint; the lease handed over at once), then the
        followers and the pool."""
        self._stop.set()
        if self.lease is not None:
            await self.lease.stop(release=True)  # its step-down runs `_step_down`
        await self._step_down()
        for f in [self.follower, *self.pod_followers]:
            if f is not None:
                with contextlib.suppress(Exception):
                    await f.stop()
        await self.pool.close()

    # --- handlers ------------------------------------------------------------------------------------
    def _on_inventory(self, inv: NodeInventory, _d: bus.FollowDelivery) -> None:
        if inv.cluster == self.settings.cluster:
            self.inventories[inv.node] = inv
        self.view.describe(inv)

    def _on_decided(self, d: PlacementDecided, _d: bus.FollowDelivery) -> None:
        self.view.placed(d)

    def _on_pod_gone(self, ev: PodBindFailed | PodPreempted | PodFinished, _d: bus.FollowDelivery) -> None:
        self.view.gone(ev.cluster, ev.pod_uid)

    async def on_telemetry(self, msg: GpuSampled | GpuRolledUp, delivery: bus.Delivery) -> Awaitable[None] | None:
        """In stream order: score every row now (synchronously), then publish and wait for the checkpoint."""
        if msg.cluster != self.settings.cluster:
            self.view.counts["other_cluster"] += 1
            return None
        work = self.view.observe(msg, redelivered=delivery.redelivered, now=self.clock())
        version = self.view.version
        self.outbox.add(work.out)
        if work.urgent:
            self.checkpointer.urge()
        return self._settle(version)

    async def _settle(self, version: int) -> None:
        await self.outbox.drain()
        await self.checkpointer.durable(version)

    async def _tick_loop(self) -> None:
        """Every ``tick_s``: stale telemetry scored, then maintenance. A pass that fails is counted and
        logged and the next one runs: the cluster's stale-GPU detection never stops silently."""
        s = self.settings
        while not self._stop.is_set():
            await asyncio.sleep(s.tick_s)
            try:
                await self._tick()
            except Exception:
                self.view.counts["tick_failures"] += 1
                log.exception("stale-telemetry tick failed (the next runs in %g s)", s.tick_s)
            await self._maintain()

    async def _tick(self) -> None:
        # after a restart the backlog is consumed before anything may count as stale
        if time.monotonic() - self.started < self.settings.stale_after_s:
            return
        work = self.view.tick(self.clock())
        if work.out:
            self.outbox.add(work.out)
            if work.urgent:
                self.checkpointer.urge()
            try:
                await self.outbox.drain()
            except bus.TransientError as exc:
                log.warning("stale-telemetry tick: %s (sent on the next pass)", exc.reason)

    async def _maintain(self) -> None:
        s = self.settings
        if time.monotonic() - self._last_maintenance < s.maintenance_interval_s:
            return
        self._last_maintenance = time.monotonic()
        try:
            async with self.pool.connection() as conn:
                await tsdb.expire_health(conn, datetime.now(UTC) - timedelta(days=s.retention_days))
        except Exception as exc:
            log.warning("health retention failed (%s: %s); next pass retries", type(exc).__name__, exc)

    def _check_cluster(self, req: CordonRequest) -> None:
        if req.cluster != self.settings.cluster:
            raise bus.ServiceError(421, f"this health-scoring instance serves cluster {self.settings.cluster}, "
                                        f"not {req.cluster}")

    async def cordon_request(self, req: CordonRequest) -> CordonReply:
        """``health.cordon`` (every instance): applied here when this instance leads, else relayed to the
        leader. While nobody leads (a takeover under way) the request is held, up to ``leader_wait_s``,
        until a leader answers it -- this instance, should it win the lease -- then refused with 503."""
        self._check_cluster(req)
        loop = asyncio.get_running_loop()
        wait_s = self.settings.leader_wait_s
        deadline = loop.time() + wait_s
        while True:
            if self.leading:
                return await self.cordon(req)
            left = deadline - loop.time()
            if left <= 0:
                raise bus.TransientError(f"no health-scoring leader answered within {wait_s:g}s", delay=1.0)
            if self.nc is not None:
                try:  # the leader may wait for its checkpoint (up to hold_s) before it answers
                    reply = await bus.request(self.nc, self.cordon_subject, req, CordonReply,
                                              timeout=left + self.settings.hold_s)
                except bus.NoResponders:
                    pass  # nobody leads right now: wait for a leader
                except bus.RequestTimeout:
                    raise bus.TransientError("the health-scoring leader did not answer within "
                                             f"{wait_s + self.settings.hold_s:g}s", delay=1.0) from None
                except bus.ServiceError as exc:
                    if exc.code != 503:  # the leader's answer, an error (as it would have been here)
                        raise
                    # 503: it stepped down as the request came; ask whoever leads next
                else:
                    self.relayed += 1
                    return reply
            await asyncio.sleep(min(max(deadline - loop.time(), 0.0), self.settings.lease_poll_s))

    async def _leader_cordon(self, req: CordonRequest) -> CordonReply:
        """``health.cordon.leader.<cluster>``: a standby's relayed request (503 once no longer leading)."""
        self._check_cluster(req)
        if not self.leading:
            raise bus.TransientError("this health-scoring instance no longer leads", delay=0.2)
        return await self.cordon(req)

    async def cordon(self, req: CordonRequest) -> CordonReply:
        """The leader's override: applied to its book, published and checkpointed before the reply."""
        if req.cluster != self.settings.cluster:
            raise bus.ServiceError(421, f"this health-scoring instance serves cluster {self.settings.cluster}, "
                                        f"not {req.cluster}")
        try:
            work, reply = self.view.override(req, self.clock())
        except UnknownGpu as exc:
            raise bus.ServiceError(404, str(exc)) from None
        except ValueError as exc:
            raise bus.ServiceError(409, str(exc)) from None
        version = self.view.version
        self.outbox.add(work.out)
        self.checkpointer.urge()
        log.info("%s of GPU %s by %s: %s -> %s (%s)", req.action.value, req.gpu_uuid, reply.by,
                 reply.previous.value, reply.current.value, req.reason)
        await self._settle(version)  # published and audited in PostgreSQL before the reply
        return reply

    def stats(self) -> HealthStats:
        c = self.consumer.stats if self.consumer is not None else None
        cp = self.checkpointer.stats
        return HealthStats(
            instance=self.instance, cluster=self.settings.cluster, gpus=len(self.view.book.tracks),
            states=self.view.states(), open_alerts=len(self.view.alerts.active), counts=dict(self.view.counts),
            issues=dict(self.view.issues), inputs=self.view.book.counters().as_dict(),
            published=dict(self.outbox.published), publish_duplicates=self.outbox.duplicates,
            received=c.received if c else 0, processed=c.processed if c else 0,
            decode_errors=c.decode_errors if c else 0, dead_lettered=c.dead_lettered if c else 0,
            retried=c.retried if c else 0, checkpoints=cp.written, checkpoint_failures=cp.failures,
            last_db_error=cp.last_error, restored_gpus=self.restored[0], restored_alerts=self.restored[1])


async def mount(ctx: ServiceContext, *, on_service: Any = None) -> list[bus.Endpoint[Any, Any]]:
    settings: HealthScoringSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    pool = await tsdb.open_service_pool(settings.database_url, service=settings.service_name,
                                        env=settings.database_variable, max_size=settings.pool_size,
                                        timeout=settings.db_timeout_s)
    service = HealthService(settings, ctx.js, pool, ctx.instance_id, nc=ctx.nc)
    ctx.on_stop(service)  # steps down first: the consumer finishes its messages, a last checkpoint
    await service.start(ctx)
    if on_service is not None:
        on_service(service)

    async def stats(_req: StatsRequest) -> HealthStats:
        return service.stats()

    ctx.metrics.source(lambda: health_samples(service))
    # health.cordon on every instance (a standby relays it); the leader subject only while leading
    return [bus.Endpoint(name="cordon", subject=HEALTH_CORDON, request_type=CordonRequest,
                         handler=service.cordon_request),
            bus.Endpoint(name="stats", subject=HEALTH_STATS, request_type=StatsRequest, handler=stats)]


def health_samples(service: HealthService) -> Iterable[Sample]:
    """Health-scoring's Prometheus series: GPUs per state, open alerts, what it published, bad input met,
    and its durable consumer's lag and dead letters."""
    st = service.stats()
    yield gauge("gpuaware_health_leading", "1 while this instance holds the health lease and scores",
                service.leading)
    yield counter("gpuaware_health_cordons_relayed", "health.cordon requests this standby relayed to the leader",
                  service.relayed)
    for state in ("healthy", "degraded", "quarantined", *sorted(set(st.states) - {"healthy", "degraded", "quarantined"})):
        yield gauge("gpuaware_health_gpus", "GPUs per health state", st.states.get(state, 0), state=state)
    yield gauge("gpuaware_health_open_alerts", "alerts raised and not yet resolved", st.open_alerts)
    for subject, n in sorted(st.published.items()):
        yield counter("gpuaware_health_published", "events published, by kind", n, kind=subject)
    for issue, n in sorted(st.issues.items()):
        yield counter("gpuaware_health_bad_input", "bad telemetry met, by kind (each explained, none flips a state)",
                      n, issue=issue)
    yield counter("gpuaware_health_checkpoint_failures", "state checkpoints that could not be written",
                  st.checkpoint_failures)
    if service.consumer is not None:
        yield from consumer_samples([service.consumer])


def mounter(on_service: Any) -> Any:
    """``mount`` that also hands the running ``HealthService`` to ``on_service`` (tests)."""

    async def _mount(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
        return await mount(ctx, on_service=on_service)

    return _mount
