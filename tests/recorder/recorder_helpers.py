"""Recorder tests: the loop's events published as the binder and placement publish them (with their
message ids), the real recorder in this process, and what it stored read back from PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from machine_speed import ceiling
from service_runner import in_process, quiet_settings

from gpuaware import bus
from gpuaware.schemas import (
    BINDER,
    PLACEMENT,
    CheckpointRequested,
    GpuSlice,
    PlacementDecided,
    PodBound,
    PodPending,
    recorder_durable,
)
from gpuaware.services.recorder.handlers import RecorderHandlers, mounter
from gpuaware.services.recorder.settings import RecorderSettings

T = 1_767_225_600.0
SLICE = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=500, memory_mib=0),)


def settings(nats_url: str, database_url: str, cluster: str, **kw: Any) -> RecorderSettings:
    return quiet_settings(RecorderSettings, **{"nats_url": nats_url, "database_url": database_url,
                                               "cluster": cluster, "instance_id": "r1", "linger_s": 0.02, **kw})


@contextlib.asynccontextmanager
async def running(nats_url: str, database_url: str, cluster: str, **kw: Any) -> AsyncIterator[RecorderHandlers]:
    async with in_process(settings(nats_url, database_url, cluster, **kw), mounter, what="recorder") as service:
        yield service


def pod_events(cluster: str, uid: str) -> list[tuple[Any, str]]:
    """One pod's way through the loop, each event with the message id its publisher gives it."""
    return [
        (PodPending(source="binder/t", emitted_at=T, cluster=cluster, pod_uid=uid, pod_name=uid, namespace="ns",
                    submitted_at=T, num_gpu=1, gpu_milli=500), f"{cluster}/pending/{uid}/0"),
        (PlacementDecided(source="placement/t", emitted_at=T + 1, cluster=cluster, decision_id=f"{uid}/0",
                          pod_uid=uid, pod_name=uid, namespace="ns", node="n1", slices=SLICE, policy="GpuAware",
                          score=80.0, decided_at=T + 1), f"{uid}/0"),
        (PodBound(source="binder/t", emitted_at=T + 2, cluster=cluster, pod_uid=uid, pod_name=uid, namespace="ns",
                  node="n1", slices=SLICE, bound_at=T + 2, decision_id=f"{uid}/0"), f"{cluster}/bound/{uid}"),
        (CheckpointRequested(source="binder/t", emitted_at=T + 3, cluster=cluster, request_id=f"ck-{uid}",
                             pod_uid=uid, pod_name=uid, namespace="ns", node="n1", reason="preemption",
                             deadline_s=30.0, requested_at=T + 3), f"{cluster}/checkpoint/{uid}"),
    ]


async def publish(js: Any, events: list[tuple[Any, str]]) -> None:
    for ev, msg_id in events:
        await bus.publish(js, bus.event_channel(type(ev)), ev, msg_id=msg_id)


def stored(database_url: str, cluster: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT subject, count(*) FROM placement_events WHERE cluster = %s GROUP BY subject",
                            (cluster,)).fetchall()
    return {s: n for s, n in rows}


async def caught_up(js: Any, cluster: str) -> bool:
    """Both durables have nothing left to deliver and nothing delivered but unacknowledged: every message
    they hold is in PostgreSQL (a message is acknowledged only after its COPY committed)."""
    for stream in (BINDER.name, PLACEMENT.name):
        info = await js.consumer_info(stream, recorder_durable(cluster))
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def until(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    """Wait for an async ``predicate`` to hold, asking every 50 ms; fail naming ``what``."""
    timeout = ceiling(timeout)
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.05)
