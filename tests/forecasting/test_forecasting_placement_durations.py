"""Placement's fair-share order asks the forecasting service how long parked pods will run: both real
services in this process over real NATS (forecasting's registry in PostgreSQL). A recurring job's
learnt runtime reaches placement's order for a parked run of the same job; with nobody answering,
parked pods keep the default."""

from __future__ import annotations

import time

import pytest
from forecasting_helpers import eventually, forecasting, recorder
from service_runner import placement

from gpuaware import bus
from gpuaware.schemas import NODE_INVENTORY, GpuInfo, NodeInventory

pytestmark = pytest.mark.timeout(120)

INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)


async def _one_gpu_node(nc: object, cluster: str) -> None:
    inv = NodeInventory(source="test", emitted_at=time.time(), cluster=cluster, node="n0", cpu_milli=32_000,
                        memory_mib=262_144,
                        gpus=(GpuInfo(uuid="GPU-n0-0", index=0, model="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                                      pci_bus_id="00000000:00:00.0", tensor_cores=True),))
    await bus.publish(nc.jetstream(), INVENTORY.at(cluster, "n0"), inv)  # type: ignore[attr-defined]  # a loosely typed test fixture


async def test_a_parked_pod_is_ordered_by_the_runtime_the_forecasting_service_learnt(
        nats_proc, fresh_database_url: str, cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as fc:
        await _one_gpu_node(rec.nc, cluster)  # the node exists before placement starts (it reads them at start)
        async with placement(nats_proc.url, cluster, queue_order="fair-share") as svc:
            await eventually(lambda: svc.state.num_nodes == 1, what="placement saw the node")
            # two runs of a recurring job finished (30 and 40 minutes): the predictor learns it
            for i, (start, end) in enumerate([(0, 30), (31, 71)]):
                await rec.pending(f"old{i}", "team-a", 1, start, name=f"train-x-run{i + 1}")
                await rec.finished(f"old{i}", end, started=start, name=f"train-x-run{i + 1}")
            await eventually(lambda: fc.stats().runtimes_learnt == 2, what="two runtimes learnt")
            await eventually(lambda: not svc.state.ledger.pods, what="the old runs left placement's view")
            # the GPU taken, then a third run of the job parks: placement asks and keeps the answer
            await rec.pending("blocker", "team-b", 1, 72, name="notebook")
            await eventually(lambda: _phase(svc, "blocker") == "decided", what="the blocker decided")
            await rec.pending("next", "team-a", 1, 73, name="train-x-run3")
            order = svc.state.planner.order
            assert order is not None
            await eventually(lambda: "next" in order.predicted, what="a prediction for the parked pod")
            assert 1800 < order.predicted["next"] < 2400, order.predicted  # between the two runs, shrunk a little
            assert svc.durations.answered == 1


async def test_without_a_forecasting_service_parked_pods_count_the_default(nats_proc, cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec:
        await _one_gpu_node(rec.nc, cluster)
        async with placement(nats_proc.url, cluster, queue_order="fair-share", duration_default_s=900.0) as svc:
            await eventually(lambda: svc.state.num_nodes == 1, what="placement saw the node")
            await rec.pending("a", "t", 1, 0)
            await rec.pending("b", "t", 1, 1)
            await eventually(lambda: _phase(svc, "b") == "parked", what="b parked")
            await eventually(lambda: not svc.durations.active, what="no responders noticed")
            assert svc.state.planner.order is not None and svc.state.planner.order.predicted == {}
            assert svc.durations.answered == 0


def _phase(svc: object, uid: str) -> str:
    entry = svc.state.ledger.pods.get(uid)  # type: ignore[attr-defined]  # svc: the running service, typed loosely here
    return "" if entry is None else entry.phase.value
