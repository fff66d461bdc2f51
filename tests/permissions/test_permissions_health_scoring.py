"""Health-scoring under least privilege: the real service, logged in as ``health-scoring`` on an
auth-enabled server whose streams an admin provisioned, consumes its cluster's samples (durable),
follows inventories, publishes a state change and alerts, answers health.cordon and health.stats;
its user may not sample, decide or administer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from permissions_helpers import assert_publish_refused, assert_stream_admin_refused
from service_runner import eventually

from gpuaware import bus
from gpuaware.runtime import run_service
from gpuaware.schemas import (
    ALERT_RAISED,
    GPU_SAMPLED,
    GPU_STATE_CHANGED,
    HEALTH_CORDON,
    HEALTH_STATS,
    PLACEMENT_DECIDED,
    AlertRaised,
    CordonReply,
    CordonRequest,
    GpuInfo,
    GpuSample,
    GpuSampled,
    GpuStateChanged,
    HealthState,
    HealthStats,
    NodeInventory,
    StatsRequest,
)
from gpuaware.schemas.permissions import ADMIN, HEALTH_SCORING, TELEMETRY_AGENT
from gpuaware.services.health_scoring.handlers import mount
from gpuaware.services.health_scoring.settings import HealthScoringSettings

CLUSTER = "default"  # the devstack renders the permissions for the default cluster


def _inventory(node: str) -> NodeInventory:
    return NodeInventory(source="test", emitted_at=time.time(), cluster=CLUSTER, node=node, gpus=(
        GpuInfo(uuid=f"GPU-{node}-0", index=0, model="A100", memory_mib=81920, pci_bus_id="00000000:07:00.0"),))


def _sample(node: str, at: float, xid: int) -> GpuSampled:
    return GpuSampled.from_samples([GpuSample(gpu_uuid=f"GPU-{node}-0", gpu_index=0, temperature_c=50.0,
                                              xid_last=xid, ecc_uncorrected_aggregate=0)],
                                   source="agent", emitted_at=time.time(), cluster=CLUSTER, node=node,
                                   sampled_at=at, interval_s=1.0)


async def test_health_scoring_runs_as_its_own_user(provisioned: Any, connect_as: Any, fresh_database_url: str) -> None:
    creds = provisioned.credentials()
    user, password = creds[HEALTH_SCORING]
    node = f"hs{int(time.time() * 1000) % 10**8}"
    settings = msgspec.convert({
        "nats_url": provisioned.url, "nats_user": user, "nats_password": password, "database_url": fresh_database_url,
        "cluster": CLUSTER, "instance_id": "auth1", "log_format": "console", "log_level": "WARNING",
        "checkpoint_s": 0.2, "tick_s": 0.2, "poll_s": 0.2, "inventory_wait_s": 1.0}, HealthScoringSettings)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(settings, version="0.0.1", mount=mount, stop=stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        async with connect_as(TELEMETRY_AGENT) as agent, connect_as(ADMIN) as admin:
            changes: list[GpuStateChanged] = []
            raised: list[AlertRaised] = []
            await admin.subscribe(f"{GPU_STATE_CHANGED}.>", cb=_collector(changes, GpuStateChanged))
            await admin.subscribe(f"{ALERT_RAISED}.>", cb=_collector(raised, AlertRaised))
            await admin.flush()
            js = agent.jetstream()
            await bus.publish(js, bus.event_channel(NodeInventory).at(CLUSTER, node), _inventory(node))
            sampled = bus.event_channel(GpuSampled).at(CLUSTER, node)
            t0 = time.time() - 60
            await bus.publish(js, sampled, _sample(node, t0, 0))
            await bus.publish(js, sampled, _sample(node, t0 + 1, 79))
            gpu = f"GPU-{node}-0"
            await eventually(lambda: any(c.gpu_uuid == gpu and c.current is HealthState.QUARANTINED for c in changes),
                         what="the quarantine published")
            await eventually(lambda: any(a.gpu_uuid == gpu and a.rule == "gpu_xid_critical" for a in raised),
                         what="the alert published")
            reply = await bus.request(admin, HEALTH_CORDON, CordonRequest(
                source="ops", emitted_at=time.time(), gpu_uuid=gpu, reason="RMA", by="alice"), CordonReply,
                timeout=5.0)
            assert reply.by == "alice" and reply.current is HealthState.QUARANTINED
            stats = await bus.request(admin, HEALTH_STATS, StatsRequest(), HealthStats,
                                      timeout=5.0)
            assert stats.states["quarantined"] >= 1 and stats.checkpoints > 0
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def _collector(into: list[Any], typ: Any) -> Any:
    async def on(msg: Any) -> None:
        into.append(msgspec.json.decode(msg.data, type=typ))
    return on


async def test_health_scoring_may_not_sample_decide_or_administer(connect_as: Any) -> None:
    async with connect_as(HEALTH_SCORING) as nc:
        for subject in (f"{GPU_SAMPLED}.{CLUSTER}.n1", PLACEMENT_DECIDED):
            await assert_publish_refused(nc, subject)
        await assert_stream_admin_refused(nc)
