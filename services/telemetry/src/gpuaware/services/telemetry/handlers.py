"""Collector handlers: decode (the bus), check (gpuaware.telemetry), write (gpuaware.tsdb), ack.

One durable consumer on ``telemetry.>`` receives inventory, samples and usage reports in the order
the agents published them (an agent announces its inventory before its first sample, so a sample
rarely meets a node the collector does not know yet). Dispositions, as exceptions (gpuaware.bus):

    message                         outcome
    NodeInventory                   the node's GPUs known at once; a batch's changed nodes upserted together; ack
    GpuSampled, valid               queued for the next COPY; ack once committed
    GpuSampled, refused             dead letter with the reason (`check_batch` codes), counted per code;
                                    "no inventory yet" / "unknown GPU" wait `inventory_attempts` first
    GpuSampled, database down       held, then TransientError: redelivered with backoff, never lost
    PodUsageReported                inserted (first writer wins per pod, GPU, window); then ack
    GpuRolledUp                     ack (our own output, seen because the filter is telemetry.>)
    undecodable / out of range      dead letter by the bus (decode error), counted there

``collector.stats`` (request/reply) returns the counters, for operators and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import Sample, ServiceContext, consumer_samples, counter, gauge, supervise
from gpuaware.schemas import (
    COLLECTOR_STATS,
    CollectorStats,
    GpuRolledUp,
    GpuSampled,
    MigMode,
    NodeInventory,
    PodUsageReported,
    StatsRequest,
)
from gpuaware.services.telemetry.collector import Maintenance, SampleWriter, Watermark
from gpuaware.services.telemetry.settings import CollectorSettings
from gpuaware.telemetry import Rejection, check_batch

log = logging.getLogger(__name__)

TelemetryEvent = GpuSampled | NodeInventory | PodUsageReported | GpuRolledUp
TELEMETRY_IN: bus.Channel[Any] = bus.Channel("telemetry.>", TelemetryEvent)  # type: ignore[arg-type]  # a union of Structs decodes; Channel's type parameter wants one class
def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


class CollectorHandlers:
    """The collector's state and its message handlers."""

    def __init__(self, settings: CollectorSettings, pool: Any, js: Any, instance: str, *,
                 clock: Any = time.time) -> None:
        self.settings = settings
        self.pool = pool
        self.js = js
        self.instance = instance
        self.clock = clock
        self.retry = bus.RetryPolicy(base=1.0, cap=settings.retry_cap_s)
        """the waits before a failed message comes back: 1, 2, 4 ... ``retry_cap_s`` seconds"""
        self.known: dict[str, frozenset[str]] = {}
        self.gpu_index: dict[str, int] = {}
        self.limits = settings.limits()
        self.rejected: Counter[str] = Counter()
        self.usage_rows = 0
        self.redeliveries = 0
        self.watermark = Watermark()
        self.writer = SampleWriter(pool, flush_rows=settings.flush_rows, linger_s=settings.linger_s,
                                   writers=settings.writers, hold_s=settings.hold_s,
                                   on_written=self.watermark.written)
        self.maintenance = Maintenance(settings, pool, js, self.watermark, self.gpu_index,
                                       source=f"{settings.service_name}/{instance}", clock=clock)
        self.consumers: list[bus.DurableConsumer[Any]] = []
        # inventory and usage writes queue here instead of timing out on a pool the COPYs keep busy
        # (every agent announces at once when a cluster starts)
        self._small_writes = asyncio.Semaphore(max(1, settings.pool_size - settings.writers))
        self._waiting: dict[int, tuple[float, list[bus.Delivery]]] = {}
        self._stored_inventory: dict[str, frozenset[tsdb.InventoryGpu]] = {}
        """per node, the inventory rows the database holds as far as this process knows (read at start,
        then what it upserted), without their ``updated_at``"""
        self._reload: asyncio.Future[None] | None = None
        self._reloaded_at = 0.0
        self._heartbeat_task = supervise("telemetry-in-progress", self._heartbeat)

    async def load_inventory(self) -> None:
        """What the database knows: announced before this collector started, or handled by another
        replica of the durable (each inventory message reaches one replica only)."""
        async with self._small_writes, self.pool.connection() as conn:
            rows = await tsdb.list_inventory(conn)
        by_node: dict[str, set[tsdb.InventoryGpu]] = {}
        for r in rows:
            by_node.setdefault(r.node, set()).add(r._replace(updated_at=None))
            self.gpu_index[r.gpu_uuid] = r.gpu_index
        self.known.update({node: frozenset(g.gpu_uuid for g in gpus) for node, gpus in by_node.items()})
        # a restarted collector re-reading a stream of announcements rewrites none that stand already
        self._stored_inventory.update({node: frozenset(gpus) for node, gpus in by_node.items()})

    # --- dispatch --------------------------------------------------------------------------------
    async def handle_batch(self, msgs: Sequence[Any], deliveries: Sequence[bus.Delivery]) -> dict[int, Exception]:
        """A pulled batch at once: its inventories known before anything waits and upserted together,
        usage reports applied in order, the valid sample batches written by one COPY, each refused or
        failed member given its own fate."""
        failures: dict[int, Exception] = {}
        nodes = [i for i, msg in enumerate(msgs) if isinstance(msg, NodeInventory)]
        if nodes:
            failures.update(await self.on_inventories([msgs[i] for i in nodes], nodes))
        samples: list[GpuSampled] = []
        where: list[int] = []
        known = self.known if self.settings.require_inventory else None
        now = self.clock()
        for i, (msg, delivery) in enumerate(zip(msgs, deliveries, strict=True)):
            try:
                if isinstance(msg, GpuSampled):
                    if delivery.redelivered:
                        self.redeliveries += 1
                    rejection = check_batch(msg, known=known, now=now, limits=self.limits)
                    if rejection is not None:
                        await self._refused(msg, delivery, rejection)
                    samples.append(msg)
                    where.append(i)
                elif isinstance(msg, NodeInventory):  # GPUs it no longer announces: refused from here on
                    self.known[msg.node] = frozenset(g.uuid for g in msg.gpus)
                elif isinstance(msg, PodUsageReported):
                    await self.on_usage(msg, delivery)
            except Exception as exc:
                failures[i] = exc
        if samples:
            try:
                await self._wait_written(self.writer.submit_many(samples), [deliveries[i] for i in where])
            except Exception as exc:
                attempt = max(deliveries[i].attempt for i in where)
                fate = self._write_failure(exc, attempt)
                failures.update(dict.fromkeys(where, fate))
        return failures

    def _write_failure(self, exc: Exception, attempt: int) -> Exception:
        if tsdb.is_transient(exc):
            # the writer has already held the batch through its own retries: wait one step longer
            return bus.TransientError(f"database unavailable: {exc}", delay=self.retry.delay(attempt + 1))
        return exc

    async def _refused(self, batch: GpuSampled, delivery: bus.Delivery, rejection: Rejection) -> None:
        """Raise the fate of a batch `check_batch` refused; one that named a node or GPU this process
        does not know is checked again after reloading the inventory, and returns if it now passes."""
        s = self.settings
        waits = rejection.code in ("no_inventory", "unknown_gpu")
        if waits:
            await self._reload_inventory()
            again = check_batch(batch, known=self.known, now=self.clock(), limits=self.limits)
            if again is None:
                return
            rejection, waits = again, again.code in ("no_inventory", "unknown_gpu")
        if waits and delivery.attempt < s.inventory_attempts:
            # doubling waits (1, 2, 4 ... s): the inventory may sit unacknowledged at a replica that
            # died, coming back only after its ack wait; a fixed short delay gave up before that
            raise bus.TransientError(str(rejection), delay=self.retry.delay(delivery.attempt))
        self.rejected[rejection.code] += 1
        raise bus.PermanentError(str(rejection))

    async def _wait_written(self, fut: asyncio.Future[None], deliveries: list[bus.Delivery]) -> None:
        """Wait for the COPY holding these batches. One plain await: a single heartbeat task keeps
        messages that wait long (the database is slow or down) from being redelivered."""
        key = id(fut)
        self._waiting[key] = (time.monotonic(), deliveries)
        try:
            await fut
        finally:
            del self._waiting[key]

    async def _heartbeat(self) -> None:
        beat = max(1.0, self.settings.ack_wait_s / 3)
        while True:
            await asyncio.sleep(beat / 2)
            old = time.monotonic() - beat
            for since, deliveries in list(self._waiting.values()):
                if since < old:
                    for delivery in deliveries:
                        with contextlib.suppress(Exception):  # a lost heartbeat only risks a harmless redelivery
                            await delivery.in_progress()

    async def on_inventories(self, inventories: Sequence[NodeInventory], where: Sequence[int]) -> dict[int, Exception]:
        """Every node of the batch known at once, before the first await: a pull loop handling the
        same nodes' samples meanwhile finds them (one by one, a cluster's start-up announcements kept
        the other loops' samples bouncing for want of an inventory being written). Until the batch's
        samples up to its announcement are checked, a node's old GPUs count too (`handle_batch`). Changed
        nodes are upserted in one statement; if it fails, each of these members gets that fate."""
        rows: dict[str, frozenset[tsdb.InventoryGpu]] = {}
        for inv in inventories:
            self.known[inv.node] = self.known.get(inv.node, frozenset()) | {g.uuid for g in inv.gpus}
            for g in inv.gpus:
                self.gpu_index[g.uuid] = g.index
            rows[inv.node] = frozenset(tsdb.InventoryGpu(
                gpu_uuid=g.uuid, node=inv.node, gpu_index=g.index, model=g.model, memory_mib=g.memory_mib,
                mig_mode=g.mig_mode == MigMode.ENABLED, nvlink_island=g.nvlink_island, numa_node=g.numa_node)
                for g in inv.gpus)
        # agents re-announce every few minutes: what the database holds already stands
        changed = {node: r for node, r in rows.items() if self._stored_inventory.get(node) != r}
        if not changed:
            return {}
        try:
            await self._db(tsdb.upsert_inventory, [row for r in changed.values() for row in r])
        except Exception as exc:
            return dict.fromkeys(where, exc)
        self._stored_inventory.update(changed)
        return {}

    async def on_usage(self, report: PodUsageReported, _delivery: bus.Delivery) -> None:
        rows = [tsdb.PodUsage(window_start=_ts(report.window_start), window_s=report.window_s, node=report.node,
                              gpu_uuid=u.gpu_uuid, namespace=u.namespace, pod=u.pod, pod_uid=u.pod_uid,
                              tenant=u.tenant, gpu_milli=u.gpu_milli, seconds=u.seconds,
                              gpu_seconds_allocated=u.gpu_seconds_allocated, gpu_seconds_used=u.gpu_seconds_used,
                              util_pct_avg=u.util_pct_avg, util_pct_max=u.util_pct_max,
                              mem_used_mib_avg=u.mem_used_mib_avg, mem_used_mib_max=u.mem_used_mib_max,
                              attribution=u.attribution) for u in report.usage]
        self.usage_rows += await self._db(tsdb.write_pod_usage, rows)

    async def _db(self, fn: Any, rows: list[Any]) -> int:
        try:
            async with self._small_writes, self.pool.connection() as conn:
                return int(await fn(conn, rows))
        except Exception as exc:
            if tsdb.is_transient(exc):
                raise bus.TransientError(f"database unavailable: {exc}", delay=2.0) from exc
            raise bus.PermanentError(f"database refused the rows: {exc}") from exc

    async def _reload_inventory(self) -> None:
        """Reload the inventory from the database, at most every half second, shared by all waiters."""
        if self._reload is None or (self._reload.done() and time.monotonic() - self._reloaded_at > 0.5):
            self._reload = asyncio.ensure_future(self.load_inventory())
            self._reloaded_at = time.monotonic()
        try:
            await asyncio.shield(self._reload)
        except Exception as exc:
            log.warning("reloading the inventory failed (%s)", exc)

    # --- stats -----------------------------------------------------------------------------------
    def stats(self) -> CollectorStats:
        c = [consumer.stats for consumer in self.consumers]
        w = self.writer.stats
        return CollectorStats(
            instance=self.instance, received=sum(x.received for x in c), processed=sum(x.processed for x in c),
            decode_errors=sum(x.decode_errors for x in c), dead_lettered=sum(x.dead_lettered for x in c),
            retried=sum(x.retried for x in c), rejected=dict(self.rejected), redeliveries=self.redeliveries,
            rows_written=w.rows,
            rows_new=w.new_rows, copies=w.batches, copy_retries=w.retries, copy_failures=w.failures,
            last_db_error=w.last_error, inventory_gpus=len(self.gpu_index), usage_rows=self.usage_rows,
            rollups_published=dict(self.maintenance.published), maintenance_errors=self.maintenance.errors,
            watermark=self.watermark.newest)

    async def stop(self) -> None:
        """After the consumers stopped: write what is queued, stop maintenance, close the pool."""
        await self.writer.close()
        self._heartbeat_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._heartbeat_task
        await self.maintenance.stop()
        await self.pool.close()


