"""NATS around the placement state: follow the world, lead when elected, publish, explain.

    every instance                              the leader only (one per cluster, NATS KV lease)
    follow telemetry.node.inventory.v1[.>]      consume binder.pod.pending.v1 (durable, batches)
    follow health.gpu.state_changed.v1[.>]        -> decide -> publish decisions (pipelined, then
    follow forecast.{gpu,demand}.predicted.v1[.>] ack the batch once the stream stored them)
    follow binder.pod.{bound,bind_failed,       retry parked pods when capacity is freed
           preempted,finished}.v1[.>]           power_planner: recommend idle nodes off / on
    follow binder.node.power_changed.v1[.>]     (placement.node.power_recommended.v1, power.py)
    follow placement.pod.{decided,unschedulable}.v1[.>]   (what the leader, or a previous one, did)
    follow placement.node.power_recommended.v1[.>]
    answer placement.explain (+ publish placement.pod.explained.v1)

Acks follow durability: a pending pod is acknowledged only after its decision (or its
"unschedulable" verdict, which carries the request so a standby can take over the parked pod) is
stored. A leader that dies leaves its in-flight pods unacknowledged; they come back to the next
leader after `pending_ack_wait_s`, and a decision it repeats has the same id, so the stream stores
it once; if the stream already held the old leader's decision, that copy wins (read back and
applied). Quota is asked only when a quota service answers; nobody listening means admit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpuaware import bus
from gpuaware.placement import ForecastHeadroom, SignalEffect, warm_up
from gpuaware.runtime import ReloadAlarm, ServiceContext
from gpuaware.schemas import (
    ALERTS,
    BINDER,
    FORECAST,
    PLACEMENT,
    PLACEMENT_EXPLAIN,
    TELEMETRY,
    ExplainRequest,
    PlacementDecided,
    PodPending,
)
from gpuaware.services.placement import convert, takeover
from gpuaware.services.placement.channels import (
    BIND_FAILED,
    BOUND,
    DECIDED,
    DEMAND_FORECASTS,
    FINISHED,
    FORECASTS,
    HEALTH,
    INVENTORY,
    PENDING,
    POWER_CHANGED,
    POWER_RECOMMENDED,
    PREEMPTED,
    ROLLUPS,
    SCORED,
    UNSCHEDULABLE,
)
from gpuaware.services.placement.durations import DurationAsker
from gpuaware.services.placement.explaining import Explainer
from gpuaware.services.placement.metrics import placement_samples
from gpuaware.services.placement.partitions import partition_filters
from gpuaware.services.placement.permit import AdmittedAndStored
from gpuaware.services.placement.power import PowerPlanning
from gpuaware.services.placement.quota_permit import QuotaPermit
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, Outcome, PlacementState, Rejected
from gpuaware.services.placement.world_sync import world_sync

if TYPE_CHECKING:
    from gpuaware.k8s import KubeLeaderLease

log = logging.getLogger(__name__)
POWER_TICK_S = 0.25
"""how often (wall seconds) the leader looks at the power planner: a booting node ready, a step due"""
UNECHOED_FOR_S = 60.0
"""how long a decision this instance sent waits for its echo before it is forgotten (an echo a
restarted follower skipped past)"""


class PlacementService:
    """One placement instance: its view, its lease, and (while leading) the pending consumer."""

    def __init__(self, ctx: ServiceContext, settings: PlacementSettings) -> None:
        self.ctx = ctx
        self.settings = s = settings
        self.nc = ctx.nc
        self.js = ctx.js
        self.source = f"placement/{ctx.instance_id}"[:253]
        self.latency = ctx.metrics.histogram("gpuaware_placement_decision_latency_seconds",
                                             "a pending pod's event emitted -> its decision sent")
        ctx.metrics.source(lambda: placement_samples(self))
        self.policy_alarm = ReloadAlarm(self.js, config="placement policy", service=s.service_name, cluster=s.cluster,
                                        source=self.source)
        """a GPUPolicy profile that failed to apply counted and alerted; resolved by the next one applied"""
        ctx.metrics.source(self.policy_alarm.samples)
        self._policy_in_force: tuple[str, dict[str, Any]] = (s.policy_name, dict(s.policy_config))
        typical = convert.typical_from_file(s.typical_pods_file) if s.typical_pods_file else None
        self.forecast_effect = SignalEffect("forecast")
        """how often the forecasts decided a placement (exported as gpuaware_placement_forecast_*)"""
        self.headroom = (ForecastHeadroom(s.latency_class_set, s.headroom_horizon_s) if s.forecast_headroom
                         else None)
        """the latency-sensitive classes' forecast demand kept free (None: switched off)"""
        self.state = PlacementState(
            cluster_name=s.cluster, source=self.source, policy_name=s.policy_name, policy_config=s.policy_config,
            typical=typical, learn_typical=typical is None, typical_min_pods=s.typical_min_pods,
            typical_window=s.typical_window, typical_drift=s.typical_drift, seed=s.seed,
            max_tombstones=s.max_tombstones, preemption=s.preemption,
            preemption_cooldown_s=s.preemption_cooldown_s, max_victims=s.max_victims,
            victim_min_run_s=s.victim_min_run_s, victim_max_requeues=s.victim_max_requeues or None,
            resize_hold_s=s.resize_hold_s, checkpoint_grace_s=s.checkpoint_grace_s,
            extra_filters=partition_filters(s.quota_tree),
            max_reservations=s.reservations, observers=(self.forecast_effect,),
            permits=(*((self.headroom,) if self.headroom is not None else ()), AdmittedAndStored()))
        st = self.state
        self.power = PowerPlanning(st, s, self.source)
        """the nodes' power (every instance); the leader's planner decides when ``power_planner`` is on"""
        self._appliers: dict[type[Any], tuple[Callable[[Any], bool | None], bool]] = {
            channel.type: (apply, frees) for channel, apply, frees in (
                (INVENTORY, st.apply_inventory, True), (HEALTH, st.apply_health, True),
                (SCORED, st.apply_scored, False), (ROLLUPS, st.apply_rollup, False),
                (FORECASTS, st.apply_forecast, False),
                (DEMAND_FORECASTS, self._apply_demand_forecast, True),
                (POWER_RECOMMENDED, self.power.apply_recommended, False),
                (POWER_CHANGED, self.power.apply_changed, True),
                (BOUND, st.apply_bound, False),
                (BIND_FAILED, st.apply_bind_failed, True), (PREEMPTED, st.apply_preempted, True),
                (FINISHED, st.apply_finished, True), (DECIDED, st.apply_decided, False),
                (UNSCHEDULABLE, st.apply_unschedulable, False))}
        """what each followed event type does to the view, and whether it may free capacity"""
        self.followers: list[bus.Follower] = []
        self.lease: bus.LeaderLease | KubeLeaderLease | None = None
        self.consumer: bus.PipelinedConsumer[PodPending] | None = None
        self._lead_task: asyncio.Task[None] | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._retry_event = asyncio.Event()
        self._report_task: asyncio.Task[None] | None = None
        self._power_task: asyncio.Task[None] | None = None
        self._world_task: asyncio.Task[None] | None = None
        self.quota = QuotaPermit(self.nc, s, self.source, self.state, self.loop_later)
        self.durations = DurationAsker(self.nc, self.state, self.source, s.cluster, s.duration_timeout_s)
        self.leading_since: float | None = None
        self.policies: Any = None
        """the GPUPolicy watch (``crd_policy.ConfigWatch``) in Kubernetes mode"""
        self._mine: collections.OrderedDict[str, float] = collections.OrderedDict()
        """ids of decisions this instance sent (and applied) whose echo has not come back yet: the echo
        is not applied again (and forgets its id, so this holds only what is in flight). An id leaves
        without an echo when its publish fails or the stream had it already (a duplicate)."""

    # -- life ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        try:  # the engine's kernels compiled before a pod waits on them
            log.info("placement engine ready in %.2f s (kernels compiled or loaded)", warm_up(s.policy_config))
        except Exception as exc:  # only a speed-up: the first decisions compile what they need instead
            log.warning("placement engine warm-up failed (%s: %s); kernels compile on first use",
                        type(exc).__name__, exc)
        if s.policy_source == "crd":  # the profile from its GPUPolicy before any decision
            from gpuaware.services.placement.crd_policy import watch_policies

            self.policies = await watch_policies(s.policy_object, self.use_profile)
            try:
                await asyncio.wait_for(self.policies.synced.wait(), 30.0)
            except TimeoutError:
                log.error("GPUPolicies not listed after 30 s (is the apiserver reachable? see the watch's "
                          "warnings); deciding with policy %s until they are", s.policy_name)
        # the node set first, so replaying the ledger places pods on known nodes (one rebuild)
        inv = await bus.follow(self.js, [INVENTORY], self._on_event, stream=TELEMETRY.name,
                               deliver="last_per_subject", with_suffixes=True, name="placement-inventory")
        self.followers.append(inv)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(inv.caught_up.wait(), 30.0)
        if s.world_snapshot and not await self._world_sync(quiet=False):
            self._world_task = self.ctx.supervise("placement world snapshot", self._world_retry, until=lambda: True)
        self.state.ensure_cluster()
        self.followers += [
            await bus.follow(self.js, [HEALTH, SCORED], self._on_event, stream=ALERTS.name, with_suffixes=True,
                             name="placement-health"),
            # thermal and power: the latest one-minute rollup of each node, then each new one
            await bus.follow(self.js, [ROLLUPS], self._on_event, stream=TELEMETRY.name,
                             deliver="last_per_subject", with_suffixes=True, name="placement-rollups"),
            await bus.follow(self.js, [BOUND, BIND_FAILED, PREEMPTED, FINISHED, POWER_CHANGED], self._on_event,
                             stream=BINDER.name, with_suffixes=True, name="placement-binder"),
            await bus.follow(self.js, [DECIDED, UNSCHEDULABLE, POWER_RECOMMENDED], self._on_event,
                             stream=PLACEMENT.name, with_suffixes=True, name="placement-decisions", skip=self._own_echo),
        ]
        if s.forecasts:
            self.followers.append(await bus.follow(self.js, [FORECASTS, DEMAND_FORECASTS], self._on_event,
                                                   stream=FORECAST.name, deliver="new", with_suffixes=True,
                                                   name="placement-forecast"))
        if s.leader_election == "kubernetes":  # cluster mode: a coordination.k8s.io Lease
            from gpuaware.k8s import KubeLeaderLease

            lease: bus.LeaderLease | KubeLeaderLease = KubeLeaderLease(
                s.lease_k8s_namespace(), f"gpuaware-placement-{s.cluster}", self.ctx.instance_id,
                duration_s=s.lease_k8s_duration_s, on_change=self._on_lease)
        else:
            lease = bus.LeaderLease(self.js, s.lease_bucket, s.cluster, self.ctx.instance_id,
                                    ttl_s=s.lease_ttl_s, poll_s=s.lease_poll_s, on_change=self._on_lease)
        self.lease = lease
        await lease.start()
        self._report_task = self.ctx.supervise("placement report", self._report)

    async def stop(self) -> None:
        """Stop deciding (in-flight pods finish), hand the lease over, stop following."""
        if self.policies is not None:
            await self.policies.stop()
        await self._step_down()
        if self.lease is not None:
            await self.lease.stop(release=True)
        for task in (self._report_task, self._world_task):
            if task is not None:
                task.cancel()
        await self.durations.stop()
        for f in self.followers:
            await f.stop()

    def use_profile(self, profile: dict[str, Any] | None) -> None:
        """Kubernetes mode: the followed GPUPolicy's profile (None: it is gone or never validated, so the
        settings' policy applies); the settings' queue order joins it unless it names one. A profile that
        fails to apply, whatever the exception, is refused: the last one in force stays (and is alerted)."""
        s = self.settings
        try:
            if profile is None:
                name, config = s.policy_name, dict(s.policy_config)
            else:
                name, config = f"GPUPolicy/{s.policy_object}", dict(profile)
                if s.queue_sort is not None:
                    config.setdefault("queue_sort", s.queue_sort)
            self.state.use_policy(name, config)
        except Exception as exc:  # called on the event loop by the watch: raising would only be logged there
            self.policy_alarm.failed(exc)
            try:  # what failed may have half-replaced it
                self.state.use_policy(*self._policy_in_force)
            except Exception:
                log.exception("placement: restoring policy %s failed", self._policy_in_force[0])
            return
        self._policy_in_force = (name, config)
        self.policy_alarm.succeeded()
        log.info("placement decides with %s from now on", name)

    @property
    def leading(self) -> bool:
        return self.lease is not None and self.lease.leading

    @property
    def caught_up(self) -> bool:
        return all(f.caught_up.is_set() for f in self.followers)

    async def _on_lease(self, leading: bool) -> None:
        if leading:
            self._lead_task = asyncio.create_task(self._lead(), name="placement takeover")
            self._lead_task.add_done_callback(self._lead_ended)
        else:
            await self._step_down()

    async def _lead(self) -> None:
        """Take over (see takeover.py): each step is retried; a step that keeps failing ends the task
        with `TakeoverFailed` and `_lead_ended` gives the lease up."""
        s = self.settings
        steps = takeover.Steps.of(s)
        await steps.run("replaying the streams", lambda: takeover.replayed(self.followers, s.takeover_sync_timeout_s))
        # what a previous leader decided just before it stopped must be in the view before deciding
        await steps.run("catching up with the streams",
                        lambda: takeover.synced(self.followers, s.takeover_sync_timeout_s))
        if s.world_snapshot:  # and what the world holds now: bindings the streams may not have shown a standby
            await self._world_sync(quiet=True)
        while not self.state.ensure_cluster():
            await asyncio.sleep(0.1)  # no inventory yet: nothing could be decided (nor by a standby)
        self.leading_since = time.monotonic()
        self.consumer = await steps.run("creating the pending-pods consumer", lambda: takeover.created(
            lambda: bus.subscribe_pipelined(
                self.js, PENDING, s.durable, self._on_pending, stream=BINDER.name, ack_wait=s.pending_ack_wait_s,
                max_deliver=s.pending_max_deliver, max_ack_pending=s.pending_max_ack_pending,
                batch=s.pending_batch, poll=0.5, retry=bus.RetryPolicy(base=0.5, cap=10.0)),
            lambda consumer: consumer.stop()))
        self._retry_task = self.ctx.supervise("placement retry", self._retry_loop)
        if s.power_planner:
            self._power_task = self.ctx.supervise("placement power", self._power_loop)
        self._retry_event.set()  # look at the parked pods a previous leader left
        self.quota.recheck_parked()  # and ask quota about them again (reclaim plans, quota_permit.py)
        log.info("placement leads cluster %s: %d nodes, %d parked pods", s.cluster, self.state.num_nodes,
                 len(self.state.ledger.waiting()))

    def _lead_ended(self, task: asyncio.Task[None]) -> None:
        """Done-callback of the takeover: one that failed, or died of anything but a step-down, gives
        the lease up, so there is never a leader that renews its lease and does not decide."""
        if task.cancelled():
            return  # stepped down: `_step_down` cleaned up
        exc = task.exception()
        if exc is None or task is not self._lead_task:
            return  # leading, or a takeover of a term already stepped down from
        s = self.settings
        then = (f"giving the lease up so a standby takes over; this instance stays out of the election for "
                f"{s.takeover_cooldown_s:g}s, then campaigns again")
        if isinstance(exc, takeover.TakeoverFailed):
            log.error("placement takeover of cluster %s: %s; %s", s.cluster, exc, then)
        else:
            log.error("placement takeover of cluster %s died (%s: %s); %s", s.cluster, type(exc).__name__, exc,
                      then, exc_info=exc)
        if self.lease is not None and self.lease.leading:
            self.lease.resign(s.takeover_cooldown_s)  # its step-down runs `_step_down`

    async def _step_down(self) -> None:
        self.leading_since = None
        for task in (self._lead_task, self._retry_task, self._power_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._lead_task = self._retry_task = self._power_task = None
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            await consumer.stop()
        self.state.release_held()  # a standby holds nothing at Permit

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(30.0)
            log.info("placement %s", "leader" if self.leading else "standby", extra={"state": self.state.summary()})

    async def _world_sync(self, *, quiet: bool) -> bool:
        """Seed the view with the world's truth (world_sync.py); False when no binder answers."""
        synced = await world_sync(self.nc, self.state, self.settings.cluster, self.source, quiet=quiet)
        self._freed(synced)
        return synced

    async def _world_retry(self) -> None:
        while not await self._world_sync(quiet=True):
            await asyncio.sleep(self.settings.world_retry_s)

    # -- following the world ----------------------------------------------------------------------

    def _freed(self, freed: bool) -> None:
        if freed and self._retry_task is not None:
            self._retry_event.set()

    def _on_event(self, ev: Any, _d: bus.FollowDelivery) -> None:
        """A followed event into the view, by its channel's type; events that may free capacity (a node
        changed, a GPU's health, a pod gone) wake the retry pass."""
        apply, frees = self._appliers[type(ev)]
        if apply(ev) and frees:
            self._freed(True)

    def _apply_demand_forecast(self, ev: Any) -> bool:
        self.power.apply_demand_forecast(ev)
        return self.state.apply_demand_forecast(ev, self.headroom)

    # -- deciding ---------------------------------------------------------------------------------

    async def _on_pending(self, pod: PodPending, _d: bus.Delivery) -> Awaitable[None] | None:
        """Decide now, in stream order, and send; the returned completion says whether it was stored
        (the consumer acks the pending pod only then)."""
        if not self.leading:
            raise bus.TransientError("not the leader (any more)", delay=0.2)
        try:
            outcomes = self.state.on_pending(pod)
        except RuntimeError as exc:
            raise bus.TransientError(str(exc), delay=1.0) from None
        if not outcomes:
            return None
        done = await self._send(outcomes, pending=True)
        if any(isinstance(o, Decided) and o.msg.pod_uid == pod.pod_uid for o in outcomes):
            self.latency.observe(max(0.0, time.time() - pod.emitted_at))
        return done

    async def _retry_loop(self) -> None:
        s = self.settings
        while True:
            await self._retry_event.wait()
            self._retry_event.clear()
            try:
                outcomes, more = self.state.retry(s.retry_batch)
                if outcomes or self.quota.due:  # parked pods whose reclaim plan is due count too
                    await (await self._send(outcomes, pending=False))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("retrying parked pods: %s; trying again on the next freed capacity", exc)
                more = False
            if more:
                self._retry_event.set()
            await asyncio.sleep(s.retry_interval_s)

    async def _power_loop(self) -> None:
        """The leader's node-power planner (power.py): booting nodes freed once ready, a decision each
        ``power_step_s`` of the world's time, its recommendations stored before the next one."""
        while True:
            await asyncio.sleep(POWER_TICK_S)
            now = self.state.planner.world.now()
            self._freed(self.power.tick(now))
            try:
                recs = self.power.step(now)
            except Exception as exc:  # the planner's arithmetic must never stop the leader deciding pods
                log.warning("power planner step failed (%s: %s); trying again on the next step",
                            type(exc).__name__, exc, exc_info=exc)
                continue
            for rec in recs:
                try:
                    await bus.publish(self.js, POWER_RECOMMENDED, rec, timeout=5.0)
                except Exception as exc:
                    log.warning("power recommendation %s %s not stored (%s); decided again next step",
                                rec.action, rec.node, exc)
                    self.power.unsent(rec)

    async def _send(self, outcomes: list[Outcome], *, pending: bool) -> Awaitable[None]:
        """Publish decisions (held at Permit until stored: permit.py) and verdicts without waiting; the
        returned completion waits for the stream and raises TransientError when one was not stored (a
        decision not stored is rejected, so the pod is decided again), PermanentError for an invalid
        request (after its verdict was stored)."""
        if self.settings.quota_enabled:  # reclaim plans executed, refused decisions parked (quota_permit.py)
            outcomes = await self.quota.permit(outcomes)
        self.durations.ask_about(outcomes)  # fair-share order: parked pods' predicted runtimes, in the background
        sent: list[tuple[Outcome, asyncio.Future[bus.PubAck]]] = []
        failure: BaseException | None = None
        for o in outcomes:
            try:
                if isinstance(o, Decided):
                    # remembered before it is sent: its echo often arrives before the stream's ack
                    self._remember(o.msg.decision_id)
                    sent.append((o, await bus.publish_async(self.js, DECIDED, o.msg)))
                else:
                    sent.append((o, await bus.publish_async(self.js, UNSCHEDULABLE, o.msg)))
            except Exception as exc:
                failure = exc
                self._unpublished(o)
        return self._stored(sent, failure, pending)

    async def _stored(self, sent: list[tuple[Outcome, asyncio.Future[bus.PubAck]]],
                      failure: BaseException | None, pending: bool) -> None:
        rejected: Rejected | None = None
        for o, fut in sent:
            try:
                ack = await fut
            except Exception as exc:
                failure = exc
                self._unpublished(o)
                continue
            if isinstance(o, Decided):
                self.state.allow(o.msg.pod_uid)  # admitted and stored: the ledger records it
                if ack.duplicate:
                    self._mine.pop(ack.msg_id, None)  # not stored again: no echo comes
                    await self._reconcile(o.msg, ack)
            if isinstance(o, Rejected):
                rejected = o
        if failure is not None:
            raise bus.TransientError(f"publishing failed ({type(failure).__name__}: {failure})", delay=0.5)
        if rejected is not None and pending:
            raise bus.PermanentError(f"invalid pod request: {rejected.reason}")

    def _remember(self, msg_id: str) -> None:
        now = time.monotonic()
        self._mine[msg_id] = now
        mine = self._mine
        while mine and next(iter(mine.values())) < now - UNECHOED_FOR_S:
            mine.popitem(last=False)

    def _own_echo(self, msg_id: str | None) -> bool:
        """The follower's skip test: a decision this instance sent and its view has (one held at Permit
        is allowed by its echo); a redelivered echo, or one of a decision released, is applied."""
        return msg_id is not None and self._mine.pop(msg_id, None) is not None and self.state.echoed(msg_id)

    def _unpublished(self, o: Outcome) -> None:
        if isinstance(o, Decided):
            self._mine.pop(o.msg.decision_id, None)  # whoever stores this id next, its echo is news here
            self.state.reject(o.msg.pod_uid)  # discarded: the pod is decided again
        else:
            entry = self.state.ledger.pods.get(o.msg.pod_uid)
            if entry is not None and entry.attempt == o.msg.attempt:
                entry.reason = ""  # the verdict was not stored: publish it on the next try

    async def _reconcile(self, ours: PlacementDecided, ack: bus.PubAck) -> None:
        """The stream already held a decision with this id (a previous leader's): it is the truth."""
        try:
            stored = await bus.read_stored(self.js, DECIDED, ack.stream, ack.seq)
        except Exception as exc:
            log.warning("decision %s: cannot read the stored copy (%s)", ours.decision_id, exc)
            return
        if stored.node != ours.node or stored.slices != ours.slices:
            log.info("decision %s was already made (%s), not %s: keeping the stored one", ours.decision_id,
                     stored.node, ours.node)
            self.state.apply_decided(stored)

    def loop_later(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._retry_event.set)


def mounter(hook: Callable[[PlacementService], None] | None = None
            ) -> Callable[[ServiceContext], Awaitable[list[bus.Endpoint[Any, Any]]]]:
    """The `mount` for `run_service`; `hook` receives the service once it runs (tests, tools)."""

    async def mount(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
        settings = ctx.settings
        if not isinstance(settings, PlacementSettings):
            raise TypeError(f"placement needs PlacementSettings, not {type(settings).__name__}")
        service = PlacementService(ctx, settings)
        await service.start()
        ctx.on_stop(service)
        if hook is not None:
            hook(service)
        if settings.extender_port:
            from gpuaware.services.placement.extender_http import ExtenderServer

            ext = ExtenderServer(service.state, settings.extender_host, settings.extender_port,
                                 bind=settings.extender_bind)
            await ext.start()
            ctx.on_stop(ext)
        explainer = Explainer(service.state, service.quota, settings, service.js, service.source)
        return [bus.Endpoint(name="explain", subject=PLACEMENT_EXPLAIN, request_type=ExplainRequest,
                             handler=explainer.explain)]

    return mount
