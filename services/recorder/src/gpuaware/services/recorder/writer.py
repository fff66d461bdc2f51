"""Group commit of ``placement_events`` rows, held through a database outage.

What the consumers hand in within ``linger_s`` (or until ``flush_rows``) becomes one COPY
(``gpuaware.tsdb.write_placement_events``: staging table, then ``INSERT ... ON CONFLICT DO
NOTHING``), so the BINDER and PLACEMENT consumers' batches share a transaction; each submitter's
future resolves once the transaction holding its rows committed, and only then are its messages
acknowledged.

When the database is unreachable (a transient error: refused connection, restart, pool timeout),
the same COPY is tried again in place, with backoff, for ``hold_s``: the messages stay delivered
(the handler keeps them alive with in-progress acks) and the consumers pull nothing new, so a short
outage costs no redelivery. After ``hold_s`` the futures fail with the error and the handler hands
the messages back for redelivery. Either way a batch is committed or returned to JetStream, never
dropped; and because rows are keyed on the message id, writing one again stores nothing twice.

A COPY the database refuses for good (a row it cannot hold) fails its futures at once, with that
error: the handler then writes the batch's rows one by one (``write_now``) to find the message
that cannot be stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import supervise

log = logging.getLogger(__name__)

__all__ = ["COPY_RETRY", "RowWriter", "WriterStats"]

COPY_RETRY = bus.RetryPolicy(base=0.2, cap=5.0)
"""a failed COPY is tried again after 0.2, 0.4, 0.8 ... 5 s, while the writer's hold lasts"""

Write = Callable[[Any, Sequence[tsdb.PlacementEvent]], Awaitable[int]]
Submission = tuple[Sequence[tsdb.PlacementEvent], asyncio.Future[None]]
"""rows handed in together, and the future their submitter waits on"""


@dataclass
class WriterStats:
    copies: int = 0
    """COPYs committed"""
    rows: int = 0
    """rows offered to the database (redelivered ones again)"""
    new_rows: int = 0
    """rows that were not stored yet"""
    retries: int = 0
    """COPYs tried again in place while the database was unreachable"""
    failures: int = 0
    """COPYs given up (their messages are redelivered, or dead-lettered when the database refuses them)"""
    last_error: str = ""


@dataclass
class RowWriter:
    """Group commit of rows (see the module docstring)."""

    pool: Any
    flush_rows: int = 2000
    linger_s: float = 0.05
    hold_s: float = 20.0
    retry: bus.RetryPolicy = COPY_RETRY
    write: Write = tsdb.write_placement_events
    """the statement: ``(connection, rows) -> rows new``"""
    stats: WriterStats = field(default_factory=WriterStats)

    def __post_init__(self) -> None:
        self._queue: list[Submission] = []
        self._rows = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._closing = False
        self._failing_since: float | None = None
        self._task = supervise("placement-events-writer", self._run, until=lambda: self._closing)

    def submit(self, rows: Sequence[tsdb.PlacementEvent]) -> asyncio.Future[None]:
        """Queue rows for the next COPY; the future resolves when they are committed (or fails with the
        error that kept them out)."""
        if self._closing:
            raise RuntimeError("the writer is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not rows:
            fut.set_result(None)
            return fut
        self._queue.append((rows, fut))
        self._rows += len(rows)
        self._wake.set()
        if self._rows >= self.flush_rows:
            self._full.set()
        return fut

    async def write_now(self, rows: Sequence[tsdb.PlacementEvent]) -> int:
        """Write ``rows`` in a COPY of their own, held through an outage like a grouped one; the rows new."""
        return await self._write(rows)

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
            items = self._take()
            await self._flush(items)

    def _take(self) -> list[Submission]:
        """The queued submissions that fit in one COPY (at least one, however large)."""
        taken: list[Submission] = []
        n = 0
        while self._queue and (not taken or n + len(self._queue[0][0]) <= self.flush_rows):
            rows, fut = self._queue.pop(0)
            taken.append((rows, fut))
            n += len(rows)
        self._rows -= n
        if self._rows < self.flush_rows:
            self._full.clear()
        return taken

    async def _flush(self, items: list[Submission]) -> None:
        try:
            await self._write([r for rows, _ in items for r in rows])
        except Exception as exc:
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(exc)
            return
        except BaseException:  # cancelled: never leave a handler waiting forever
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(RuntimeError("the writer was cancelled"))
            raise
        for _, fut in items:
            if not fut.done():
                fut.set_result(None)

    async def _write(self, rows: Sequence[tsdb.PlacementEvent]) -> int:
        deadline = time.monotonic() + self.hold_s
        attempt = 1
        while True:
            try:
                async with self.pool.connection() as conn:
                    new = await self.write(conn, rows)
            except Exception as exc:
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                delay = self.retry.delay(attempt)
                if tsdb.is_transient(exc) and time.monotonic() + delay < deadline and not self._closing:
                    self.stats.retries += 1
                    if self._failing_since is None:
                        self._failing_since = time.monotonic()
                        log.warning("placement_events: COPY of %d rows failed (%s); retrying while the "
                                    "database is away", len(rows), self.stats.last_error)
                    await asyncio.sleep(delay)
                    attempt += 1
                    continue
                self.stats.failures += 1
                raise
            break
        if self._failing_since is not None:
            log.warning("placement_events: written again after %.1f s without the database",
                        time.monotonic() - self._failing_since)
            self._failing_since = None
        self.stats.copies += 1
        self.stats.rows += len(rows)
        self.stats.new_rows += new
        return new

    async def close(self) -> None:
        """Write what is queued (without holding through an outage: unwritten messages are redelivered
        to the next process), then stop."""
        self._closing = True
        self._wake.set()
        self._full.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
