"""One leader per cluster: a standby never decides, takes over when the leader stops or dies (nothing
lost, nothing decided twice), and a restarted instance rebuilds its ledger from the streams."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest
from placement_service_helpers import World, pending, placement

from gpuaware.placement import MILLI

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


def _gpu_use(decisions) -> dict[str, int]:
    use: dict[str, int] = defaultdict(int)
    for d in decisions:
        for s in d.slices:
            use[s.gpu_uuid] += s.gpu_milli
    return use


async def test_only_the_leader_decides_and_a_graceful_stop_hands_over(world: World, nats_proc,
                                                                        cluster: str) -> None:
    await world.nodes(["n1", "n2"])
    # a lease of 60 s: the standby can win within the test only if the leader gives the lease up
    async with (placement(nats_proc.url, cluster, "p1", lease_ttl_s=60.0) as p1,
                placement(nats_proc.url, cluster, "p2", lead=False, lease_ttl_s=60.0) as p2):
        await asyncio.sleep(0.5)
        assert p1.leading and not p2.leading and p2.consumer is None
        for i in range(10):
            await world.pend(pending(cluster, f"a{i}", gpu_milli=250))
        await world.wait(lambda: len(world.decisions) == 10, what="10 decisions")
        assert {d.source for d in world.decisions} == {"placement/p1"}
        # the standby is hot: it holds the same reservations
        await world.wait(lambda: p2.state.ledger.cluster is not None
                         and p2.state.ledger.cluster.used_gpu_milli == 2500, what="standby view")
        await p1.stop()  # graceful: releases the lease
        await world.wait(lambda: p2.consumer is not None, timeout=30, what="standby takes over")
        await world.pend(pending(cluster, "b0", gpu_milli=250))
        await world.wait(lambda: world.decision_for("b0") is not None, what="b0 decided by p2")
        assert world.decision_for("b0").source == "placement/p2"
        assert max(_gpu_use(world.decisions).values()) <= MILLI


def _spawn(url: str, cluster: str, instance: str) -> subprocess.Popen:
    env = {**os.environ, "NATS_URL": url, "GPUAWARE_PLACEMENT_CLUSTER": cluster,
           "GPUAWARE_PLACEMENT_INSTANCE_ID": instance, "GPUAWARE_PLACEMENT_LEASE_TTL_S": "2.0",
           "GPUAWARE_PLACEMENT_LEASE_POLL_S": "0.1", "GPUAWARE_PLACEMENT_PENDING_ACK_WAIT_S": "1.0",
           "GPUAWARE_PLACEMENT_WORLD_SNAPSHOT": "false", "GPUAWARE_PLACEMENT_LOG_FORMAT": "console",
           "GPUAWARE_PLACEMENT_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "gpuaware.services.placement"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


async def test_killed_leader_is_replaced_nothing_lost_or_doubled(world: World, nats_proc, cluster: str) -> None:
    await world.nodes([f"n{i}" for i in range(8)])
    procs = {name: _spawn(nats_proc.url, cluster, name) for name in ("k1", "k2")}
    try:
        await world.pend(pending(cluster, "warm", gpu_milli=100))
        await world.wait(lambda: world.decisions, timeout=30, what="a leader")
        leader = world.decisions[0].source.split("/")[1]
        standby = next(n for n in procs if n != leader)
        # a steady stream of pods; the leader is killed in the middle of it
        uids = []
        for i in range(150):
            uid = f"p{i}"
            uids.append(uid)
            await world.pend(pending(cluster, uid, gpu_milli=200 + 10 * (i % 5)))
            if i == 60:
                procs[leader].send_signal(signal.SIGKILL)
                killed = time.monotonic()
            await asyncio.sleep(0.01)
        await world.wait(lambda: all(world.decision_for(u) for u in uids), timeout=15, what="every pod decided")
        by_standby = [world.decided_at[d.pod_uid] for d in world.decisions if d.source == f"placement/{standby}"]
        assert by_standby, "the standby never decided"
        assert min(by_standby) >= killed, "the standby decided while the leader lived"
        stored = await world.stored_decisions()
        per_pod = Counter(d.pod_uid for d in stored)
        assert set(per_pod) == {*uids, "warm"} and set(per_pod.values()) == {1}  # nothing lost or doubled
        assert max(_gpu_use(stored).values()) <= MILLI  # the standby saw the dead leader's reservations
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


async def test_restart_rebuilds_the_ledger_from_the_streams(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1"], gpus=4)
    async with placement(nats_proc.url, cluster, "r1") as first:
        for uid, gpus in (("a", 2), ("b", 1), ("c", 1)):
            await world.pend(pending(cluster, uid, num_gpu=gpus))
        await world.pend(pending(cluster, "big", num_gpu=4))
        await world.wait(lambda: len(world.decisions) == 3 and world.unschedulable_for("big"), what="3 + 1")
        a, b, c = (world.decision_for(u) for u in "abc")
        await world.bound(a)
        await world.bound(b)
        await world.finished(b)  # b left: 1 GPU free again
        await world.wait(lambda: first.state.ledger.cluster.used_gpu_milli == 3000, what="b released")
        before = {e.uid: (e.phase, e.node, e.gpus) for e in first.state.ledger}
    async with placement(nats_proc.url, cluster, "r2") as second:
        after = {e.uid: (e.phase, e.node, e.gpus) for e in second.state.ledger}
        assert after == before  # a bound, c decided (reserved), big parked
        assert second.state.ledger.cluster.used_gpu_milli == 3000
        second.state.ledger.check()
        # the freed GPU is used, and the GPUs a and c hold are not
        await world.pend(pending(cluster, "d", num_gpu=1))
        await world.wait(lambda: world.decision_for("d") is not None, what="d decided after restart")
        taken = {s.gpu_uuid for x in (a, c) for s in x.slices}
        assert {s.gpu_uuid for s in world.decision_for("d").slices}.isdisjoint(taken)
        # and the parked pod is still parked: once a and c finish, it is placed
        await world.finished(a)
        await world.finished(c)
        await world.finished(world.decision_for("d"))
        await world.wait(lambda: world.decision_for("big") is not None, what="big placed")


async def test_start_seeds_the_view_from_the_worlds_snapshot(world: World, nats_proc, cluster: str) -> None:
    from gpuaware import bus
    from gpuaware.schemas import (
        WORLD_SNAPSHOT,
        GpuSlice,
        WorldGpu,
        WorldNode,
        WorldPod,
        WorldSnapshotReply,
        WorldSnapshotRequest,
    )

    nodes = tuple(WorldNode(name=f"w{i}", cpu_milli=64_000, memory_mib=262_144, gpu_model="A100",
                            gpus=tuple(WorldGpu(uuid=f"GPU-w{i}-{g}", index=g, model="A100", memory_mib=81920)
                                       for g in range(2))) for i in range(3))
    held = WorldPod(pod_uid="old", pod_name="old", namespace="ns", node="w0", bound_at=1.0, decision_id="old/0",
                    slices=(GpuSlice(gpu_uuid="GPU-w0-1", gpu_index=1, gpu_milli=1000, memory_mib=81920),),
                    cpu_milli=8000, memory_mib=1024)

    async def snapshot(req: WorldSnapshotRequest) -> WorldSnapshotReply:
        # two pages: nodes 0-1 with the pod, then node 2
        first = req.node_offset == 0
        return WorldSnapshotReply(
            source="binder/test", emitted_at=0.0, cluster=cluster, world="twin", at=5000.0, generation=1,
            nodes=nodes[:2] if first else nodes[2:], pods=(held,) if req.pod_offset == 0 else (),
            total_nodes=3, total_pods=1, next_node_offset=2 if first else None, next_pod_offset=None)

    binder = await bus.add_service(world.nc, "binder", "0.0.1", [bus.Endpoint(
        name="snapshot", subject=WORLD_SNAPSHOT, request_type=WorldSnapshotRequest, handler=snapshot)])
    try:
        async with placement(nats_proc.url, cluster, world_snapshot=True) as svc:
            assert sorted(svc.state.specs) == ["w0", "w1", "w2"]
            # the world's clock is the snapshot's time, not its last bind's (the pod bound at t=1)
            assert 5000.0 <= svc.state.planner.world.now() < 5060.0
            assert svc.state.ledger.pods["old"].phase == "bound" and svc.state.ledger.cluster.used_gpu_milli == 1000
            svc.state.ledger.check()
            # 6 GPUs, 1 held: five 1-GPU pods fit, none on the held GPU; the sixth waits
            for i in range(6):
                await world.pend(pending(cluster, f"q{i}"))
            await world.wait(lambda: len(world.decisions) == 5 and world.unschedulable_for("q5"), what="5 + 1")
            assert "GPU-w0-1" not in {s.gpu_uuid for d in world.decisions for s in d.slices}
    finally:
        await binder.stop()
