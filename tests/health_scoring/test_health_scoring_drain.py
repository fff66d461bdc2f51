"""Drain recommendations over a real nats-server: the pods placement put on a GPU (minus those the
binder reports gone) are listed, checkpointable first, when the GPU is quarantined; a GPU holding no
pod gets none; a restart rebuilds who holds what from the streams."""

from __future__ import annotations

import time

from health_scoring_helpers import DECIDED, FINISHED, T0, Recorder, gpu_uuid, health_scoring, row

from gpuaware import bus
from gpuaware.schemas import (
    GpuSlice,
    HealthState,
    PlacementDecided,
    PodFinished,
    PodOutcome,
)


def decided(cluster: str, uid: str, gpu: int, *, at: float, checkpointable: bool = False,
            priority: int = 0) -> PlacementDecided:
    return PlacementDecided(
        source="placement/test", emitted_at=time.time(), cluster=cluster, decision_id=f"d-{uid}", pod_uid=uid,
        pod_name=f"name-{uid}", namespace="team-a", node="n1", policy="gpuaware", score=50.0, decided_at=at,
        checkpointable=checkpointable, priority=priority,
        slices=(GpuSlice(gpu_uuid=gpu_uuid("n1", gpu), gpu_index=gpu, gpu_milli=500, memory_mib=10_000),))


async def test_a_quarantined_gpu_gets_its_pods_listed_checkpointable_first(recorder: Recorder, nats_proc,
                                                                        cluster: str, fresh_database_url: str) -> None:
    r = recorder
    g0 = gpu_uuid("n1", 0)
    await r.nodes(["n1"])
    # on GPU 0: an old non-checkpointable pod, a young one, a checkpointable one, and one that finished;
    # on GPU 1: one pod (its GPU stays healthy: no recommendation)
    for uid, gpu, at, ckpt in (("old", 0, T0 - 7200, False), ("young", 0, T0 - 60, False),
                               ("ckpt", 0, T0 - 3600, True), ("done", 0, T0 - 600, False), ("other", 1, T0, False)):
        await bus.publish(r.js, DECIDED.at(cluster, "n1"), decided(cluster, uid, gpu, at=at, checkpointable=ckpt))
    await bus.publish(r.js, FINISHED.at(cluster, "n1"), PodFinished(
        source="binder/test", emitted_at=time.time(), cluster=cluster, pod_uid="done", pod_name="name-done",
        namespace="team-a", outcome=PodOutcome.SUCCEEDED, finished_at=T0 - 1))
    async with health_scoring(nats_proc.url, fresh_database_url, cluster, aftershock_k=0.0) as svc:
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.wait(lambda: len(r.changes) == 2, what="both GPUs' first state")
        assert r.drains == []  # a first state is no escalation
        await r.wait(lambda: len(svc.view.pods) == 4, what="the pods on the GPUs")
        await r.sample("n1", T0 + 10, [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: len(r.drains) == 1, what="a drain recommendation")
        d = r.drains[0]
        assert d.gpu_uuid == g0 and d.state is HealthState.QUARANTINED and d.urgent and "xid_79" in d.reason
        assert [p.pod_uid for p in d.pods] == ["ckpt", "young", "old"]
        assert [p.order for p in d.pods] == [0, 1, 2]
        assert d.pods[0].work_lost_s == 0.0 and d.pods[1].work_lost_s == 70.0 and d.pods[2].work_lost_s == 7210.0
        assert d.pods[2].pod_name == "name-old" and d.pods[2].namespace == "team-a"
    # a restart rebuilds the pods from the streams: the same GPU cordoned again by hand lists them again
    async with health_scoring(nats_proc.url, fresh_database_url, cluster, aftershock_k=0.0) as svc:
        await r.wait(lambda: len(svc.view.pods) == 4, what="the pods replayed")
        assert [p.uid for p in svc.view.pods.on(g0, T0 + 20)] == ["ckpt", "old", "young"]
        assert svc.view.pods.on(gpu_uuid("n1", 1), T0)[0].uid == "other"
