"""Placement with quota running decides the same pods as without it when every queue is unlimited:
the real placement service in this process, once alone and once beside a quota service with no tree
file (every queue open and unlimited), on two clusters of the same shape fed the same pending pods.
Quota answers every ``quota.admit`` (its counters say so) and changes no decision."""

from __future__ import annotations

import time

import msgspec
from quota_service_helpers import World, pending, placement, quota
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas import (
    NODE_INVENTORY,
    PLACEMENT_DECIDED,
    POD_PENDING,
    POD_UNSCHEDULABLE,
    GpuInfo,
    NodeInventory,
    PlacementDecided,
    PodPending,
    PodUnschedulable,
)

PENDING = bus.Channel(POD_PENDING, PodPending, id_of=lambda p: f"{p.cluster}/{p.pod_uid}/{p.attempt}")
INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)
# (uid, queue, GPUs, milli): whole and fractional pods of three queues, more than 2 nodes x 4 GPUs hold
PODS = [("a", "team-a", 2, 1000), ("b", "team-b", 1, 500), ("c", "team-c", 1, 250), ("d", "team-a", 4, 1000),
        ("e", "team-b", 1, 1000), ("f", "team-c", 2, 1000), ("g", "team-a", 1, 500), ("h", "team-b", 2, 1000)]


def inventory(cluster: str, node: str) -> NodeInventory:
    return NodeInventory(
        source="test", emitted_at=time.time(), cluster=cluster, node=node, cpu_milli=96_000, memory_mib=786_432,
        gpus=tuple(GpuInfo(uuid=f"GPU-{node}-{i}", index=i, model="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                           pci_bus_id=f"00000000:{i:02x}:00.0", tensor_cores=True) for i in range(4)))


async def _decide(w: World, cluster: str) -> dict[str, tuple]:
    seen: dict[str, tuple] = {}

    async def on_decided(msg: object) -> None:
        d = msgspec.json.decode(msg.data, type=PlacementDecided)  # type: ignore[attr-defined]
        if d.cluster == cluster:
            seen[d.pod_uid] = (d.node, tuple(s.gpu_index for s in d.slices), tuple(s.gpu_milli for s in d.slices))

    async def on_unschedulable(msg: object) -> None:
        u = msgspec.json.decode(msg.data, type=PodUnschedulable)  # type: ignore[attr-defined]
        if u.cluster == cluster:
            seen.setdefault(u.pod_uid, ("unschedulable",))

    subs = [await w.nc.subscribe(f"{PLACEMENT_DECIDED}.>", cb=on_decided),
            await w.nc.subscribe(PLACEMENT_DECIDED, cb=on_decided),
            await w.nc.subscribe(f"{POD_UNSCHEDULABLE}.>", cb=on_unschedulable),
            await w.nc.subscribe(POD_UNSCHEDULABLE, cb=on_unschedulable)]
    for uid, queue, gpus, milli in PODS:  # one at a time: each decision sees the previous ones
        await bus.publish(w.js, PENDING, pending(cluster, uid, queue, gpus=gpus, milli=milli, cpu_milli=1000,
                                                 memory_mib=4096))
        await eventually(lambda uid=uid: uid in seen, what=f"a verdict for {uid}")
    for s in subs:
        await s.unsubscribe()
    return seen


async def test_unlimited_quota_changes_no_decision(world: World, nats_proc, cluster: str,
                                                   fresh_database_url: str) -> None:
    alone, with_quota = f"{cluster}-alone", f"{cluster}-quota"
    for c in (alone, with_quota):  # the nodes exist before placement starts (it reads them at start)
        for node in ("n1", "n2"):
            await bus.publish(world.js, INVENTORY.at(c, node), inventory(c, node))
    async with placement(nats_proc.url, alone):
        baseline = await _decide(world, alone)
    async with quota(nats_proc.url, fresh_database_url, with_quota) as q, placement(nats_proc.url, with_quota):
        got = await _decide(world, with_quota)
        asked = q.view.counts["admitted"] + q.view.counts["refused"]
        assert q.view.counts["refused"] == 0
    decided = [u for u, v in baseline.items() if v[0] != "unschedulable"]
    assert asked >= len(decided) > 0, (asked, baseline)  # quota was asked about every decision
    assert got == baseline
    assert any(v == ("unschedulable",) for v in baseline.values()), "the pods should overfill the cluster"
