"""Helpers shared by the telemetry tests (imported by name; pytest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from service_runner import quiet_settings

from gpuaware import bus
from gpuaware.gpu import (
    COLUMNS,
    FleetNode,
    FleetSpec,
    GpuFrame,
    ManualClock,
    PodLoad,
    SimulatedFleet,
    UtilTrace,
)
from gpuaware.runtime import run_service
from gpuaware.schemas import (
    COLLECTOR_STATS,
    GPU_SAMPLED,
    NODE_INVENTORY,
    CollectorStats,
    GpuSampled,
    NodeInventory,
    StatsRequest,
)
from gpuaware.services.telemetry.handlers import mount_collector
from gpuaware.services.telemetry.settings import CollectorSettings

# simulated time starts three hours ago, on the hour (a multiple of the 600-s test traces): recent enough
# that the collector's 30-day retention keeps it, old enough that every window of a test is closed
T0 = float(int(time.time()) // 3600 * 3600 - 3 * 3600)
REPO = Path(__file__).resolve().parents[2]
SAMPLED = bus.Channel(GPU_SAMPLED, GpuSampled)
INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)


def flat_trace(level: float, name: str = "flat", length: int = 600) -> UtilTrace:
    return UtilTrace(f"test:{name}", np.full(length, float(level)), 1.0, "duty")


def step_trace(before: float, after: float, at: int, length: int = 600) -> UtilTrace:
    values = np.full(length, float(before))
    values[at:] = after
    return UtilTrace("test:step", values, 1.0, "duty")


def quiet_fleet(nodes: int = 1, gpus: int = 8, traces: Sequence[UtilTrace] = (), *, clock: ManualClock,
                prefix: str = "node", pods: bool = True) -> SimulatedFleet:
    """A fleet whose GPUs each run one whole-GPU pod replaying trace 0 verbatim (no noise)."""
    specs = tuple(FleetNode(f"{prefix}-{k}", gpus=gpus) for k in range(nodes))
    fleet = SimulatedFleet(FleetSpec(nodes=specs, seed=3, occupancy=0, traces=list(traces) or [flat_trace(50)]),
                           clock=clock)
    if pods:
        for spec in specs:
            for g in range(gpus):
                fleet.assign((spec.name, g), PodLoad(name=f"{spec.name}-p{g}", namespace="team", trace=0,
                                                     offset_s=0.0, memory_mib=20_000))
    return fleet


def frame_of(columns: dict[str, Sequence[Any]], *, at: float = T0, node: str = "n") -> GpuFrame:
    n = len(next(iter(columns.values())))
    return GpuFrame.build(sampled_at=at, nodes=(node,), bounds=(0, n), gpu_uuid=[f"GPU-{i}" for i in range(n)],
                          gpu_index=list(range(n)), columns=columns)


def fleet_batches(fleet: SimulatedFleet, start: float, ticks: int, *, source: str = "test") -> list[GpuSampled]:
    """Every GPU of every node at every tick (fixed rate), seq per node."""
    out: list[GpuSampled] = []
    for k in range(ticks):
        out += fleet.sample(start + k).to_messages(source=source, interval_s=1.0, seq=k)
    return out


async def publish_inventory(js: Any, fleet: SimulatedFleet) -> None:
    for inv in fleet.inventories():
        await bus.publish(js, INVENTORY.at("default", inv.node), inv)


async def publish_batches(js: Any, batches: Sequence[GpuSampled], *, window: int = 500) -> None:
    pending: list[asyncio.Future[bus.PubAck]] = []
    for b in batches:
        pending.append(await bus.publish_async(js, SAMPLED.at("default", b.node), b))
        if len(pending) >= window:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)


def collector_settings(nats_url: str, database_url: str, **overrides: Any) -> CollectorSettings:
    return quiet_settings(CollectorSettings, **{
        "nats_url": nats_url, "database_url": database_url, "instance_id": "test", "ack_wait_s": 5.0,
        "hold_s": 4.0, "linger_s": 0.01, "tick_s": 0.2, "rollup_grace_s": 5.0, "retry_cap_s": 2.0, **overrides})


@contextlib.asynccontextmanager
async def running_collector(settings: CollectorSettings) -> AsyncIterator[None]:
    """The collector service in this process (run_service, as in production), stopped on exit."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(settings, version="0.1.0", mount=mount_collector, stop=stop,
                                           ready=ready))
    done, _ = await asyncio.wait({task, asyncio.ensure_future(ready.wait())}, timeout=60,
                                 return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises the start-up error
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def start_collector_process(nats_url: str, database_url: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """``python -m gpuaware.services.telemetry collector`` as a real process."""
    full = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": database_url,
            "GPUAWARE_TELEMETRY_COLLECTOR_LOG_FORMAT": "console",
            "GPUAWARE_TELEMETRY_COLLECTOR_LOG_LEVEL": "WARNING", **env}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "gpuaware.services.telemetry", "collector"], env=full,
                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


async def collector_stats(nc: Any, timeout: float = 2.0) -> CollectorStats:
    return await bus.request(nc, COLLECTOR_STATS, StatsRequest(), CollectorStats, timeout=timeout)


async def wait_for(check: Callable[[], Any], timeout: float, *, interval: float = 0.2, what: str = "") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy.

    A sync check runs in a worker thread: checks query PostgreSQL, and a blocking query on the event
    loop can deadlock with an in-process collector whose COPY (holding a partition lock) needs that
    loop to finish."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check() if inspect.iscoroutinefunction(check) else await asyncio.to_thread(check)
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(interval)


def count_rows(database_url: str, table: str = "gpu_samples") -> int:
    try:
        with psycopg.connect(database_url, connect_timeout=2) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]  # count(*) always returns a row
    except psycopg.Error:  # down, or not migrated yet
        return -1


def collect_into(items: list[Any], decode: Callable[[Any], Any] = lambda m: m) -> Callable[[Any], Any]:
    """A coroutine callback for ``nc.subscribe`` appending ``decode(msg)`` to ``items``."""
    async def cb(msg: Any) -> None:
        items.append(decode(msg))
    return cb


def metric_kinds() -> dict[str, str]:
    return {name: spec.kind for name, spec in COLUMNS.items()}
