"""Health-scoring service tests: a real nats-server per test, a fresh PostgreSQL database, the service
in-process (or as a process, for a crash), telemetry published exactly as the agent publishes it,
and a recorder of what the service publishes (scores, state changes, alerts, drain recommendations)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from service_runner import ClusterClient, eventually, in_process, quiet_settings, streams_ready

from gpuaware import bus
from gpuaware.devstack import NatsProcess
from gpuaware.schemas import (
    ALERT_RAISED,
    ALERT_RESOLVED,
    DRAIN_RECOMMENDED,
    GPU_SCORED,
    GPU_STATE_CHANGED,
    HEALTH_STATS,
    AlertRaised,
    AlertResolved,
    DrainRecommended,
    GpuInfo,
    GpuSample,
    GpuSampled,
    GpuScored,
    GpuStateChanged,
    HealthStats,
    NodeInventory,
    PlacementDecided,
    PodFinished,
    StatsRequest,
)
from gpuaware.services.health_scoring.handlers import HealthService, mounter
from gpuaware.services.health_scoring.settings import HealthScoringSettings

SAMPLED = bus.event_channel(GpuSampled)
INVENTORY = bus.event_channel(NodeInventory)
DECIDED = bus.event_channel(PlacementDecided)
FINISHED = bus.event_channel(PodFinished)
T0 = float(int(time.time()) - 3600)
"""telemetry time of the tests' first sample (an hour ago: every window of a test is in the past)"""


@pytest.fixture
def cluster() -> str:
    return f"h{uuid.uuid4().hex[:8]}"


def gpu_uuid(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def inventory(cluster: str, node: str, gpus: int = 2, model: str = "NVIDIA A100-SXM4-80GB") -> NodeInventory:
    return NodeInventory(
        source="test", emitted_at=time.time(), cluster=cluster, node=node, cpu_milli=96_000, memory_mib=786_432,
        gpus=tuple(GpuInfo(uuid=gpu_uuid(node, i), index=i, model=model, memory_mib=81920,
                           pci_bus_id=f"00000000:{i:02x}:00.0", tensor_cores=True) for i in range(gpus)))


def row(node: str, i: int, **kw: Any) -> GpuSample:
    """One GPU's healthy reading; keyword arguments override (``xid_last=79``, ``ecc_uncorrected_aggregate=3``)."""
    base: dict[str, Any] = {"util_pct": 50.0, "temperature_c": 55.0, "power_w": 250.0, "power_limit_w": 400.0,
                            "throttle_reasons": 0, "ecc_corrected_aggregate": 0, "ecc_uncorrected_aggregate": 0,
                            "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0, "xid_last": 0,
                            "pcie_replay": 0, "nvlink_up": 12}
    base.update(kw)
    return GpuSample(gpu_uuid=gpu_uuid(node, i), gpu_index=i, **base)


def batch(cluster: str, node: str, at: float, rows: list[GpuSample], *, interval_s: float = 10.0,
          seq: int = 0) -> GpuSampled:
    return GpuSampled.from_samples(rows, source=f"agent/{node}", emitted_at=time.time(), cluster=cluster, node=node,
                                   sampled_at=at, interval_s=interval_s, seq=seq)


class Recorder(ClusterClient):
    """Publishes what the agents would, and records what health-scoring publishes (core subscriptions)."""

    def __init__(self, nc: Any, cluster: str) -> None:
        super().__init__(nc, cluster)
        self.scored: list[GpuScored] = []
        self.changes: list[GpuStateChanged] = []
        self.raised: list[AlertRaised] = []
        self.resolved: list[AlertResolved] = []
        self.drains: list[DrainRecommended] = []

    async def start(self) -> Recorder:
        await self.listen({
            GPU_SCORED: (GpuScored, self.scored), GPU_STATE_CHANGED: (GpuStateChanged, self.changes),
            ALERT_RAISED: (AlertRaised, self.raised), ALERT_RESOLVED: (AlertResolved, self.resolved),
            DRAIN_RECOMMENDED: (DrainRecommended, self.drains)})
        return self

    async def nodes(self, names: list[str], **kw: Any) -> None:
        for n in names:
            await bus.publish(self.js, INVENTORY.at(self.cluster, n), inventory(self.cluster, n, **kw))

    async def sample(self, node: str, at: float, rows: list[GpuSample], *, msg_id: str | None = None,
                     **kw: Any) -> bus.PubAck:
        return await bus.publish(self.js, SAMPLED.at(self.cluster, node), batch(self.cluster, node, at, rows, **kw),
                                 msg_id=msg_id)

    def states_of(self, gpu: str) -> list[str]:
        return [c.current.value for c in self.changes if c.gpu_uuid == gpu]

    def rules(self, kind: str, gpu: str) -> list[str]:
        return [a.rule for a in (self.raised if kind == "raised" else self.resolved) if a.gpu_uuid == gpu]

    async def wait(self, predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
        await eventually(predicate, timeout=timeout, what=what)


def settings(nats_url: str, database_url: str, cluster: str, **kw: Any) -> HealthScoringSettings:
    return quiet_settings(HealthScoringSettings, **{
        "nats_url": nats_url, "database_url": database_url, "cluster": cluster, "instance_id": "h1",
        "checkpoint_s": 0.2, "tick_s": 0.2, "poll_s": 0.2, "inventory_wait_s": 2.0, "ack_wait_s": 5.0, **kw})


@contextlib.asynccontextmanager
async def health_scoring(nats_url: str, database_url: str, cluster: str, **kw: Any) -> AsyncIterator[HealthService]:
    """A health-scoring instance in this process, stopped (drained, checkpointed) on exit."""
    async with in_process(settings(nats_url, database_url, cluster, **kw), mounter, what="health-scoring") as svc:
        yield svc


async def stats(nc: Any, timeout: float = 5.0) -> HealthStats:
    return await bus.request(nc, HEALTH_STATS, StatsRequest(), HealthStats, timeout=timeout)


@pytest.fixture
async def recorder(nats_proc: NatsProcess, cluster: str) -> AsyncIterator[Recorder]:
    async with streams_ready(nats_proc.url, name="recorder") as nc:
        r = await Recorder(nc, cluster).start()
        yield r
        await r.stop()