async def mount_collector(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
    settings: CollectorSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    if not settings.database_url:
        raise SystemExit(f"the collector needs a database: set DATABASE_URL or {settings.database_variable}")
    try:  # the owner's DSN migrates; the collector's own login role only checks nothing is pending
        await tsdb.migrate_or_check(settings.database_url)
    except tsdb.SchemaNotReadyError as exc:
        raise SystemExit(f"{settings.service_name}: {exc}") from None
    pool = await tsdb.open_pool(settings.database_url, application_name=settings.service_name,
                                      max_size=settings.pool_size, timeout=settings.db_timeout_s,
                                      wait=False)
    handlers = CollectorHandlers(settings, pool, ctx.js, ctx.instance_id)
    ctx.on_stop(handlers)  # stopped last: consumers finish their messages first
    try:
        await handlers.load_inventory()
    except Exception as exc:
        log.warning("could not read the known inventory (%s); it fills as agents announce", exc)
    handlers.maintenance.start()
    for _ in range(max(1, settings.consumers)):
        consumer = await bus.subscribe_batched(
            ctx.js, TELEMETRY_IN, settings.durable, handlers.handle_batch, ack_wait=settings.ack_wait_s,
            max_deliver=settings.max_deliver, max_ack_pending=settings.max_ack_pending,
            batch=settings.fetch_batch, poll=1.0, retry=handlers.retry)
        handlers.consumers.append(consumer)
        ctx.on_stop(consumer)

    async def stats(_req: StatsRequest) -> CollectorStats:
        return handlers.stats()

    ctx.metrics.source(lambda: collector_samples(handlers))
    return [bus.Endpoint(name="stats", subject=COLLECTOR_STATS, request_type=StatsRequest, handler=stats)]


def collector_samples(handlers: CollectorHandlers) -> Iterable[Sample]:
    """The collector's Prometheus series: rows stored, COPY failures, the durable consumers' lag and dead
    letters (``gpuaware_bus_*``), rollups published."""
    w = handlers.writer.stats
    yield counter("gpuaware_telemetry_samples_ingested", "GPU samples (one GPU's reading, one row) stored for the "
                  "first time", w.new_rows)
    yield counter("gpuaware_telemetry_rows_written", "GPU sample rows written by COPY (redelivered ones again)", w.rows)
    yield counter("gpuaware_telemetry_copy_failures", "COPY batches that failed (retried until stored)", w.failures)
    for window, n in sorted(handlers.maintenance.published.items()):
        yield counter("gpuaware_telemetry_rollups_published", "node rollup messages published", n, window=window)
    yield gauge("gpuaware_telemetry_inventory_gpus", "GPUs known from the agents' inventories", len(handlers.gpu_index))
    yield from consumer_samples(handlers.consumers)
