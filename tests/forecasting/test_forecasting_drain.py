"""Forecasting drains its writers before its pool closes: a pod event already delivered when the service
stops steps, publishes and stores its forecasts, and the pool closes after it - not under it, where the
store would fail with ``PoolClosed`` and the forecasts be lost."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from gpuaware.schemas import PodPending
from gpuaware.services.forecasting.service import ForecastService
from gpuaware.services.forecasting.settings import ForecastingSettings


class Pool:
    """Records what happened to it, in order; a store after ``close`` is what PoolClosed was."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def close(self) -> None:
        self.log.append("closed")


def pending(uid: str) -> PodPending:
    return PodPending(source="t", emitted_at=1.0, cluster="default", pod_uid=uid, pod_name=uid, namespace="a",
                      submitted_at=1.0, cpu_milli=1, memory_mib=1, num_gpu=1, gpu_milli=1000)


async def test_stop_waits_for_the_handlers_in_flight_before_closing_the_pool() -> None:
    pool = Pool()
    svc = ForecastService(ForecastingSettings(), js=None, pool=pool, instance="t")
    svc.book = SimpleNamespace(pending=lambda *a: ["minute 1", "minute 2"])  # type: ignore[assignment]  # two closed minutes per event
    storing = asyncio.Event()
    release = asyncio.Event()

    async def step(row: Any, *, publish: bool) -> None:  # what _demand_step does: step, publish, store
        storing.set()
        await release.wait()
        pool.log.append(f"stored {row}")

    svc._demand_step = step  # type: ignore[method-assign]  # the store, held until the test lets it go
    handler = asyncio.create_task(svc._on_pod(pending("p"), SimpleNamespace(replay=False)))
    await asyncio.wait_for(storing.wait(), 10)
    stopping = asyncio.create_task(svc.stop())
    for _ in range(10_000):  # stop() runs up to its drain (the followers, reloader and timers are none here)
        if svc._drained is not None or stopping.done():
            break
        await asyncio.sleep(0)
    assert svc._drained is not None and pool.log == [] and not stopping.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(handler, stopping), 10)
    assert pool.log == ["stored minute 1", "stored minute 2", "closed"]


async def test_stop_with_nothing_in_flight_closes_at_once() -> None:
    pool = Pool()
    svc = ForecastService(ForecastingSettings(), js=None, pool=pool, instance="t")
    await asyncio.wait_for(svc.stop(), 10)
    assert pool.log == ["closed"]
