"""Health-scoring under least privilege: the real service, logged in as ``health-scoring`` on an
auth-enabled server whose streams an admin provisioned, consumes its cluster's samples (durable),
follows inventories, publishes a state change and alerts, answers health.cordon and health.stats;
its user may not sample, decide or administer. With a leader and a standby running, another user's
``$SRV`` discovery of ``health-scoring`` is answered (one micro service per process: the leader serves
its cordon subject on a plain subscription) and a cordon the standby receives reaches the leader."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest
from permissions_helpers import assert_discoverable, assert_publish_refused, assert_stream_admin_refused
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
    CordonAction,
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
from gpuaware.services.health_scoring.handlers import mounter
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
    stop, ready, standby_ready = asyncio.Event(), asyncio.Event(), asyncio.Event()
    got: list[Any] = []
    task = asyncio.create_task(run_service(settings, version="0.0.1", mount=mounter(got.append), stop=stop,
                                           ready=ready))
    standby_task: asyncio.Task[Any] | None = None
    try:
        await asyncio.wait_for(ready.wait(), 30)
        leader = got[0]
        assert leader.leading
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
            await assert_discoverable(admin, HEALTH_SCORING)
            # a standby answers health.cordon too, relaying it to the leader, and discovery still answers
            standby_task = asyncio.create_task(run_service(
                msgspec.structs.replace(settings, instance_id="auth2"), version="0.0.1", mount=mounter(got.append),
                stop=stop, ready=standby_ready))
            await asyncio.wait_for(standby_ready.wait(), 30)
            standby = got[1]
            assert not standby.leading
            await assert_discoverable(admin, HEALTH_SCORING)
            relayed = await standby.cordon_request(CordonRequest(
                source="ops", emitted_at=time.time(), gpu_uuid=gpu, reason="RMA done", by="bob",
                action=CordonAction.UNCORDON))
            assert (relayed.action, relayed.by) == (CordonAction.UNCORDON, "bob")
            assert standby.relayed == 1 and leader.view.counts["uncordons"] == 1  # applied by the leader
            for _ in range(4):  # over the wire, whichever instance answers: the leader's refusal, its code kept
                with pytest.raises(bus.ServiceError) as err:
                    await bus.request(admin, HEALTH_CORDON, CordonRequest(
                        source="ops", emitted_at=time.time(), gpu_uuid=f"GPU-nope-{node}", reason="x", by="carol"),
                        CordonReply, timeout=10.0)
                assert err.value.code == 404, err.value
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        if standby_task is not None:
            await asyncio.wait_for(standby_task, 30)


def _collector(into: list[Any], typ: Any) -> Any:
    async def on(msg: Any) -> None:
        into.append(msgspec.json.decode(msg.data, type=typ))
    return on


async def test_health_scoring_may_not_sample_decide_or_administer(connect_as: Any) -> None:
    async with connect_as(HEALTH_SCORING) as nc:
        for subject in (f"{GPU_SAMPLED}.{CLUSTER}.n1", PLACEMENT_DECIDED):
            await assert_publish_refused(nc, subject)
        await assert_stream_admin_refused(nc)
