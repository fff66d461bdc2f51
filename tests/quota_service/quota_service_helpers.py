"""Quota service tests: a real nats-server per test, a fresh PostgreSQL database, the service in this
process, the binder's pod events published as the binder publishes them, ``quota.admit`` asked as
placement asks it."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from service_runner import ClusterClient, in_process, quiet_settings, streams_ready
from service_runner import placement as run_placement

from gpuaware import bus
from gpuaware.devstack import NatsProcess
from gpuaware.schemas import (
    PLACEMENT_DECIDED,
    POD_UNSCHEDULABLE,
    QUOTA_ADMIT,
    QUOTA_USAGE_REPORTED,
    AdmitReply,
    AdmitRequest,
    GpuInfo,
    GpuSlice,
    NodeInventory,
    PlacementDecided,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    QuotaUsageReported,
)
from gpuaware.services.quota.handlers import QuotaService, mounter
from gpuaware.services.quota.settings import QuotaSettings

PENDING = bus.event_channel(PodPending, id_of=lambda p: f"{p.cluster}/{p.pod_uid}/{p.attempt}")
INVENTORY = bus.event_channel(NodeInventory)
BOUND = bus.event_channel(PodBound)
FINISHED = bus.event_channel(PodFinished)
PREEMPTED = bus.event_channel(PodPreempted)
T0 = float(int(time.time()) - 7200)
RECLAIM_TREE = """
capacity: {"*": {gpus: 8}}
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: team-a, parent: org, guaranteed: {"*": {gpus: 4}}}
  - {name: team-b, parent: org, guaranteed: {"*": {gpus: 4}}}
  - {name: a1, parent: team-a}
  - {name: b1, parent: team-b}
"""
"""8 GPUs, two teams guaranteed 4 each: what one team leaves idle the other borrows"""


@pytest.fixture
def cluster() -> str:
    return f"q{uuid.uuid4().hex[:8]}"



def inventory(cluster: str, node: str) -> NodeInventory:
    return NodeInventory(
        source="test", emitted_at=time.time(), cluster=cluster, node=node, cpu_milli=96_000, memory_mib=786_432,
        gpus=tuple(GpuInfo(uuid=f"GPU-{node}-{i}", index=i, model="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                           pci_bus_id=f"00000000:{i:02x}:00.0", tensor_cores=True) for i in range(4)))


class Watch:
    """Every decision and verdict placement publishes for one cluster, in order."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.decided: list[PlacementDecided] = []
        self.unschedulable: list[PodUnschedulable] = []

    async def start(self, w: World) -> Watch:
        async def on_decided(msg: object) -> None:
            d = msgspec.json.decode(msg.data, type=PlacementDecided)  # type: ignore[attr-defined]  # msg is a NATS Msg, typed loosely here
            if d.cluster == self.cluster:
                self.decided.append(d)

        async def on_unschedulable(msg: object) -> None:
            u = msgspec.json.decode(msg.data, type=PodUnschedulable)  # type: ignore[attr-defined]  # msg is a NATS Msg, typed loosely here
            if u.cluster == self.cluster:
                self.unschedulable.append(u)

        for subject, cb in ((PLACEMENT_DECIDED, on_decided), (POD_UNSCHEDULABLE, on_unschedulable)):
            await w.nc.subscribe(subject, cb=cb)
            await w.nc.subscribe(f"{subject}.>", cb=cb)
        await w.nc.flush()
        return self

    def of(self, uid: str) -> list[PlacementDecided]:
        return [d for d in self.decided if d.pod_uid == uid]


def pending(cluster: str, uid: str, queue: str, gpus: int = 1, milli: int = 1000, **kw: Any) -> PodPending:
    return PodPending(source="test", emitted_at=time.time(), cluster=cluster, pod_uid=uid, pod_name=uid,
                      namespace="ns", submitted_at=time.time(), num_gpu=gpus, gpu_milli=milli,
                      gpu_memory_mib=kw.pop("gpu_memory_mib", 8192), queue=queue, **kw)


def slices(node: str, gpus: int, milli: int = 1000, memory_mib: int = 8192) -> tuple[GpuSlice, ...]:
    return tuple(GpuSlice(gpu_uuid=f"GPU-{node}-{i}", gpu_index=i, gpu_milli=milli, memory_mib=memory_mib)
                 for i in range(gpus))


class World(ClusterClient):
    """Publishes the binder's events, asks quota.admit, records usage reports."""

    def __init__(self, nc: Any, cluster: str) -> None:
        super().__init__(nc, cluster)
        self.reports: list[QuotaUsageReported] = []

    async def start(self) -> World:
        await self.listen({QUOTA_USAGE_REPORTED: (QuotaUsageReported, self.reports)})
        return self

    async def admit(self, pod: PodPending, node: str | None = None, **kw: Any) -> AdmitReply:
        req = AdmitRequest(source="placement/test", emitted_at=time.time(), cluster=self.cluster, pod=pod, node=node,
                           **kw)
        return await bus.request(self.nc, QUOTA_ADMIT, req, AdmitReply, timeout=5.0)

    async def bound(self, uid: str, queue: str, node: str, gpus: int, at: float, milli: int = 1000,
                    memory_mib: int = 8192, msg_id: str | None = None) -> None:
        ev = PodBound(source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=uid, pod_name=uid,
                      namespace="ns", node=node, slices=slices(node, gpus, milli, memory_mib), bound_at=at, queue=queue)
        await bus.publish(self.js, BOUND.at(self.cluster, node), ev, msg_id=msg_id)

    async def finished(self, uid: str, node: str, at: float, started: float, msg_id: str | None = None) -> None:
        ev = PodFinished(source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=uid, pod_name=uid,
                         namespace="ns", outcome=PodOutcome.SUCCEEDED, finished_at=at, node=node, started_at=started)
        await bus.publish(self.js, FINISHED.at(self.cluster, node), ev, msg_id=msg_id)

    async def preempted(self, uid: str, node: str, at: float) -> None:
        ev = PodPreempted(source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=uid,
                          pod_name=uid, namespace="ns", node=node, reason="reclaim", preempted_at=at)
        await bus.publish(self.js, PREEMPTED.at(self.cluster, node), ev)


def settings(nats_url: str, database_url: str, cluster: str, **kw: Any) -> QuotaSettings:
    return quiet_settings(QuotaSettings, **{"nats_url": nats_url, "database_url": database_url, "cluster": cluster,
                                           "instance_id": "q1", "report_interval_s": 0.2, **kw})


@contextlib.asynccontextmanager
async def quota(nats_url: str, database_url: str, cluster: str, **kw: Any) -> AsyncIterator[QuotaService]:
    """A quota instance in this process, stopped (its writes flushed) on exit."""
    async with in_process(settings(nats_url, database_url, cluster, **kw), mounter, what="quota") as svc:
        yield svc


@pytest.fixture
async def world(nats_proc: NatsProcess, cluster: str) -> AsyncIterator[World]:
    async with streams_ready(nats_proc.url, name="world") as nc:
        yield await World(nc, cluster).start()


# --- placement in this process (tests/service_runner.py), asking quota with a short timeout -----------

@contextlib.asynccontextmanager
async def placement(url: str, cluster: str, **kw: Any) -> AsyncIterator[Any]:
    async with run_placement(url, cluster, **{"quota_timeout_s": 2.0, **kw}) as service:
        yield service
