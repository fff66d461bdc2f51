"""Quota handlers: decode (the bus), decide (``state.QuotaView`` over gpuaware.quota), publish, store.

    reads / serves                                           does
    quota.admit (request/reply, every instance)              the leader: admit / refuse with the reason /
                                                             admit with a reclaim plan; reserves what it
                                                             admits. A standby: relays it to the leader
    quota.admit.leader.<cluster> (the leader only)           the leader answers what standbys relay
    the lease: KV bucket quota-leader, key <cluster>         one leader per cluster (value: its instance)
    follow binder.pod.{pending,bound,bind_failed,preempted,finished}.v1[.>] (all, replayed on start)
                                                             the ledger (what runs, where, for whom;
                                                             what waits: each queue's demand);
                                                             chargeback intervals opened and closed
    every report_interval_s (the leader only)                QuotaUsageReported (per queue: guaranteed,
                                                             limit, used, fair share; Jain's index) ->
                                                             quota.usage.reported.v1.<cluster>, and
                                                             quota_usage rows

Why follow from the stream's start: the binder's events are the truth of what ran; replaying them
rebuilds the ledger exactly (each event carries its own time), and the interval writes are
idempotent, so a restart neither forgets a running pod nor bills a second twice. ``quota.admit`` is
answered only once the replay caught up (before that, a request waits for it, up to ``catch_up_s``),
so a restarted quota cannot admit over a limit it has not re-read yet.

Two replicas, one decides. Admission reserves capacity in the deciding instance's memory (an
admitted pod counts against its queue until the binder reports it bound), so two instances that
both decided would each admit up to a queue's limit: twice the limit. Hence only the holder of
the lease (``bus.LeaderLease``, like placement's) decides. Every instance still serves
``quota.admit`` in the service's queue group: a standby relays what it receives to
``quota.admit.leader.<cluster>``, which only the leader subscribes to (from the end of its takeover
until it steps down), so placement never finds "no responders" (which it would take as "admit
everything") while one instance runs, and a request that arrives mid-takeover is held, up to
``leader_wait_s``, until the new leader answers it. The leader stops deciding before its lease can be
won elsewhere (it steps down first when it stops, and the lease's fence steps a cut-off holder down
before the key expires), and a decision checks it still leads in the same event-loop step that
reserves, so two instances never decide at once. Every instance follows the binder's stream all
the time (a standby's ledger stays warm); a new leader first follows it up to now (``sync``: what
the previous leader's admitted pods became, bound or gone, before it answers), then serves the
leader subject (``bus.serve``, a plain subscription: a process keeps one micro service, the one
``run_service`` registers, or ``$SRV.PING.quota`` would get two replies per process and an
authenticated server refuses both; the lease's KV bucket and ``gpuaware_quota_leading`` name the
leader). What a takeover cannot rebuild is an admission
the previous leader answered whose pod the binder has not bound yet: it counts again once its
bind event arrives. A pod asked about again on the new leader is admitted once ("already
admitted" when its bind was seen). Only the leader publishes usage reports (one per interval);
every instance writes the chargeback intervals, which are idempotent, so a takeover loses none.
Metrics: ``gpuaware_quota_leading``, ``..._admissions_answered`` (decided here),
``..._admissions_relayed``, ``..._takeovers``, ``..._takeover_seconds``.

The tree file is re-read when it changes (checked every report interval): a tree that does not
validate -- cyclic, over-committed, negative or out-of-range amounts, unknown queues -- or cannot be
read or applied at all (any error) is refused with the reason and the running tree stays in force;
the report loop outlives every such failure, so a good tree restored later is picked up and usage is
reported throughout. In Kubernetes mode (``tree_source=crd``) the tree is the
cluster's GPUQueue objects instead, watched (``crd_tree.py``): the same refusal, per object, written
into the object's status; ``quota.admit`` waits for the first list like it waits for the replay.

Errors: a request for another cluster is a 421 service error; an undecodable request is the bus's
400. A bound/finished event that cannot be decoded is dead-lettered by the follower. The database
being away delays the bill, never an answer (``store.Writer`` retries in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.quota import QueueTree, QuotaConfigError, validate
from gpuaware.runtime import ReloadAlarm, Sample, ServiceContext, counter, gauge, supervise
from gpuaware.schemas import (
    BINDER,
    QUOTA_ADMIT,
    AdmitReply,
    AdmitRequest,
    PodBound,
    PodPending,
    QuotaUsageReported,
    quota_admit_leader,
)
from gpuaware.services.quota.settings import OPEN_TREE, QuotaSettings
from gpuaware.services.quota.state import POD_EVENT_TYPES, PodEvent, QuotaView, ended_at
from gpuaware.services.quota.store import Writer

log = logging.getLogger(__name__)

POD_EVENTS = [bus.event_channel(event_type) for event_type in POD_EVENT_TYPES]
REPORTED = bus.event_channel(QuotaUsageReported)
CATCH_UP_S = 30.0
TAKEOVER_TRIES = 5
"""failed tries in a row to follow the binder's stream up to now before a new leader gives the lease up"""
CREATE_GRACE_S = 10.0
"""how long a step-down waits for a leader endpoint still being created, to stop it"""


