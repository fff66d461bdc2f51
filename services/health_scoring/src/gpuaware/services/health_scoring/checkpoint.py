"""Publishing in order, and checkpoints: nothing is acknowledged that is not published and stored.

Why both live here: the two orders that keep a crash harmless are tied together.

1. *Publish, then store.* A unit of work (a telemetry message, a tick, an override) changes the view
   in memory and queues its messages in the ``Outbox``; they are sent in order and their PubAcks
   awaited. A checkpoint is only taken when the outbox is empty and nothing is being sent, so the
   database never holds a state whose messages might not have left: after a crash, a redelivered
   message is either skipped (the checkpoint holds it: its messages were stored by JetStream) or
   re-applied (it does not: the same messages are made again, with the same ids, and JetStream's
   duplicate window stores them once).
2. *Store, then acknowledge.* A message is acknowledged only once a checkpoint holding its effect
   committed (``Checkpointer.durable(version)``), as the collector acks a sample only once its COPY
   committed. Checkpoints are written every ``checkpoint_s``, and at once after a state change, an
   alert or an override, so a quarantine is in PostgreSQL before the sample that caused it is acked.

A publish that fails leaves its messages at the head of the outbox (they go first next time, in
order) and the unit of work fails with ``TransientError``: its message is redelivered, skipped as
already applied, and acknowledged once the outbox drained and a checkpoint committed. A checkpoint
that fails gives its rows back to the view (the next one writes them); the messages waiting for it
are handed back after ``hold_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import supervise
from gpuaware.services.health_scoring.state import Outbound, View

log = logging.getLogger(__name__)


class Outbox:
    """Messages to publish, in order; ``drain()`` sends them and waits for their PubAcks."""

    def __init__(self, js: Any, *, timeout: float = 5.0) -> None:
        self.js = js
        self.timeout = timeout
        self.queue: deque[Outbound] = deque()
        self.lock = asyncio.Lock()
        self.published: Counter[str] = Counter()
        """per subject (without routing suffixes), stored by JetStream"""
        self.duplicates = 0
        """messages JetStream already held (the same assessment made again after a crash)"""
        self.failures = 0

    def add(self, out: Iterable[Outbound]) -> None:
        self.queue.extend(out)

    @property
    def idle(self) -> bool:
        return not self.queue and not self.lock.locked()

    async def drain(self) -> None:
        """Send everything queued (and whatever is queued meanwhile); raises ``TransientError`` when the
        bus refused or timed out (the unsent messages stay queued, first)."""
        async with self.lock:
            while self.queue:
                batch = list(self.queue)
                try:
                    futures = [await bus.publish_async(self.js, o.channel, o.msg, msg_id=o.msg_id) for o in batch]
                    acks = await asyncio.wait_for(asyncio.gather(*futures), self.timeout)
                except Exception as exc:
                    self.failures += 1
                    raise bus.TransientError(f"publishing health events failed: {type(exc).__name__}: {exc}",
                                             delay=1.0) from exc
                for o, ack in zip(batch, acks, strict=True):
                    self.published[o.channel.type.__struct_config__.tag] += 1
                    self.duplicates += ack.duplicate
                for _ in batch:
                    self.queue.popleft()


@dataclass
class CheckpointStats:
    written: int = 0
    failures: int = 0
    tracks: int = 0
    scores: int = 0
    alerts: int = 0
    overrides: int = 0
    last_error: str = ""
    last_ms: float = 0.0


class Checkpointer:
    """Writes the view's checkpoints (see the module docstring)."""

    def __init__(self, view: View, outbox: Outbox, pool: Any, *, interval_s: float = 1.0, hold_s: float = 20.0) -> None:
        self.view = view
        self.outbox = outbox
        self.pool = pool
        self.interval_s = interval_s
        self.hold_s = hold_s
        self.retry = bus.RetryPolicy(base=2 * interval_s, cap=5.0)
        """the waits after failed checkpoints in a row: twice the interval, doubling, at most 5 s"""
        self.committed = view.version
        self.stats = CheckpointStats()
        self._changed = asyncio.Condition()
        self._urge = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = supervise("health checkpoints", self._loop, until=self._stop.is_set)

    def urge(self) -> None:
        """Write the next checkpoint now (a state change, an alert, an override)."""
        self._urge.set()

    async def durable(self, version: int) -> None:
        """Wait until a checkpoint holding ``version`` committed; ``TransientError`` after ``hold_s``."""
        if self.committed >= version:
            return
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.committed >= version), self.hold_s)
        except TimeoutError:
            raise bus.TransientError(f"no checkpoint committed within {self.hold_s:.0f}s "
                                     f"({self.stats.last_error or 'database slow'})", delay=2.0) from None

    async def _loop(self) -> None:
        delay, failures = self.interval_s, 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urge.wait(), delay)
            self._urge.clear()
            ok = await self.flush()
            failures = 0 if ok else failures + 1
            delay = self.retry.delay(failures) if failures else self.interval_s

    async def flush(self) -> bool:
        """Write one checkpoint of everything changed so far; False when it failed (retried later)."""
        cut: tuple[tsdb.HealthCheckpoint, int] | None = None
        for _ in range(5):
            try:
                await self.outbox.drain()  # published before stored (see the module docstring)
            except bus.TransientError as exc:
                self.stats.last_error = exc.reason
                return False
            async with self.outbox.lock:
                if not self.outbox.queue:  # else queued meanwhile: drain again
                    cut = self.view.take_checkpoint()  # synchronous: a consistent cut
                    break
        if cut is None:
            return False
        cp, version = cut
        if not cp:
            await self._committed(version)
            return True
        started = time.perf_counter()
        try:
            async with self.pool.connection() as conn:
                await tsdb.save_health_checkpoint(conn, cp)
        except Exception as exc:
            self.view.give_back(cp)
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("health checkpoint failed (%s); retrying", self.stats.last_error)
            return False
        s = self.stats
        s.written += 1
        s.tracks += len(cp.tracks)
        s.scores += len(cp.scores)
        s.alerts += len(cp.alerts)
        s.overrides += len(cp.overrides)
        s.last_ms = round(1000 * (time.perf_counter() - started), 2)
        await self._committed(version)
        return True

    async def _committed(self, version: int) -> None:
        async with self._changed:
            self.committed = max(self.committed, version)
            self._changed.notify_all()

    async def stop(self) -> None:
        """Stop the loop and write what is left (a clean stop loses nothing)."""
        self._stop.set()
        self._urge.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _ in range(3):
            if await self.flush():
                return
            await asyncio.sleep(0.5)
        log.error("the last health checkpoint could not be written (%s): the next start replays the "
                  "unacknowledged telemetry", self.stats.last_error)
