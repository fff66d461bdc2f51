"""Binder test helpers: the binder service running in-process on a twin the test builds, and a
recorder of everything stored in the BINDER stream (an ordered consumer reads the stream itself, so
a message JetStream de-duplicated is seen once, as a reader would)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuaware import bus
from gpuaware.placement import NodeSpec
from gpuaware.runtime import run_service
from gpuaware.schemas import (
    Event,
    GpuSlice,
    PlacementDecided,
    PlannedPreemption,
    decode_event,
)
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.handlers import DECISIONS, make_mount
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim.clock import AcceleratedClock
from gpuaware.sim.twin import Twin
from gpuaware.sim.workload_gen import SimPod

T0 = 1_767_225_600.0
E = TypeVar("E", bound=Event)

NODES = (
    NodeSpec("n1", 32_000, 131_072, 2, "T4", numa_nodes=(0, 1)),  # 2 x T4, 15360 MiB each (the GPU catalog)
    NodeSpec("n2", 64_000, 262_144, 1, "A100"),
)


def sim_pod(uid: str, *, at: float = 0.0, dur: float | None = None, milli: int = 1000, gmem: int = 0,
            ckpt: bool = False, priority: int = 0, queue: str = "team-a") -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=at, duration_s=dur, queue=queue, cpu_milli=1000,
                  memory_mib=2048, num_gpu=1, gpu_milli=milli, gpu_memory_mib=gmem, checkpointable=ckpt,
                  priority=priority)


def twin_world(*pods: SimPod, speed: float = 10.0, nodes: tuple[NodeSpec, ...] = NODES,
               fleet: bool = False) -> TwinWorld:
    twin = Twin(nodes, pods, start=T0, seed=1, checkpoint_delay_s=(2.0, 4.0), fleet=fleet)
    return TwinWorld(twin, AcceleratedClock(speed=speed, start=T0), source="binder/test", skip_idle=False,
                     tick_s=0.05)


def decision(world: TwinWorld, decision_id: str, uid: str, node: str, slices: list[tuple[int, int, int]],
             preemptions: tuple[PlannedPreemption, ...] = ()) -> PlacementDecided:
    gpus = world.twin.node_gpus[node]
    return PlacementDecided(
        source="placement/test", emitted_at=T0, decision_id=decision_id, pod_uid=uid, pod_name=uid, namespace="t",
        node=node, slices=tuple(GpuSlice(gpu_uuid=gpus[i].uuid, gpu_index=i, gpu_milli=m, memory_mib=mem)
                                for i, m, mem in slices),
        policy="test", score=50.0, decided_at=T0, preemptions=preemptions)


class Recorder:
    """Every event stored under ``binder.>``, in stream order, with its message id."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.ids: list[str] = []
        self._sub: Any = None

    async def start(self, js: bus.JetStream) -> None:
        self._sub = await js.subscribe("binder.>", ordered_consumer=True, cb=self._on)

    async def _on(self, msg: Any) -> None:
        self.events.append(decode_event(msg.data))
        self.ids.append((msg.headers or {}).get(bus.MSG_ID, ""))

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    def of(self, cls: type[E], uid: str | None = None) -> list[E]:
        return [e for e in self.events if isinstance(e, cls) and (uid is None or e.pod_uid == uid)]

    async def wait_for(self, what: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        while not (value := what()):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out; stream holds {[type(e).__name__ for e in self.events]}")
            await asyncio.sleep(0.02)
        return value


@dataclass
class Running:
    """One binder service running in this process."""

    binder: Binder
    world: TwinWorld
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def shutdown(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 15)


@dataclass
class Harness:
    nats_url: str
    nc: Any
    js: bus.JetStream
    recorder: Recorder

    async def start(self, world: TwinWorld, **settings: Any) -> Running:
        got: list[Binder] = []
        stop, ready = asyncio.Event(), asyncio.Event()
        config = BinderSettings(nats_url=self.nats_url, instance_id="test", log_format="console",
                                log_level="WARNING", checkpoint_min_wait_s=0.5, poll_s=0.1, ack_wait_s=5.0,
                                **settings)
        task = asyncio.create_task(run_service(
            config, version="0.0.1", mount=make_mount(lambda _s, _src: world, got.append), stop=stop, ready=ready))
        done, _ = await asyncio.wait({task, asyncio.create_task(ready.wait())}, timeout=15,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises what went wrong
        assert ready.is_set(), "the binder did not start"
        if self.recorder._sub is None:
            await self.recorder.start(self.js)
        return Running(got[0], world, stop, task)

    async def decide(self, d: PlacementDecided, msg_id: str | None = None) -> None:
        await bus.publish(self.js, DECISIONS, d, msg_id=msg_id or f"test/{d.decision_id}")
