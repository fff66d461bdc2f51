"""The recorder on the bus: decode, make each event's row (``gpuaware.tsdb.placement_event``), write
(``writer.RowWriter``), ack. No domain logic here.

    consumed (durable recorder-<cluster>)        what happens
    BINDER     binder.>         pending, bound, bind_failed, preempted, finished, checkpoint requested
                                and acknowledged: a row each, keyed on the message id
    PLACEMENT  placement.pod.>  decided, unschedulable: a row each; explained: ack (an answer to an
                                operator, not a step of the loop)
    another cluster's event     ack, not stored (that cluster's recorder stores it)
    undecodable, unknown kind   dead letter by the bus (decode error), counted there
    a row the database refuses  that message alone dead-lettered with the database's reason (the
    for good (a NUL character)  batch is written again row by row to find it); the rest lands
    the database away           held ``hold_s`` (in-progress acks), then TransientError: redelivered
                                with backoff, never lost (``max_deliver`` outlasts days of outage)
    the deployment's error      (no INSERT right, no table) TransientError with backoff, logged: the
                                messages wait for an operator, no row is set aside for it

Messages are acknowledged only after the COPY holding their rows committed, and a row's key is its
message id: a redelivery, a restart, or a second replica on the same durable stores nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import Sample, ServiceContext, consumer_samples, counter
from gpuaware.schemas import (
    BINDER,
    PLACEMENT,
    CheckpointAcknowledged,
    CheckpointRequested,
    NodePowerChanged,
    PlacementDecided,
    PlacementExplained,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
)
from gpuaware.services.recorder.settings import RecorderSettings
from gpuaware.services.recorder.writer import RowWriter

__all__ = ["BINDER_IN", "PLACEMENT_IN", "RecorderHandlers", "mount", "mounter", "recorder_samples"]

log = logging.getLogger(__name__)

BinderStreamEvent = (PodPending | PodBound | PodBindFailed | PodPreempted | PodFinished | CheckpointRequested
               | CheckpointAcknowledged | NodePowerChanged)
PlacementStreamEvent = PlacementDecided | PodUnschedulable | PlacementExplained
BINDER_IN: bus.Channel[Any] = bus.Channel(BINDER.subjects[0], BinderStreamEvent)  # type: ignore[arg-type]  # a union decodes on its tag; Channel's parameter names one class
PLACEMENT_IN: bus.Channel[Any] = bus.Channel(PLACEMENT.subjects[0], PlacementStreamEvent)  # type: ignore[arg-type]  # as above
STREAMS_IN = ((BINDER.name, BINDER_IN), (PLACEMENT.name, PLACEMENT_IN))


class RecorderHandlers:
    """The recorder's counters and its batch handler (one for both consumers)."""

    def __init__(self, settings: RecorderSettings, writer: RowWriter, pool: Any = None) -> None:
        self.settings = settings
        self.cluster = settings.cluster
        self.writer = writer
        self.pool = pool
        self.retry = bus.RetryPolicy(base=1.0, cap=settings.retry_cap_s)
        """the waits before a message the database could not take comes back: 1, 2, 4 ... ``retry_cap_s`` s"""
        self.recorded: Counter[str] = Counter()
        """rows committed, by subject (a redelivered message counts again; the writer counts new rows)"""
        self.skipped: Counter[str] = Counter()
        """messages acknowledged without a row, by why"""
        self.refused = 0
        """messages dead-lettered because no database can hold their row"""
        self.consumers: list[bus.DurableConsumer[Any]] = []

    async def handle_batch(self, msgs: Sequence[Any], deliveries: Sequence[bus.Delivery]) -> dict[int, Exception]:
        """A pulled batch: its loop events of this cluster written in one COPY (shared with the other
        consumer's), acknowledged once committed; each member that cannot be stored gets its own fate."""
        failures: dict[int, Exception] = {}
        rows: list[tsdb.PlacementEvent] = []
        where: list[int] = []
        for i, (msg, delivery) in enumerate(zip(msgs, deliveries, strict=True)):
            if not isinstance(msg, tsdb.LOOP_EVENTS):
                self.skipped["not_a_loop_event"] += 1
                continue
            if msg.cluster != self.cluster:
                self.skipped["other_cluster"] += 1
                continue
            try:
                rows.append(tsdb.placement_event(msg, msg_id=delivery.msg_id))
            except ValueError as exc:
                self.refused += 1
                failures[i] = bus.PermanentError(str(exc))
                continue
            where.append(i)
        if not rows:
            return failures
        try:
            await self._wait_written(self.writer.submit(rows), [deliveries[i] for i in where])
        except Exception as exc:
            if tsdb.is_data_error(exc):
                failures.update(await self._one_by_one(rows, where, deliveries))
            else:
                fate = self._retry_later(exc, max(deliveries[i].attempt for i in where))
                failures.update(dict.fromkeys(where, fate))
            return failures
        self.recorded.update(r.subject for r in rows)
        return failures

    async def _one_by_one(self, rows: Sequence[tsdb.PlacementEvent], where: Sequence[int],
                          deliveries: Sequence[bus.Delivery]) -> dict[int, Exception]:
        """The batch again, a row per COPY: the rows the database refuses for good are dead-lettered with its
        reason, the others stored."""
        failures: dict[int, Exception] = {}
        for row, i in zip(rows, where, strict=True):
            try:
                await self.writer.write_now([row])
            except Exception as exc:
                if tsdb.is_data_error(exc):
                    self.refused += 1
                    failures[i] = bus.PermanentError(f"the database cannot store this event: {exc}")
                else:
                    failures[i] = self._retry_later(exc, deliveries[i].attempt)
                continue
            self.recorded[row.subject] += 1
        return failures

    def _retry_later(self, exc: Exception, attempt: int) -> bus.TransientError:
        if not tsdb.is_transient(exc):
            log.error("placement_events: the database refuses the recorder's writes (%s: %s); messages wait "
                      "until that is fixed", type(exc).__name__, exc)
        # the writer has already held the batch through its own retries: wait one step longer
        return bus.TransientError(f"database unavailable: {exc}", delay=self.retry.delay(attempt + 1))

    async def _wait_written(self, fut: asyncio.Future[None], deliveries: Sequence[bus.Delivery]) -> None:
        """Wait for the COPY holding these rows, telling the server the messages are still being worked on
        while it waits (a long wait is a database outage: they must not be redelivered meanwhile)."""
        beat = max(1.0, self.settings.ack_wait_s / 3)
        while True:
            done, _ = await asyncio.wait({fut}, timeout=beat)
            if done:
                return fut.result()
            for delivery in deliveries:
                with contextlib.suppress(Exception):  # a lost heartbeat only risks a harmless redelivery
                    await delivery.in_progress()

    async def stop(self) -> None:
        """After the consumers stopped: write what is queued, close the pool."""
        await self.writer.close()
        if self.pool is not None:
            await self.pool.close()


