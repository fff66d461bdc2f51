"""Placement service tests: a real nats-server per test, the service in-process (or as processes for
fail-over), and a tiny stand-in for the world that publishes inventories, pending pods and the
binder's events exactly as the contract says."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from gpuaware import bus
from gpuaware.devstack import NatsProcess
from gpuaware.runtime import run_service
from gpuaware.schemas.binder import PodBindFailed, PodBound, PodFinished, PodOutcome
from gpuaware.schemas.inventory import GpuInfo, NodeInventory
from gpuaware.schemas.placement import PlacementDecided, PodUnschedulable
from gpuaware.schemas.pods import PodPending
from gpuaware.schemas.streams import PLACEMENT, STREAMS
from gpuaware.services.placement.handlers import PlacementService, mounter
from gpuaware.services.placement.settings import PlacementSettings

INVENTORY = bus.event_channel(NodeInventory)
PENDING = bus.event_channel(PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")
BOUND = bus.event_channel(PodBound)
FAILED = bus.event_channel(PodBindFailed)
FINISHED = bus.event_channel(PodFinished)
DECIDED = bus.event_channel(PlacementDecided)
UNSCHEDULABLE = bus.event_channel(PodUnschedulable)

MEMORY = {"A100": 81920, "T4": 15360, "V100": 32768}


def inventory(cluster: str, node: str, model: str = "A100", gpus: int = 8, cpu: int = 96_000,
              memory: int = 786_432, islands: bool = True) -> NodeInventory:
    return NodeInventory(
        source="test", emitted_at=time.time(), cluster=cluster, node=node, cpu_milli=cpu, memory_mib=memory,
        gpus=tuple(GpuInfo(uuid=f"GPU-{node}-{i}", index=i, model=model, memory_mib=MEMORY.get(model, 16384),
                           pci_bus_id=f"00000000:{i:02x}:00.0", tensor_cores=True, nvlink_links=12 if islands else 0,
                           nvlink_island=f"{node}-nv" if islands else None)
                   for i in range(gpus)))


def pending(cluster: str, uid: str, **kw: Any) -> PodPending:
    base: dict[str, Any] = {"num_gpu": 1, "gpu_milli": 1000, "cpu_milli": 4000, "memory_mib": 8192}
    base.update(kw)
    return PodPending(source="test", emitted_at=time.time(), cluster=cluster, pod_uid=uid, pod_name=f"pod-{uid}",
                      namespace="ns", submitted_at=time.time(), **base)


class World:
    """Publishes what the world (binder, agents) would, and records what placement publishes."""

    def __init__(self, nc: Any, cluster: str) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.cluster = cluster
        self.decisions: list[PlacementDecided] = []
        self.unschedulable: list[PodUnschedulable] = []
        self.sent_at: dict[str, float] = {}
        self.decided_at: dict[str, float] = {}
        self._subs: list[Any] = []

    async def start(self) -> World:
        """Declare the contract's streams (the service would too, but the world may publish first),
        then record what placement publishes."""
        for spec in STREAMS:
            await bus.ensure_stream(self.js, spec)

        async def on_decided(msg: Any) -> None:
            d = DECIDED.decode(msg.data)
            if d.cluster == self.cluster:
                self.decisions.append(d)
                self.decided_at.setdefault(d.pod_uid, time.monotonic())

        async def on_unsched(msg: Any) -> None:
            u = UNSCHEDULABLE.decode(msg.data)
            if u.cluster == self.cluster:
                self.unschedulable.append(u)

        self._subs = [await self.nc.subscribe(DECIDED.subject, cb=on_decided),
                      await self.nc.subscribe(UNSCHEDULABLE.subject, cb=on_unsched)]
        await self.nc.flush()
        return self

    async def nodes(self, names: list[str], **kw: Any) -> None:
        for n in names:
            await bus.publish(self.js, INVENTORY.at(self.cluster, n), inventory(self.cluster, n, **kw))

    async def pend(self, pod: PodPending, *, msg_id: str | None = None) -> None:
        self.sent_at.setdefault(pod.pod_uid, time.monotonic())
        await bus.publish(self.js, PENDING, pod, msg_id=msg_id)

    async def bound(self, d: PlacementDecided) -> None:
        await bus.publish(self.js, BOUND, PodBound(
            source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=d.pod_uid,
            pod_name=d.pod_name, namespace=d.namespace, node=d.node, slices=d.slices, bound_at=time.time(),
            decision_id=d.decision_id, queue=d.queue))

    async def bind_failed(self, d: PlacementDecided, transient: bool = False) -> None:
        await bus.publish(self.js, FAILED, PodBindFailed(
            source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=d.pod_uid,
            pod_name=d.pod_name, namespace=d.namespace, node=d.node, decision_id=d.decision_id,
            reason="node gone", transient=transient, failed_at=time.time(), attempt=d.attempt))

    async def finished(self, d: PlacementDecided) -> None:
        await bus.publish(self.js, FINISHED, PodFinished(
            source="binder/test", emitted_at=time.time(), cluster=self.cluster, pod_uid=d.pod_uid,
            pod_name=d.pod_name, namespace=d.namespace, outcome=PodOutcome.SUCCEEDED, finished_at=time.time(),
            node=d.node, slices=d.slices))

    def decision_for(self, uid: str) -> PlacementDecided | None:
        return next((d for d in self.decisions if d.pod_uid == uid), None)

    def unschedulable_for(self, uid: str) -> list[PodUnschedulable]:
        return [u for u in self.unschedulable if u.pod_uid == uid]

    async def wait(self, predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.02)

    async def stored_decisions(self) -> list[PlacementDecided]:
        """Every decision the PLACEMENT stream holds for this cluster (what the binder will see)."""
        out: list[PlacementDecided] = []
        follower = await bus.follow(self.js, [DECIDED], lambda d, _m: out.append(d), stream=PLACEMENT.name,
                                    name="test-read")
        await follower.sync(timeout=5.0)
        await follower.stop()
        return [d for d in out if d.cluster == self.cluster]

    async def stop(self) -> None:
        for s in self._subs:
            with contextlib.suppress(Exception):
                await s.unsubscribe()


def settings(url: str, cluster: str, instance: str = "p1", **kw: Any) -> PlacementSettings:
    base: dict[str, Any] = {"nats_url": url, "cluster": cluster, "instance_id": instance, "log_format": "console",
                            "log_level": "WARNING", "lease_ttl_s": 1.5, "lease_poll_s": 0.1,
                            "pending_ack_wait_s": 1.0, "world_snapshot": False, "quota_recheck_s": 60.0}
    base.update(kw)
    return msgspec.convert(base, PlacementSettings)


@contextlib.asynccontextmanager
async def placement(url: str, cluster: str, instance: str = "p1", *, lead: bool = True,
                    **kw: Any) -> AsyncIterator[PlacementService]:
    """A placement instance in this process; waits until it leads (with `lead`)."""
    got: list[PlacementService] = []
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(settings(url, cluster, instance, **kw), version="0.0.1",
                                           mount=mounter(got.append), stop=stop, ready=ready))
    done, _ = await asyncio.wait({task, asyncio.ensure_future(ready.wait())}, timeout=20,
                                 return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    service = got[0]
    if lead:
        deadline = time.monotonic() + 10
        while service.consumer is None:
            assert time.monotonic() < deadline, "placement never started leading"
            await asyncio.sleep(0.02)
    try:
        yield service
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


@pytest.fixture
def cluster() -> str:
    return f"c{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def world(nats_proc: NatsProcess, cluster: str) -> AsyncIterator[World]:
    async with bus.connected(nats_proc.url, name="world") as nc:
        w = await World(nc, cluster).start()
        yield w
        await w.stop()
