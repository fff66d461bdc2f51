"""Quota handlers: decode (the bus), decide (``state.QuotaView`` over gpuaware.quota), publish, store.

    reads / serves                                           does
    quota.admit (request/reply)                              admit / refuse with the reason / admit
                                                             with a reclaim plan; reserves what it admits
    follow binder.pod.{pending,bound,bind_failed,preempted,finished}.v1[.>] (all, replayed on start)
                                                             the ledger (what runs, where, for whom;
                                                             what waits: each queue's demand);
                                                             chargeback intervals opened and closed
    every report_interval_s                                  QuotaUsageReported (per queue: guaranteed,
                                                             limit, used, fair share; Jain's index) ->
                                                             quota.usage.reported.v1.<cluster>, and
                                                             quota_usage rows

Why follow from the stream's start: the binder's events are the truth of what ran; replaying them
rebuilds the ledger exactly (each event carries its own time), and the interval writes are
idempotent, so a restart neither forgets a running pod nor bills a second twice. ``quota.admit`` is
answered only once the replay caught up (before that, a request waits for it, up to ``catch_up_s``),
so a restarted quota cannot admit over a limit it has not re-read yet.

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
from gpuaware.runtime import Sample, ServiceContext, counter, gauge
from gpuaware.schemas import (
    BINDER,
    QUOTA_ADMIT,
    AdmitReply,
    AdmitRequest,
    PodBound,
    PodPending,
    QuotaUsageReported,
)
from gpuaware.services.quota.settings import OPEN_TREE, QuotaSettings
from gpuaware.services.quota.state import POD_EVENT_TYPES, PodEvent, QuotaView, ended_at
from gpuaware.services.quota.store import Writer

log = logging.getLogger(__name__)

POD_EVENTS = [bus.event_channel(event_type) for event_type in POD_EVENT_TYPES]
REPORTED = bus.event_channel(QuotaUsageReported)
CATCH_UP_S = 30.0


class QuotaService:
    def __init__(self, settings: QuotaSettings, js: Any, pool: Any, instance: str, *, clock: Any = time.time) -> None:
        self.settings = settings
        self.js = js
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
        self._tree_mtime = Path(settings.tree).stat().st_mtime_ns if settings.tree else None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.queues: Any = None
        """the GPUQueue watch (``crd_tree.ConfigWatch``) in Kubernetes mode"""

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
        self._task = asyncio.create_task(self._report_loop(), name="quota report")

    async def stop(self) -> None:
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
        if req.cluster != self.settings.cluster:
            raise bus.ServiceError(421, f"this quota instance serves cluster {self.settings.cluster}, not {req.cluster}")
        if self.follower is not None and not self.follower.caught_up.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.follower.caught_up.wait(), CATCH_UP_S)
        await self._tree_read()
        reply = self.view.admit(req, self.clock())
        if not reply.admitted or reply.would_reclaim:
            log.info("quota.admit %s/%s queue %s: %s%s", req.pod.namespace, req.pod.pod_name, reply.queue,
                     "admitted " if reply.admitted else "refused ", reply.reason)
        return reply

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
        """Kubernetes mode: the tree the GPUQueues make now (None: none accepted, every queue open)."""
        tree = tree if tree is not None else validate(OPEN_TREE)
        lost = self.view.replace_tree(tree)
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
                log.info("quota tree %s reloaded (%d queues; %d running pods lost their queue)", path,
                         len(tree.specs), lost)
                return True
        self.view.counts["tree_rejected"] += 1
        self.last_tree_error = reason
        log.error("quota tree %s refused, the running tree stays: %s", path, reason)
        return False

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.report_interval_s)
            try:
                self.reload()
            except Exception:  # reload refuses bad trees itself; this is a last guard for the loop
                log.exception("quota tree reload failed; the running tree stays")
            try:
                await self.report()
            except Exception as exc:
                log.warning("quota report failed (%s: %s); next interval retries", type(exc).__name__, exc)


async def mount(ctx: ServiceContext, *, on_service: Any = None) -> list[bus.Endpoint[Any, Any]]:
    settings: QuotaSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    pool = await tsdb.open_service_pool(settings.database_url, service=settings.service_name,
                                        env=settings.database_variable, max_size=settings.pool_size,
                                        timeout=settings.db_timeout_s)
    service = QuotaService(settings, ctx.js, pool, ctx.instance_id)
    ctx.on_stop(service)
    await service.start()
    if on_service is not None:
        on_service(service)
    ctx.metrics.source(lambda: quota_samples(service))
    return [bus.Endpoint(name="admit", subject=QUOTA_ADMIT, request_type=AdmitRequest, handler=service.admit)]


def quota_samples(service: QuotaService) -> Iterable[Sample]:
    """Quota's Prometheus series, from its last usage report: per queue GPUs used, guaranteed, limit (when
    bounded) and fair share, pods pending; Jain's index over the queues asking; reclaims; refused trees."""
    yield counter("gpuaware_quota_trees_refused", "queue tree files refused (the running tree stayed)",
                  service.view.counts.get("tree_rejected", 0))
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