async def mount(ctx: ServiceContext, *, on_service: Any = None) -> list[bus.Endpoint[Any, Any]]:
    settings: RecorderSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    pool = await tsdb.open_service_pool(settings.database_url, service=settings.service_name,
                                        env=settings.database_variable, max_size=settings.pool_size,
                                        timeout=settings.db_timeout_s)
    writer = RowWriter(pool, flush_rows=settings.flush_rows, linger_s=settings.linger_s, hold_s=settings.hold_s)
    handlers = RecorderHandlers(settings, writer, pool)
    ctx.on_stop(handlers)  # stopped last: the consumers finish their batches first
    for stream, channel in STREAMS_IN:
        # two batches in flight per consumer: the next is pulled while one waits for its COPY, and both
        # streams' batches meet in the writer's group commit
        consumer = await bus.subscribe_batched(
            ctx.js, channel, settings.durable_name(), handlers.handle_batch, stream=stream,
            ack_wait=settings.ack_wait_s, max_deliver=settings.max_deliver, max_ack_pending=settings.max_ack_pending,
            batch=settings.fetch_batch, concurrency=2, poll=1.0, retry=handlers.retry)
        handlers.consumers.append(consumer)
        ctx.on_stop(consumer)
    if on_service is not None:
        on_service(handlers)
    ctx.metrics.source(lambda: recorder_samples(handlers))
    return []


def mounter(on_service: Any) -> Any:
    """``mount`` that also hands the running ``RecorderHandlers`` to ``on_service`` (tests)."""

    async def _mount(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
        return await mount(ctx, on_service=on_service)

    return _mount


def recorder_samples(handlers: RecorderHandlers) -> Iterable[Sample]:
    """The recorder's Prometheus series: rows stored by subject, COPYs and their retries and failures,
    messages not stored and why, and the durable consumers' lag and dead letters (``gpuaware_bus_*``)."""
    w = handlers.writer.stats
    for subject, n in sorted(handlers.recorded.items()):
        yield counter("gpuaware_recorder_events", "loop events committed to placement_events, by subject "
                      "(a redelivered one again)", n, subject=subject)
    yield counter("gpuaware_recorder_rows_new", "placement_events rows stored for the first time", w.new_rows)
    yield counter("gpuaware_recorder_copies", "COPY batches committed", w.copies)
    yield counter("gpuaware_recorder_copy_retries", "COPYs tried again in place while the database was away",
                  w.retries)
    yield counter("gpuaware_recorder_copy_failures", "COPYs given up (their messages come back later)", w.failures)
    for reason, n in sorted(handlers.skipped.items()):
        yield counter("gpuaware_recorder_skipped", "messages acknowledged without a row, by reason", n,
                      reason=reason)
    yield counter("gpuaware_recorder_refused", "events dead-lettered because the database cannot hold them",
                  handlers.refused)
    yield from consumer_samples(handlers.consumers)
