"""Placement with quota running decides the same pods as without it when every queue is unlimited:
the real placement service in this process, once alone and once beside a quota service with no tree
file (every queue open and unlimited), on two clusters of the same shape fed the same pending pods.
Quota answers every ``quota.admit`` (its counters say so) and changes no decision."""

from __future__ import annotations

from quota_service_helpers import INVENTORY, PENDING, Watch, World, inventory, pending, placement, quota
from service_runner import eventually

from gpuaware import bus

# (uid, queue, GPUs, milli): whole and fractional pods of three queues, more than 2 nodes x 4 GPUs hold
PODS = [("a", "team-a", 2, 1000), ("b", "team-b", 1, 500), ("c", "team-c", 1, 250), ("d", "team-a", 4, 1000),
        ("e", "team-b", 1, 1000), ("f", "team-c", 2, 1000), ("g", "team-a", 1, 500), ("h", "team-b", 2, 1000)]


def _verdict(watch: Watch, uid: str) -> tuple | None:
    """(node, GPU indexes, GPU millis) of the pod's decision, ("unschedulable",), or None yet."""
    for d in watch.of(uid):
        return d.node, tuple(s.gpu_index for s in d.slices), tuple(s.gpu_milli for s in d.slices)
    return ("unschedulable",) if any(u.pod_uid == uid for u in watch.unschedulable) else None


async def _decide(w: World, cluster: str) -> dict[str, tuple]:
    watch = await Watch(cluster).start(w)
    seen: dict[str, tuple] = {}
    for uid, queue, gpus, milli in PODS:  # one at a time: each decision sees the previous ones
        await bus.publish(w.js, PENDING, pending(cluster, uid, queue, gpus=gpus, milli=milli, cpu_milli=1000,
                                                 memory_mib=4096))
        await eventually(lambda uid=uid: _verdict(watch, uid) is not None, what=f"a verdict for {uid}")
        seen[uid] = _verdict(watch, uid)
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