class QuotaService:
    def __init__(self, settings: QuotaSettings, js: Any, pool: Any, instance: str, *, nc: Any = None,
                 clock: Any = time.time) -> None:
        self.settings = settings
        self.js = js
        self.nc = nc if nc is not None else js._nc
        self.instance = instance
        self.pool = pool
        self.clock = clock
        self.source = f"{settings.service_name}/{instance}"
        self.view = QuotaView(settings.queue_tree(), cluster=settings.cluster, source=self.source,
                              reservation_ttl_s=settings.reservation_ttl_s, pending_ttl_s=settings.pending_ttl_s)
        self.writer = Writer(pool, settings.cluster)
        self.follower: bus.Follower | None = None
        self.reports = 0
        self.last_report: QuotaUsageReported | None = None
        self.last_tree_error = ""
        self.tree_alarm = ReloadAlarm(js, config="quota tree", service=settings.service_name, cluster=settings.cluster,
                                      source=self.source)
        """a refused tree (file or GPUQueues) counted and alerted; resolved by the next tree in force"""
        self._tree_mtime = Path(settings.tree).stat().st_mtime_ns if settings.tree else None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.queues: Any = None
        """the GPUQueue watch (``crd_tree.ConfigWatch``) in Kubernetes mode"""
        self.lease: bus.LeaderLease | None = None
        self.answering = asyncio.Event()
        """set while this instance leads and has taken over: the one instance that decides admissions"""
        self.leader_subject = quota_admit_leader(settings.cluster)
        self.leader_service: bus.Responder | None = None
        """what answers ``leader_subject`` while leading (a subscription, not a second micro service)"""
        self._lead_task: asyncio.Task[None] | None = None
        self._creating: asyncio.Future[bus.Responder] | None = None
        self.answered = 0
        """admissions this instance decided (as the leader), relayed ones included"""
        self.relayed = 0
        """admissions this instance received as a standby and the leader answered"""
        self.takeovers = 0
        self.takeover_s: float | None = None
        """the last takeover: lease won -> answering (seconds)"""

    async def start(self) -> None:
        self.writer.start()
        if self.settings.tree_source == "crd":
            from gpuaware.services.quota.crd_tree import watch_queues

            self.queues = await watch_queues(self.use_tree, self.settings.tree_fields())
            await self._tree_read()
        self.follower = await bus.follow(self.js, POD_EVENTS, self._on_pod, stream=BINDER.name, deliver="all",
                                         with_suffixes=True, name="quota-pods")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.follower.caught_up.wait(), CATCH_UP_S)
        s = self.settings
        self.lease = bus.LeaderLease(self.js, s.lease_bucket, s.cluster, self.instance, ttl_s=s.lease_ttl_s,
                                     poll_s=s.lease_poll_s, on_change=self._on_lease)
        await self.lease.start()
        self._task = supervise("quota report", self._report_loop)

    async def stop(self) -> None:
        await self._step_down()  # no longer answering before the key is handed over
        if self.lease is not None:
            await self.lease.stop(release=True)
        if self.queues is not None:
            await self.queues.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.follower is not None:
            with contextlib.suppress(Exception):
                await self.follower.stop()
        await self.writer.stop()
        await self.pool.close()

    # --- handlers -----------------------------------------------------------------------------------
    def _on_pod(self, ev: PodEvent, _d: bus.FollowDelivery) -> None:
        if ev.cluster != self.settings.cluster:
            return
        if isinstance(ev, PodPending):
            self.view.announced(ev)
            return
        if isinstance(ev, PodBound):
            iv = self.view.bound(ev, ev.bound_at)
            self.writer.opened(iv, ev.namespace, ev.pod_name, ev.node)
            return
        ended = self.view.gone(ev, ended_at(ev))
        if ended is not None:
            self.writer.closed(ended)

    async def admit(self, req: AdmitRequest) -> AdmitReply:
        """``quota.admit``: decided here when this instance leads, else relayed to the leader."""
        if req.cluster != self.settings.cluster:
            raise bus.ServiceError(421, f"this quota instance serves cluster {self.settings.cluster}, not {req.cluster}")
        if self.answering.is_set():
            return await self._decide(req)
        return await self._relay(req)

    async def _leader_admit(self, req: AdmitRequest) -> AdmitReply:
        """``quota.admit.leader.<cluster>``: a standby's relayed request (503 once no longer leading)."""
        if req.cluster != self.settings.cluster:
            raise bus.ServiceError(421, f"this quota instance serves cluster {self.settings.cluster}, not {req.cluster}")
        return await self._decide(req)

    async def _relay(self, req: AdmitRequest) -> AdmitReply:
        """A standby's answer: the leader's. While nobody leads (a takeover under way) the request is held,
        up to ``leader_wait_s``, until a leader answers it -- this instance, should it win the lease."""
        loop = asyncio.get_running_loop()
        wait_s = self.settings.leader_wait_s
        deadline = loop.time() + wait_s
        while True:
            if self.answering.is_set():
                return await self._decide(req)
            left = deadline - loop.time()
            if left <= 0:
                raise bus.TransientError(f"no quota leader answered within {wait_s:g}s", delay=1.0)
            try:
                reply = await bus.request(self.nc, self.leader_subject, req, AdmitReply, timeout=left)
            except bus.NoResponders:
                pass  # nobody leads right now: wait for a leader
            except bus.RequestTimeout:
                raise bus.TransientError(f"the quota leader did not answer within {wait_s:g}s", delay=1.0) from None
            except bus.ServiceError as exc:
                if exc.code != 503:  # the leader's answer, an error (as it would have been here)
                    raise
                # 503: it stepped down as the request came; ask whoever leads next
            else:
                self.relayed += 1
                return reply
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.answering.wait(), min(left, self.settings.lease_poll_s))

    async def _decide(self, req: AdmitRequest) -> AdmitReply:
        """The leader's decision: reserves what it admits in this instance's ledger."""
        await self._tree_read()
        if not self.answering.is_set():  # stepped down meanwhile: the next leader decides
            raise bus.TransientError("this quota instance no longer leads", delay=0.2)
        reply = self.view.admit(req, self.clock())
        self.answered += 1
        if not reply.admitted or reply.would_reclaim:
            log.info("quota.admit %s/%s queue %s: %s%s", req.pod.namespace, req.pod.pod_name, reply.queue,
                     "admitted " if reply.admitted else "refused ", reply.reason)
        return reply

    # --- leadership ---------------------------------------------------------------------------------
    async def _on_lease(self, leading: bool) -> None:
        if leading:
            self._lead_task = asyncio.create_task(self._lead(), name="quota takeover")
            self._lead_task.add_done_callback(self._lead_ended)
        else:
            await self._step_down()

    async def _lead(self) -> None:
        """Take over: the binder's stream replayed and followed up to now (everything the previous leader
        counted that reached the stream), then answer. Each try that fails is retried after a backoff;
        ``TAKEOVER_TRIES`` failures in a row end the task and ``_lead_ended`` gives the lease up."""
        won = time.monotonic()
        follower = self.follower
        backoff = bus.RetryPolicy(base=0.2, cap=2.0)
        failures = 0
        while follower is not None:
            try:
                await asyncio.wait_for(follower.caught_up.wait(), CATCH_UP_S)
                if await follower.sync(timeout=CATCH_UP_S):
                    break
                raise TimeoutError(f"the binder's stream not followed up to now within {CATCH_UP_S:g}s")
            except TimeoutError as exc:
                failures += 1
                if failures >= TAKEOVER_TRIES:
                    raise
                log.warning("quota takeover of cluster %s: %s (try %d of %d)", self.settings.cluster, exc or
                            "the binder's stream not replayed", failures, TAKEOVER_TRIES)
                await asyncio.sleep(backoff.delay(failures))
        term = self.lease.term if self.lease is not None else 0
        self._creating = creating = asyncio.ensure_future(bus.serve(
            self.nc, bus.Endpoint(name="admit-leader", subject=self.leader_subject, request_type=AdmitRequest,
                                  handler=self._leader_admit), service=self.settings.service_name))
        self.leader_service = await asyncio.shield(creating)  # cancelled: `_step_down` stops what it made
        self._creating = None
        self.answering.set()
        self.takeovers += 1
        self.takeover_s = time.monotonic() - won
        log.info("quota leads cluster %s (term %d, instance %s): answering quota.admit, %.2f s after winning the "
                 "lease", self.settings.cluster, term, self.instance, self.takeover_s)

    def _lead_ended(self, task: asyncio.Task[None]) -> None:
        """A takeover that failed gives the lease up, so a standby leads rather than nobody answering."""
        if task.cancelled() or task is not self._lead_task:
            return
        exc = task.exception()
        if exc is None:
            return
        log.error("quota takeover of cluster %s failed (%s: %s); giving the lease up so a standby takes over",
                  self.settings.cluster, type(exc).__name__, exc)
        if self.lease is not None and self.lease.leading:
            self.lease.resign()

    async def _step_down(self) -> None:
        """Stop deciding at once (before the lease can be won elsewhere), then stop the leader endpoint."""
        self.answering.clear()
        task, self._lead_task = self._lead_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        creating, self._creating = self._creating, None
        if creating is not None:  # the term ended while its endpoint was being made: it must not outlive it
            with contextlib.suppress(Exception):
                self.leader_service = await asyncio.wait_for(creating, CREATE_GRACE_S)
        service, self.leader_service = self.leader_service, None
        if service is not None:
            with contextlib.suppress(Exception):
                await service.stop()
            log.info("quota of cluster %s: %s stepped down", self.settings.cluster, self.instance)

    @property
    def leading(self) -> bool:
        return self.answering.is_set()

    # --- reporting ----------------------------------------------------------------------------------
    async def report(self) -> QuotaUsageReported:
        r = self.view.report(self.clock())
        await bus.publish(self.js, REPORTED.at(self.settings.cluster), r,
                          msg_id=f"quota-{self.settings.cluster}-{r.as_of:.3f}")
        self.writer.usage(r)
        self.reports += 1
        self.last_report = r
        return r

    async def _tree_read(self) -> None:
        """Kubernetes mode: wait (up to ``CATCH_UP_S``) until the GPUQueues were listed once."""
        if self.queues is not None and not self.queues.synced.is_set():
            try:
                await asyncio.wait_for(self.queues.synced.wait(), CATCH_UP_S)
            except TimeoutError:
                log.error("GPUQueues not listed after %.0f s (is the apiserver reachable? see the watch's "
                          "warnings); answering with the tree in force", CATCH_UP_S)

    def use_tree(self, tree: QueueTree | None) -> None:
        """Kubernetes mode: the tree the GPUQueues make now (None: none accepted, every queue open). One
        that fails to apply, whatever the exception, is refused and the running tree stays."""
        try:
            tree = tree if tree is not None else validate(OPEN_TREE)
            lost = self.view.replace_tree(tree)
        except Exception as exc:  # called on the event loop by the watch: raising would only be logged there
            self.view.counts["tree_rejected"] += 1
            self.last_tree_error = f"{type(exc).__name__}: {exc}"
            self.tree_alarm.failed(exc)
            return
        self.last_tree_error = ""
        self.tree_alarm.succeeded()
        log.info("quota tree from GPUQueues: %d queues (%s); %d running pods lost their queue", len(tree.specs),
                 ", ".join(sorted(tree.specs)), lost)

    def reload(self) -> bool:
        """Re-read the tree file if it changed. A tree that does not validate, or that fails to load or
        apply for any other reason, is refused with the reason (logged, ``last_tree_error``) and the
        running one stays; True when a new one is in force."""
        path = Path(self.settings.tree) if self.settings.tree else None
        if path is None:
            return False
        try:
            mtime = path.stat().st_mtime_ns
        except OSError as exc:
            mtime = None
            reason = f"cannot read {path}: {exc}"
        if mtime is not None and mtime == self._tree_mtime:
            return False
        self._tree_mtime = mtime
        if mtime is not None:
            try:
                tree = validate(path)
                lost = self.view.replace_tree(tree)
            except QuotaConfigError as exc:
                reason = str(exc)
            except Exception as exc:  # unreadable, undecodable or a bug: the running tree must stay either way
                reason = f"{type(exc).__name__}: {exc}"
            else:
                self.last_tree_error = ""
                self.tree_alarm.succeeded()
                log.info("quota tree %s reloaded (%d queues; %d running pods lost their queue)", path,
                         len(tree.specs), lost)
                return True
        self.view.counts["tree_rejected"] += 1
        self.last_tree_error = reason
        log.error("quota tree %s refused, the running tree stays: %s", path, reason)
        self.tree_alarm.failed(reason)
        return False

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.report_interval_s)
            try:
                self.reload()
            except Exception:  # reload refuses bad trees itself; this is a last guard for the loop
                log.exception("quota tree reload failed; the running tree stays")
            if not self.answering.is_set():
                continue  # a standby: only the leader reports (one report per interval, not two)
            try:
                await self.report()
            except Exception as exc:
                log.warning("quota report failed (%s: %s); next interval retries", type(exc).__name__, exc)


