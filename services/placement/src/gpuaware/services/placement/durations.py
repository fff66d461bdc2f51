"""Ask the forecasting service how long parked pods will run, for the fair-share order's shortest-first.

The fair-share order (`gpuaware.placement.queue_order`) hands capacity among tenants at their share
to the shortest predicted job first. Predictions come from `forecasting.duration` (the duration
predictor: a recurring job's learnt runtime, a tenant's p75 for a novel one); a pod is asked about
once, when it is first parked, in the background, so no decision ever waits for an answer. Until it
answers the pod counts the configured default. The pod's own ``expected_duration_s`` is not used: in
the digital twin it is the trace's true runtime, and ordering by it would be an oracle.

Nobody answering `forecasting.duration` means no predictions (logged once; asked again after
`RECHECK_S`); at most `CONCURRENT` questions are in flight, and a question that fails is not
repeated (the default stands).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from gpuaware import bus
from gpuaware.schemas import FORECAST_DURATION, DurationReply, DurationRequest, PodPending
from gpuaware.services.placement.absence import Absence
from gpuaware.services.placement.state import PlacementState, Unschedulable

log = logging.getLogger(__name__)

CONCURRENT = 16
RECHECK_S = 30.0
MAX_REMEMBERED = 100_000
"""pods remembered as asked about; beyond it those the ledger no longer holds are dropped"""


class DurationAsker:
    def __init__(self, nc: bus.Client, state: PlacementState, source: str, cluster: str, timeout_s: float) -> None:
        self.nc = nc
        self.state = state
        self.source = source
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.asked: set[tuple[str, int]] = set()
        """(pod uid, attempt) asked about (a preempted pod comes back as a new attempt: asked again)"""
        self.answered = 0
        self.failed = 0
        self._slots = asyncio.Semaphore(CONCURRENT)
        self._tasks: set[asyncio.Task[None]] = set()
        self.absence = Absence()

    @property
    def active(self) -> bool:
        order = self.state.planner.order
        return order is not None and order.tenant_aware and self.absence.present

    def ask_about(self, outcomes: Iterable[object]) -> None:
        """Start a question for each newly parked pod of `outcomes` (never blocks)."""
        if not self.active:
            return
        if len(self.asked) > MAX_REMEMBERED:
            self.asked = {k for k in self.asked if k[0] in self.state.ledger.pods}
        for o in outcomes:
            if not isinstance(o, Unschedulable) or (o.msg.pod_uid, o.msg.attempt) in self.asked:
                continue
            entry = self.state.ledger.pods.get(o.msg.pod_uid)
            if entry is None or not isinstance(entry.payload, PodPending):
                continue
            self.asked.add((o.msg.pod_uid, o.msg.attempt))
            task = asyncio.create_task(self._ask(entry.payload), name=f"duration of {o.msg.pod_uid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _ask(self, pod: PodPending) -> None:
        async with self._slots:
            if not self.active:
                return
            req = DurationRequest(source=self.source, emitted_at=time.time(), cluster=self.cluster,
                                  pod_name=pod.pod_name, queue=pod.queue, num_gpu=pod.num_gpu)
            try:
                reply = await bus.request(self.nc, FORECAST_DURATION, req, DurationReply, timeout=self.timeout_s)
            except bus.NoResponders:
                self.asked.discard((pod.pod_uid, pod.attempt))
                order = self.state.planner.order
                self.absence.noticed(RECHECK_S, "no forecasting service answers %s: parked pods count %.0f s each "
                                     "(asking again in %.0f s)", FORECAST_DURATION,
                                     order.runtime(pod.pod_uid) if order is not None else 0.0, RECHECK_S)
                return
            except Exception as exc:  # advice only: the default stands
                self.failed += 1
                log.debug("no duration for %s: %s", pod.pod_uid, exc)
                return
            self.answered += 1
            self.state.planner.predict(pod.pod_uid, reply.seconds)
