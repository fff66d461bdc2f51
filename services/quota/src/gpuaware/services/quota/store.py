"""Chargeback intervals and usage snapshots in PostgreSQL (migration 0011_quota), written in order.

Every write is idempotent -- an interval is inserted once per (cluster, pod, bind time) and closed
only while open; a snapshot row is keyed by (cluster, queue, time) -- so the writer can simply retry:
a write that failed (database away) stays at the head of the queue and goes again a second later,
and a restart that replays the binder's stream from its start writes nothing twice. That replay is
also how the ledger is rebuilt: the stream is the truth of what ran, the tables are the bill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import UTC, datetime
from typing import Any

from gpuaware.quota import Interval
from gpuaware.runtime import supervise
from gpuaware.schemas import QuotaUsageReported
from gpuaware.services.quota.state import Ended

log = logging.getLogger(__name__)

OPEN = """INSERT INTO quota_intervals (cluster, pod_uid, started_at, queue, tenant, namespace, pod_name, node,
                                      gpu_milli, gpu_memory_mib)
          VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"""
CLOSE = """UPDATE quota_intervals SET ended_at = %s, outcome = %s
           WHERE cluster = %s AND pod_uid = %s AND ended_at IS NULL AND started_at <= %s"""
USAGE = """INSERT INTO quota_usage (ts, cluster, queue, parent, used_gpu_milli, guaranteed_gpu_milli,
                                    fair_share_gpu_milli, running_pods, pending_pods, jain_index)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"""


def ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class Writer:
    """Writes in arrival order; retries the head until it commits. ``written`` counts statements."""

    def __init__(self, pool: Any, cluster: str, *, retry_s: float = 1.0) -> None:
        self.pool = pool
        self.cluster = cluster
        self.retry_s = retry_s
        self.queue: deque[list[tuple[str, tuple]]] = deque()
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.written = 0
        self.failures = 0
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    def opened(self, iv: Interval, namespace: str, pod_name: str, node: str) -> None:
        self._add([(OPEN, (self.cluster, iv.pod_uid, ts(iv.started_at), iv.queue, iv.tenant, namespace, pod_name,
                           node, iv.gpu_milli, iv.gpu_memory_mib))])

    def closed(self, e: Ended) -> None:
        self._add([(CLOSE, (ts(e.ended_at), e.outcome, self.cluster, e.pod_uid, ts(e.ended_at)))])

    def usage(self, r: QuotaUsageReported) -> None:
        self._add([(USAGE, (ts(r.as_of), self.cluster, q.queue, q.parent, q.used.gpu_milli, q.guaranteed.gpu_milli,
                            q.fair_share.gpu_milli, q.running_pods, q.pending_pods, r.jain_index)) for q in r.queues])

    def _add(self, statements: list[tuple[str, tuple]]) -> None:
        self.queue.append(statements)
        self.idle.clear()
        self.wake.set()

    def start(self) -> None:
        self._task = supervise("quota writer", self._run)

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.queue:
                batch = list(self.queue)
                try:
                    async with self.pool.connection() as conn, conn.transaction():
                        for statements in batch:
                            for sql, params in statements:
                                await conn.execute(sql, params)
                except Exception as exc:  # the database is away: keep the batch, try again
                    self.failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("quota: writing %d changes failed (%s); retrying", len(batch), self.last_error)
                    await asyncio.sleep(self.retry_s)
                    continue
                for statements in batch:
                    self.queue.popleft()
                    self.written += len(statements)
            self.idle.set()

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued so far is committed (or ``timeout``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), timeout)

    async def stop(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
