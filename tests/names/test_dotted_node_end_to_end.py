"""A node named the way Kubernetes names nodes on EC2 (``ip-10-0-1-2.ec2.internal``), in a cluster with dots
in its name, works end to end: the real telemetry agent reads the node's simulated GPUs and publishes
their inventory and samples; the real forecasting, health-scoring and placement services, in this process
against the embedded NATS and PostgreSQL, give one of its GPUs a forecast, a health score and a placement
decision. Every subject carries the node and the cluster as one token each, which decode back to the names."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from service_runner import eventually, in_process, placement, quiet_settings, streams_ready

from gpuaware import bus
from gpuaware.gpu import FleetNode, FleetSpec, SimulatedFleet
from gpuaware.schemas import (
    GPU_SCORED,
    GPU_UTIL_PREDICTED,
    PLACEMENT_DECIDED,
    GpuScored,
    GpuUtilPredicted,
    PlacementDecided,
    PodPending,
    name_from_token,
)
from gpuaware.services.forecasting.handlers import mounter as forecasting_mounter
from gpuaware.services.forecasting.settings import ForecastingSettings
from gpuaware.services.health_scoring.handlers import mounter as health_mounter
from gpuaware.services.health_scoring.settings import HealthScoringSettings
from gpuaware.services.telemetry.agent import Agent
from gpuaware.services.telemetry.settings import AgentSettings

pytestmark = pytest.mark.timeout(180)

NODE = "ip-10-0-1-2.ec2.internal"
CLUSTER = "prod.eu-west-1"
SCALE = 600.0
"""forecasting on a twin's clock: a window per 0.1 s of samples, so forecasts come within a second"""
PENDING = bus.event_channel(PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")


class Heard:
    """Every message of one subject family for the cluster, with the names its routing tokens decode to."""

    def __init__(self, typ: type) -> None:
        self.typ = typ
        self.events: list[Any] = []
        self.routed: set[tuple[str, ...]] = set()

    async def on(self, msg: Any) -> None:
        ev = msgspec.json.decode(msg.data, type=self.typ)
        if ev.cluster == CLUSTER:
            self.events.append(ev)
            self.routed.add(tuple(name_from_token(t) for t in msg.subject.split(".")[4:]))


@contextlib.asynccontextmanager
async def agent_for(nc: Any, fleet: SimulatedFleet) -> AsyncIterator[Agent]:
    """The telemetry agent's own code for the node (its settings cannot name a simulated node exactly)."""
    settings = quiet_settings(AgentSettings, backend="simulated", cluster=CLUSTER, fixed_rate=True,
                              allocations="none")
    agent = Agent(settings, nc.jetstream(), {NODE: fleet.node(NODE)}, fleet=fleet, instance="a1")
    await agent.start()  # announces the node's inventory
    try:
        yield agent
    finally:
        await agent.stop()


async def test_a_dotted_node_gets_a_forecast_a_health_score_and_a_placement(nats_proc, fresh_database_url: str) -> None:
    url, db = nats_proc.url, fresh_database_url
    fleet = SimulatedFleet(FleetSpec(nodes=(FleetNode(NODE, "A100-80GB", 2),), seed=1, occupancy=1.0,
                                     traces="synthetic", cluster=CLUSTER))
    forecasting = quiet_settings(ForecastingSettings, nats_url=url, database_url=db, cluster=CLUSTER,
                                 instance_id="f1", time_scale=SCALE, reload_s=60.0)
    health = quiet_settings(HealthScoringSettings, nats_url=url, database_url=db, cluster=CLUSTER, instance_id="h1",
                            checkpoint_s=0.2, tick_s=0.2, poll_s=0.2, inventory_wait_s=2.0, ack_wait_s=5.0)
    forecasts, scores, decisions = Heard(GpuUtilPredicted), Heard(GpuScored), Heard(PlacementDecided)
    async with streams_ready(url, name="test") as nc:
        for subject, heard in ((f"{GPU_UTIL_PREDICTED}.>", forecasts), (f"{GPU_SCORED}.>", scores),
                               (PLACEMENT_DECIDED, decisions), (f"{PLACEMENT_DECIDED}.>", decisions)):
            await nc.subscribe(subject, cb=heard.on)
        # the agent announces the inventory first: placement leads once it knows a node
        async with in_process(forecasting, forecasting_mounter, what="forecasting") as forecaster, \
                in_process(health, health_mounter, what="health-scoring"), agent_for(nc, fleet) as agent, \
                placement(url, CLUSTER):
            gpus = [g.uuid for g in fleet.node(NODE).inventory().gpus]
            for _ in range(8):  # four windows of the GPUs' minutes, 0.25 s of samples apart
                await agent.tick(time.time())
                await asyncio.sleep(0.25)
            await eventually(lambda: any(ev.node == NODE for ev in forecasts.events), timeout=30,
                             what="a forecast for the dotted node")
            await eventually(lambda: any(ev.node == NODE for ev in scores.events), timeout=30,
                             what="a health score for the dotted node")
            await bus.publish(nc.jetstream(), PENDING, PodPending(
                source="binder/test", emitted_at=time.time(), cluster=CLUSTER, pod_uid="pod-1", pod_name="train-0",
                namespace="team-a", submitted_at=time.time(), num_gpu=1, gpu_milli=500, gpu_memory_mib=8192,
                cpu_milli=1000, memory_mib=4096))
            await eventually(lambda: decisions.events, timeout=30, what="a placement decision")
            assert forecaster.stats().window_failures == 0 and forecaster.stats().publish_failures == 0
        forecast = next(ev for ev in forecasts.events if ev.node == NODE)
        assert {g.gpu_uuid for g in forecast.gpus} <= set(gpus) and forecast.gpus
        assert (CLUSTER, NODE) in forecasts.routed
        score = next(ev for ev in scores.events if ev.node == NODE)
        assert score.gpu_uuid in gpus and 0 <= score.score <= 100
        assert (CLUSTER, NODE) in scores.routed
        decision = decisions.events[0]
        assert decision.pod_uid == "pod-1" and decision.node == NODE and decision.slices[0].gpu_uuid in gpus
