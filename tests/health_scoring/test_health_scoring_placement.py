"""Placement stops using a quarantined GPU within one decision: the real health-scoring and placement
services in this process, a GPU falls off the bus (its telemetry says XID 79), health-scoring
publishes the state change, and the very next pending pod does not land on that GPU although the
packing policy would have put it there."""

from __future__ import annotations

import time

import msgspec
from health_scoring_helpers import T0, Recorder, gpu_uuid, health_scoring, row
from service_runner import placement

from gpuaware import bus
from gpuaware.schemas import (
    PLACEMENT_DECIDED,
    PlacementDecided,
    PodBound,
    PodPending,
)

PENDING = bus.event_channel(PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")
BOUND = bus.event_channel(PodBound)


def _pending(cluster: str, uid: str) -> PodPending:
    return PodPending(source="test", emitted_at=time.time(), cluster=cluster, pod_uid=uid, pod_name=uid,
                      namespace="ns", submitted_at=time.time(), num_gpu=1, gpu_milli=500, gpu_memory_mib=8192,
                      cpu_milli=1000, memory_mib=4096)


async def test_placement_keeps_new_pods_off_a_gpu_quarantined_by_health_scoring(
        recorder: Recorder, nats_proc, cluster: str, fresh_database_url: str) -> None:
    r = recorder
    decisions: dict[str, PlacementDecided] = {}

    async def on_decided(msg: object) -> None:
        d = msgspec.json.decode(msg.data, type=PlacementDecided)  # type: ignore[attr-defined]  # msg is a NATS Msg, typed loosely here
        if d.cluster == cluster:
            decisions[d.pod_uid] = d

    await r.nc.subscribe(PLACEMENT_DECIDED, cb=on_decided)
    await r.nodes(["n1", "n2"])

    async def place(uid: str) -> PlacementDecided:
        await bus.publish(r.js, PENDING, _pending(cluster, uid))
        await r.wait(lambda: uid in decisions, what=f"a decision for {uid}")
        d = decisions[uid]
        await bus.publish(r.js, BOUND, PodBound(
            source="binder/test", emitted_at=time.time(), cluster=cluster, pod_uid=d.pod_uid, pod_name=d.pod_name,
            namespace=d.namespace, node=d.node, slices=d.slices, bound_at=time.time(), decision_id=d.decision_id))
        return d

    async with health_scoring(nats_proc.url, fresh_database_url, cluster), placement(nats_proc.url, cluster):
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.sample("n2", T0, [row("n2", 0), row("n2", 1)])
        await r.wait(lambda: len(r.changes) == 4, what="every GPU's first (healthy) state")
        # control: the packing policy puts a second half-GPU pod on the GPU the first one half fills
        a1 = await place("a1")
        a2 = await place("a2")
        assert a2.slices[0].gpu_uuid == a1.slices[0].gpu_uuid, "the policy packs half GPUs together"
        # a third half-GPU pod starts on another GPU, which then falls off the bus
        b1 = await place("b1")
        target = b1.slices[0].gpu_uuid
        node = b1.node
        idx = int(target.rsplit("-", 1)[1])
        rows = [row(node, i, xid_last=79 if i == idx else 0) for i in range(2)]
        await r.sample(node, T0 + 10, rows)
        await r.wait(lambda: r.states_of(target)[-1:] == ["quarantined"], what="the GPU quarantined")
        # the next pod, published as soon as the state change is stored: not on the quarantined GPU
        b2 = await place("b2")
        assert b2.slices[0].gpu_uuid != target, (b2, target)
        assert b2.slices[0].gpu_uuid in {gpu_uuid(n, i) for n in ("n1", "n2") for i in range(2)}