async def mount(ctx: ServiceContext, *, on_service: Any = None) -> list[bus.Endpoint[Any, Any]]:
    settings: QuotaSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    pool = await tsdb.open_service_pool(settings.database_url, service=settings.service_name,
                                        env=settings.database_variable, max_size=settings.pool_size,
                                        timeout=settings.db_timeout_s)
    service = QuotaService(settings, ctx.js, pool, ctx.instance_id, nc=ctx.nc)
    ctx.on_stop(service)
    await service.start()
    if on_service is not None:
        on_service(service)
    ctx.metrics.source(lambda: quota_samples(service))
    ctx.metrics.source(service.tree_alarm.samples)
    return [bus.Endpoint(name="admit", subject=QUOTA_ADMIT, request_type=AdmitRequest, handler=service.admit)]


def quota_samples(service: QuotaService) -> Iterable[Sample]:
    """Quota's Prometheus series, from its last usage report: per queue GPUs used, guaranteed, limit (when
    bounded) and fair share, pods pending; Jain's index over the queues asking; reclaims; refused trees."""
    yield counter("gpuaware_quota_trees_refused", "queue tree files refused (the running tree stayed)",
                  service.view.counts.get("tree_rejected", 0))
    yield gauge("gpuaware_quota_leading", "1 while this instance holds the quota lease and answers", service.leading)
    yield counter("gpuaware_quota_admissions_answered", "admissions this instance decided as the leader",
                  service.answered)
    yield counter("gpuaware_quota_admissions_relayed", "admissions this standby relayed to the leader",
                  service.relayed)
    yield counter("gpuaware_quota_takeovers", "times this instance won the lease and took over", service.takeovers)
    if service.takeover_s is not None:
        yield gauge("gpuaware_quota_takeover_seconds", "the last takeover: lease won -> answering",
                    service.takeover_s)
    if service.queues is not None:
        verdicts = service.queues.objects.verdicts.values()
        yield gauge("gpuaware_quota_queue_objects_refused", "GPUQueue objects whose generation is refused",
                    sum(1 for v in verdicts if not v.accepted))
    r = service.last_report
    if r is None:
        return
    if r.jain_index is not None:
        yield gauge("gpuaware_quota_jain_index", "Jain's index of fair share over the queues asking", r.jain_index)
    yield counter("gpuaware_quota_reclaims", "reclaims planned for queues taking back what they lent", r.reclaims)
    for q in r.queues:
        gpus = {"used": q.used.gpu_milli, "guaranteed": q.guaranteed.gpu_milli, "fair_share": q.fair_share.gpu_milli}
        if q.limit is not None:
            gpus["limit"] = q.limit.gpu_milli
        for kind, milli in gpus.items():
            yield gauge("gpuaware_quota_queue_gpus", "GPUs of a queue: used, guaranteed, limit, fair share",
                        milli / 1000.0, queue=q.queue, kind=kind)
        yield gauge("gpuaware_quota_queue_pending_pods", "pods of a queue waiting", q.pending_pods, queue=q.queue)


def mounter(on_service: Any) -> Any:
    """``mount`` that also hands the running ``QuotaService`` to ``on_service`` (tests)."""

    async def _mount(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
        return await mount(ctx, on_service=on_service)

    return _mount
