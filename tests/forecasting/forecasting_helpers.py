"""Forecasting service tests: a real nats-server per test, a fresh PostgreSQL database, the service in
this process, rollups published as the collector publishes them, and a recorder of the forecasts."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import torch
from service_runner import ClusterClient, in_process, streams_ready
from service_runner import eventually as wait_until

from gpuaware import bus
from gpuaware.forecast.features import Features
from gpuaware.forecast.model import LSTMForecaster, TrainResult, export_onnx
from gpuaware.schemas import (
    DEMAND_PREDICTED,
    GPU_ROLLED_UP,
    GPU_SAMPLED,
    GPU_UTIL_PREDICTED,
    NODE_INVENTORY,
    POD_FINISHED,
    POD_PENDING,
    DemandPredicted,
    GpuInfo,
    GpuRolledUp,
    GpuRollup,
    GpuSampled,
    GpuUtilPredicted,
    NodeInventory,
    PodFinished,
    PodOutcome,
    PodPending,
)
from gpuaware.schemas.telemetry import RollupWindow, Stats
from gpuaware.services.forecasting.handlers import ForecastService, mounter
from gpuaware.services.forecasting.settings import ForecastingSettings

ROLLED = bus.Channel(GPU_ROLLED_UP, GpuRolledUp)
SAMPLED = bus.Channel(GPU_SAMPLED, GpuSampled, dedupe=False)
PENDING = bus.Channel(POD_PENDING, PodPending)
FINISHED = bus.Channel(POD_FINISHED, PodFinished)
INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)
T0 = float(int(time.time() // 60 * 60) - 86_400)


@pytest.fixture
def cluster() -> str:
    return f"f{uuid.uuid4().hex[:8]}"


def model_bytes(seed: int = 0) -> bytes:
    """A 1 x 16 streaming model for 60-s steps (untrained: the service's wiring is under test, not its
    accuracy), trusted after 10 steps (fast half-life 5 min)."""
    torch.manual_seed(seed)
    model = LSTMForecaster([10, 30, 60], [0.5, 0.9], hidden=16, layers=1).eval()
    features = Features(step_s=60.0, fast_halflife_s=300.0)
    return export_onnx(TrainResult(model, features, [10, 30, 60], 0, 0.0, float("nan"), []))


def rollup(cluster: str, node: str, window_start: float, utils: list[float]) -> GpuRolledUp:
    return GpuRolledUp(source="collector/test", emitted_at=time.time(), cluster=cluster, node=node,
                       window=RollupWindow.MINUTE, window_start=window_start,
                       gpus=tuple(GpuRollup(gpu_uuid=f"GPU-{node}-{i}", gpu_index=i, samples=6,
                                            util_pct=Stats(mean=float(u), max=float(u), p95=float(u))) for i, u in enumerate(utils)))


class Recorder(ClusterClient):
    """Publishes the binder's pod events and the telemetry forecasting reads, records its forecasts."""

    def __init__(self, nc: Any, cluster: str) -> None:
        super().__init__(nc, cluster)
        self.gpu: list[GpuUtilPredicted] = []
        self.demand: list[DemandPredicted] = []

    async def start(self) -> Recorder:
        await self.listen({GPU_UTIL_PREDICTED: (GpuUtilPredicted, self.gpu),
                           DEMAND_PREDICTED: (DemandPredicted, self.demand)})
        return self

    async def pending(self, uid: str, queue: str, gpus: int, minute: float, *, name: str = "",
                      priority_class: str = "") -> None:
        await bus.publish(self.js, PENDING, PodPending(  # the base subject, as the binder publishes
            source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=uid, pod_name=name or uid,
            namespace="default", submitted_at=T0 + 60 * minute, num_gpu=gpus, queue=queue,
            priority_class=priority_class))

    async def finished(self, uid: str, minute: float, *, started: float | None = None, name: str = "") -> None:
        await bus.publish(self.js, FINISHED, PodFinished(
            source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=uid, pod_name=name or uid,
            namespace="default", outcome=PodOutcome.SUCCEEDED, finished_at=T0 + 60 * minute,
            started_at=None if started is None else T0 + 60 * started))

    def demand_of(self, queue: str | None, klass: str | None = None) -> list[tuple[float, str, float]]:
        """(issued_at, model, p50 at the first step) of every minute-path demand forecast for ``queue``
        (None: total, or the group of classes ``klass``); the hours-ahead series are ``hours``'."""
        out = []
        for ev in self.demand:
            for s in ev.series:
                if s.metric == "gpus_requested" and s.labels.get("queue") == queue and s.labels.get("class") == klass \
                        and "horizon" not in s.labels:
                    out.append((ev.issued_at, ev.model, s.values[ev.quantiles.index(0.5)][0]))
        return sorted(out)

    def hours(self) -> list[DemandPredicted]:
        """The hours-ahead demand forecasts (their series labelled ``horizon``)."""
        return [ev for ev in self.demand if any("horizon" in s.labels for s in ev.series)]

    async def inventory(self, node: str, models: list[str]) -> None:
        """The node's GPUs (named as ``rollup`` names them) and their models."""
        gpus = tuple(GpuInfo(uuid=f"GPU-{node}-{i}", index=i, model=m, memory_mib=81_920, pci_bus_id=f"0000:0{i}:00.0")
                     for i, m in enumerate(models))
        await bus.publish(self.js, INVENTORY.at(self.cluster, node),
                          NodeInventory(source="agent/test", emitted_at=time.time(), cluster=self.cluster, node=node,
                                        gpus=gpus))

    async def sample(self, node: str, at: float, utils: list[float | None], seq: int = 0) -> None:
        """One agent sample of the node's GPUs (named as ``rollup`` names them) at telemetry time ``at``."""
        await bus.publish(self.js, SAMPLED.at(self.cluster, node), GpuSampled(
            source="agent/test", emitted_at=time.time(), cluster=self.cluster, node=node, sampled_at=at,
            interval_s=1.0, seq=seq, gpu_uuid=tuple(f"GPU-{node}-{i}" for i in range(len(utils))),
            gpu_index=tuple(range(len(utils))), util_pct=tuple(utils)))

    async def rollup(self, node: str, minute: int, utils: list[float]) -> None:
        await bus.publish(self.js, ROLLED.at(self.cluster, node), rollup(self.cluster, node, T0 + 60 * minute, utils))


async def eventually(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    await wait_until(predicate, timeout=timeout, what=what)


@contextlib.asynccontextmanager
async def recorder(url: str, cluster: str) -> AsyncIterator[Recorder]:
    async with streams_ready(url, name="recorder") as nc:
        r = await Recorder(nc, cluster).start()
        yield r


@contextlib.asynccontextmanager
async def forecasting(url: str, database_url: str, cluster: str, **kw: Any) -> AsyncIterator[ForecastService]:
    base: dict[str, Any] = {"nats_url": url, "database_url": database_url, "cluster": cluster, "instance_id": "f1",
                            "log_format": "console", "log_level": "WARNING", "flush_s": 0.3, "reload_s": 0.2}
    base.update(kw)
    async with in_process(msgspec.convert(base, ForecastingSettings), mounter, what="forecasting") as svc:
        yield svc
