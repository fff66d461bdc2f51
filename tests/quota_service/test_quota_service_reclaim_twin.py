"""The reclaim loop end to end over real NATS: the binder on the digital twin, placement and quota, all
in this process, nobody publishing anything by hand.

The twin's workload: a borrowing queue's four 2-GPU pods fill both 4-GPU nodes (team-b's guarantee
of 4 plus team-a's idle 4); later team-a's pod arrives. Quota answers it with a reclaim plan,
placement decides it with quota's victim as a planned preemption (reason ``reclaim``, checkpoint
first), the binder runs the checkpoint handshake, preempts (the victim goes back to pending) and binds
the owner's pod: it runs in the twin, on the GPUs the victim gave back, and the twin's invariants hold.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from quota_service_helpers import RECLAIM_TREE, World, placement, quota
from service_runner import eventually

from gpuaware.placement import NodeSpec
from gpuaware.runtime import run_service
from gpuaware.schemas import (
    CHECKPOINT_ACKNOWLEDGED,
    PLACEMENT_DECIDED,
    POD_PREEMPTED,
    CheckpointAcknowledged,
    PlacementDecided,
    PodPreempted,
)
from gpuaware.services.binder.handlers import make_mount
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim.clock import AcceleratedClock
from gpuaware.sim.twin import Twin
from gpuaware.sim.workload_gen import SimPod

T0 = 1_767_225_600.0
NODES = (NodeSpec("n1", 96_000, 786_432, 4, "A100"), NodeSpec("n2", 96_000, 786_432, 4, "A100"))


def pod(uid: str, queue: str, at: float, ckpt: bool = False) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="ns", arrival_s=at, duration_s=None, queue=queue, cpu_milli=1000,
                  memory_mib=4096, num_gpu=2, gpu_milli=1000, checkpointable=ckpt)


@contextlib.asynccontextmanager
async def binder(url: str, world: TwinWorld) -> AsyncIterator[Any]:
    got: list[Any] = []
    stop, ready = asyncio.Event(), asyncio.Event()
    config = BinderSettings(nats_url=url, instance_id="b1", cluster=world.cluster, log_format="console",
                            log_level="WARNING", checkpoint_min_wait_s=0.5, poll_s=0.1, ack_wait_s=5.0)
    task = asyncio.create_task(run_service(config, version="0.0.1", mount=make_mount(lambda _s, _src: world,
                                                                                     got.append),
                                           stop=stop, ready=ready))
    done, _ = await asyncio.wait({task, asyncio.ensure_future(ready.wait())}, timeout=30,
                                 return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    try:
        yield got[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_the_binder_runs_the_owners_pod_after_quotas_reclaim(world: World, nats_proc, cluster: str,
                                                                   fresh_database_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "queues.yaml"
    tree.write_text(RECLAIM_TREE)
    workload = [pod("b-1", "b1", 0.0), pod("b-2", "b1", 0.0), pod("b-3", "b1", 0.0, ckpt=True),
                pod("b-4", "b1", 0.0), pod("a-1", "a1", 60.0)]
    twin = Twin(NODES, workload, start=T0, seed=1, cluster=cluster, checkpoint_delay_s=(2.0, 4.0), fleet=False)
    tw = TwinWorld(twin, AcceleratedClock(speed=10.0, start=T0), source="binder/test", skip_idle=False, tick_s=0.05)
    decided: list[PlacementDecided] = []
    preempted: list[PodPreempted] = []
    acks: list[CheckpointAcknowledged] = []
    for subject, kind, into in ((PLACEMENT_DECIDED, PlacementDecided, decided),
                                (POD_PREEMPTED, PodPreempted, preempted),
                                (CHECKPOINT_ACKNOWLEDGED, CheckpointAcknowledged, acks)):
        async def on(msg: Any, kind: type = kind, into: list = into) -> None:
            ev = msgspec.json.decode(msg.data, type=kind)
            if ev.cluster == cluster:
                into.append(ev)

        await world.nc.subscribe(subject, cb=on)
        await world.nc.subscribe(f"{subject}.>", cb=on)
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)) as q, binder(nats_proc.url, tw), \
            placement(nats_proc.url, cluster, world_snapshot=True) as p:
        await eventually(lambda: twin.state("a-1") == "bound", timeout=60.0, what="the owner's pod bound in the twin")
        (d,) = [x for x in decided if x.pod_uid == "a-1"]
        assert [(v.pod_uid, v.reason, v.checkpoint_first) for v in d.preemptions] == [("b-3", "reclaim", True)]
        (victim,) = [x for x in preempted if x.pod_uid == "b-3"]
        assert victim.checkpointed and victim.reason == "reclaim" and victim.decision_id == d.decision_id
        assert victim.requeued and any(a.pod_uid == "b-3" for a in acks)  # the checkpoint handshake ran
        assert {s.gpu_uuid for s in victim.slices} == {s.gpu_uuid for s in d.slices}
        # every other borrower still runs; the victim waits (b1 is at its guarantee, the cluster full)
        assert [twin.state(u) for u in ("b-1", "b-2", "b-4")] == ["bound"] * 3
        assert twin.state("b-3") == "pending"
        assert p.quota.reclaims == 1 and q.view.counts["reclaim_plans"] >= 1
        assert len([x for x in decided if x.pod_uid == "a-1"]) == 1
        twin.check()
