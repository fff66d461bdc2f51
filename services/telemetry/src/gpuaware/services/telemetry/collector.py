"""The collector's moving parts: a group-commit sample writer and the maintenance loop.

Why group commit: a node's batch is 8 GPU rows; a transaction per batch would cap ingest at a few
thousand rows a second. Each pulled batch of messages (``bus.subscribe_batched``: one handler call
per batch, several pull loops) hands its valid sample batches to ``SampleWriter`` at once and waits;
the writer turns everything queued within ``linger_s`` (or ``flush_rows``) into one columnar COPY
(``gpuaware.tsdb.write_sample_columns``) and then resolves every waiter at once. Messages are acked
only after the COPY that holds their rows committed: nothing is acked that is not in the database.

When the database is unreachable, the writer retries the same COPY in place for ``hold_s`` while
the handlers keep their messages alive with in-progress acks, so a short outage costs no
redelivery at all and the consumer stops pulling: new samples simply wait in JetStream. After
``hold_s`` the handlers raise ``TransientError`` and the messages come back after a backoff.
Redelivery never duplicates: the writer is idempotent on (gpu_uuid, ts).

The maintenance loop publishes the rollups of closed windows (event time, see
``gpuaware.telemetry.rollup``), refreshes the rollup tables from the oldest sample written since
the last refresh, and runs partition upkeep and retention. Its failures are logged and retried on
the next pass; they never stop ingest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import supervise
from gpuaware.schemas import GpuRolledUp, GpuSampled, RollupWindow
from gpuaware.services.telemetry.settings import CollectorSettings
from gpuaware.telemetry import WIDTH_S, WindowClock, rollup_messages, rollup_msg_id, to_columns

log = logging.getLogger(__name__)

ROLLED_UP = bus.event_channel(GpuRolledUp)


COPY_RETRY = bus.RetryPolicy(base=0.2, cap=5.0)
"""a failed COPY is tried again after 0.2, 0.4, 0.8 ... 5 s, while the writer's hold lasts"""


@dataclass
class WriterStats:
    batches: int = 0
    """COPYs committed"""
    rows: int = 0
    """rows offered to the database"""
    new_rows: int = 0
    """rows that were not stored yet (offered minus duplicates)"""
    retries: int = 0
    """COPYs retried in place while the database was unreachable"""
    failures: int = 0
    """COPYs given up (their messages are redelivered)"""
    last_error: str = ""


@dataclass
class SampleWriter:
    """Group commit of sample batches (see the module docstring)."""

    pool: Any
    flush_rows: int = 20_000
    linger_s: float = 0.02
    writers: int = 2
    hold_s: float = 20.0
    retry: bus.RetryPolicy = COPY_RETRY
    """the waits between attempts at one COPY while ``hold_s`` lasts"""
    on_written: Callable[[float, float], None] | None = None
    """called with (oldest, newest) sampled_at of each committed COPY"""
    stats: WriterStats = field(default_factory=WriterStats)

    def __post_init__(self) -> None:
        self._queue: list[tuple[Sequence[GpuSampled], asyncio.Future[None]]] = []
        self._rows = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._slots = asyncio.Semaphore(self.writers)
        self._inflight: set[asyncio.Task[None]] = set()
        self._closing = False
        self._task = supervise("sample-writer", self._run, until=lambda: self._closing)

    def submit(self, batch: GpuSampled) -> asyncio.Future[None]:
        """Queue a batch; the future resolves when its rows are committed (or fails with the error)."""
        return self.submit_many((batch,))

    def submit_many(self, batches: Sequence[GpuSampled]) -> asyncio.Future[None]:
        """Queue several batches (a consumer's pulled batch); one future for all of them."""
        if self._closing:
            raise RuntimeError("the sample writer is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((batches, fut))
        self._rows += sum(len(b.gpu_uuid) for b in batches)
        self._wake.set()
        if self._rows >= self.flush_rows:
            self._full.set()
        return fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if not self._queue:
                self._wake.clear()
                if self._closing:
                    return
                continue
            if self._rows < self.flush_rows and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.linger_s)
            await self._slots.acquire()
            items, self._queue, self._rows = self._queue, [], 0
            self._full.clear()
            if not self._queue:
                self._wake.clear()
            task = asyncio.create_task(self._flush(items), name="sample-copy")
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _flush(self, items: list[tuple[Sequence[GpuSampled], asyncio.Future[None]]]) -> None:
        try:
            batches = [b for group, _ in items for b in group]
            columns = tsdb.SampleColumns(*to_columns(batches))
            deadline = time.monotonic() + self.hold_s
            attempt = 1
            while True:
                try:
                    async with self.pool.connection() as conn:
                        new = await tsdb.write_sample_columns(conn, columns)
                except Exception as exc:
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    delay = self.retry.delay(attempt)
                    if tsdb.is_transient(exc) and time.monotonic() + delay < deadline and not self._closing:
                        self.stats.retries += 1
                        log.warning("sample COPY of %d rows failed (%s); retrying in %.1fs",
                                    len(columns), self.stats.last_error, delay)
                        await asyncio.sleep(delay)
                        attempt += 1
                        continue
                    self.stats.failures += 1
                    for _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    return
                break
            self.stats.batches += 1
            self.stats.rows += len(columns)
            self.stats.new_rows += new
            if self.on_written is not None:
                ts = [b.sampled_at for b in batches]
                self.on_written(min(ts), max(ts))
            for _, fut in items:
                if not fut.done():
                    fut.set_result(None)
        except BaseException as exc:  # a bug or a cancellation: never leave a handler waiting forever
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("writer cancelled"))
            raise
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Write what is queued, wait for COPYs in flight, stop."""
        self._closing = True
        self._wake.set()
        self._full.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)


@dataclass
class Watermark:
    """Event-time progress of what is stored: the newest sample, and the oldest not yet rolled up."""

    newest: float | None = None
    dirty_since: float | None = None

    def written(self, oldest: float, newest: float) -> None:
        self.newest = newest if self.newest is None else max(self.newest, newest)
        self.dirty_since = oldest if self.dirty_since is None else min(self.dirty_since, oldest)


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Maintenance:
    """Rollup publishing, rollup refresh, partitions and retention (see the module docstring)."""

    def __init__(self, settings: CollectorSettings, pool: Any, js: Any, watermark: Watermark,
                 gpu_index: dict[str, int], source: str, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.pool = pool
        self.js = js
        self.watermark = watermark
        self.gpu_index = gpu_index
        self.source = source
        self.clock = clock
        self.windows = {w: WindowClock(WIDTH_S[w], settings.rollup_grace_s) for w in (RollupWindow.MINUTE,
                                                                                     RollupWindow.HOUR)}
        self.published: Counter[str] = Counter()
        self.errors = 0
        self._last_refresh = 0.0
        self._last_maintenance = 0.0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = supervise("telemetry-maintenance", self._loop, until=self._stop.is_set)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.tick_s)
            if self._stop.is_set():
                return
            for step in (self.publish_rollups, self.refresh, self.upkeep):
                try:
                    await step()
                except Exception as exc:
                    self.errors += 1
                    log.warning("telemetry maintenance: %s failed (%s: %s); next pass retries",
                                step.__name__, type(exc).__name__, exc)

    async def publish_rollups(self) -> None:
        if not self.settings.publish_rollups or self.watermark.newest is None:
            return
        for window, clock in self.windows.items():
            for start in clock.due(self.watermark.newest):
                await self.publish_window(window, start)

    async def publish_window(self, window: RollupWindow, start: float) -> int:
        """Publish the rollups of one closed window; returns how many node messages went out."""
        width = WIDTH_S[window]
        async with self.pool.connection() as conn:
            rows = await tsdb.window_rollups(
                conn, _dt(start), _dt(start + width),
                max_hold=timedelta(seconds=self.settings.rollup_max_hold_s))
        messages = rollup_messages(rows, window=window, window_start=start, gpu_index=self.gpu_index,
                                   source=self.source, emitted_at=self.clock(), cluster=self.settings.cluster)
        for msg in messages:
            channel = ROLLED_UP.at(msg.cluster, msg.node)
            await bus.publish(self.js, channel, msg, msg_id=rollup_msg_id(window, msg.node, start), timeout=5)
        self.published[window.value] += len(messages)
        return len(messages)

    async def refresh(self, *, force: bool = False) -> None:
        since = self.watermark.dirty_since
        now = time.monotonic()
        if since is None or (not force and now - self._last_refresh < self.settings.refresh_interval_s):
            return
        self.watermark.dirty_since = None
        try:
            async with self.pool.connection() as conn:
                await tsdb.refresh_rollups(conn, _dt(since))
        except BaseException:
            self.watermark.written(since, since)  # refresh again from there next time
            raise
        self._last_refresh = now

    async def upkeep(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_maintenance < self.settings.maintenance_interval_s:
            return
        self._last_maintenance = now
        wall = datetime.now(UTC)
        async with self.pool.connection() as conn:
            report = await tsdb.maintain_partitions(
                conn, now=wall, retention=timedelta(days=self.settings.raw_retention_days))
            await tsdb.expire_rollups(conn, now=wall)
            await tsdb.expire_pod_usage(
                conn, wall - timedelta(days=self.settings.pod_usage_retention_days))
        if report.created or report.dropped:
            log.info("partitions: %d created, dropped %s", report.created, report.dropped)
