"""Quota under least privilege: the real service, logged in as ``quota`` on an auth-enabled server whose
streams an admin provisioned, follows the binder's pod events, answers quota.admit and publishes its
usage report; its user may not bind, decide or administer. With a leader and a standby running, another
user's ``$SRV`` discovery of ``quota`` is answered (one micro service per process: the leader serves its
relay subject on a plain subscription) and a standby's relay reaches the leader."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from permissions_helpers import assert_discoverable, assert_publish_refused, assert_stream_admin_refused
from service_runner import eventually

from gpuaware import bus
from gpuaware.runtime import run_service
from gpuaware.schemas import (
    PLACEMENT_DECIDED,
    POD_BOUND,
    QUOTA_ADMIT,
    QUOTA_USAGE_REPORTED,
    AdmitReply,
    AdmitRequest,
    GpuSlice,
    PodBound,
    PodPending,
    QuotaUsageReported,
)
from gpuaware.schemas.permissions import ADMIN, BINDER_ID, PLACEMENT_ID, QUOTA_ID
from gpuaware.services.quota.handlers import mounter
from gpuaware.services.quota.settings import QuotaSettings

CLUSTER = "default"  # the devstack renders the permissions for the default cluster


async def test_quota_runs_as_its_own_user(provisioned: Any, connect_as: Any, fresh_database_url: str) -> None:
    user, password = provisioned.credentials()[QUOTA_ID]
    pod = f"qp{int(time.time() * 1000) % 10**8}"
    settings = msgspec.convert({
        "nats_url": provisioned.url, "nats_user": user, "nats_password": password, "database_url": fresh_database_url,
        "cluster": CLUSTER, "instance_id": "auth1", "log_format": "console", "log_level": "WARNING",
        "report_interval_s": 0.2}, QuotaSettings)
    got: list[Any] = []
    stop, ready, standby_ready = asyncio.Event(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(settings, version="0.0.1", mount=mounter(got.append), stop=stop,
                                           ready=ready))
    standby_task: asyncio.Task[Any] | None = None
    try:
        await asyncio.wait_for(ready.wait(), 30)
        service = got[0]
        async with connect_as(BINDER_ID) as binder, connect_as(PLACEMENT_ID) as placement, \
                connect_as(ADMIN) as admin:
            reports: list[QuotaUsageReported] = []

            async def on(msg: Any) -> None:
                reports.append(msgspec.json.decode(msg.data, type=QuotaUsageReported))

            await admin.subscribe(f"{QUOTA_USAGE_REPORTED}.>", cb=on)
            await admin.flush()
            await bus.publish(binder.jetstream(), bus.event_channel(PodBound).at(CLUSTER, "n1"), PodBound(
                source="binder/t", emitted_at=time.time(), cluster=CLUSTER, pod_uid=pod, pod_name=pod, namespace="ns",
                node="n1", slices=(GpuSlice(gpu_uuid="GPU-1", gpu_index=0, gpu_milli=1000, memory_mib=8192),),
                bound_at=time.time(), queue="team-a"))
            await eventually(lambda: service.view.counts["bound"] >= 1, what="the bound event followed")
            req = AdmitRequest(source="placement/t", emitted_at=time.time(), cluster=CLUSTER, node="n1", pod=PodPending(
                source="binder/t", emitted_at=time.time(), cluster=CLUSTER, pod_uid=f"{pod}-2", pod_name="p2",
                namespace="ns", submitted_at=time.time(), num_gpu=1, queue="team-a"))
            reply = await bus.request(placement, QUOTA_ADMIT, req, AdmitReply, timeout=5.0)
            assert reply.admitted and reply.queue == "team-a"
            assert service.leading
            await assert_discoverable(admin, QUOTA_ID)
            # a standby: discovery still answered, and what it relays the leader decides
            standby_task = asyncio.create_task(run_service(
                msgspec.structs.replace(settings, instance_id="auth2"), version="0.0.1",
                mount=mounter(got.append), stop=stop, ready=standby_ready))
            await asyncio.wait_for(standby_ready.wait(), 30)
            standby = got[1]
            assert not standby.leading
            await assert_discoverable(admin, QUOTA_ID)
            again = await standby.admit(msgspec.structs.replace(req, pod=msgspec.structs.replace(
                req.pod, pod_uid=f"{pod}-3", pod_name="p3")))
            assert again.admitted and standby.relayed == 1 and not standby.answered
            await eventually(lambda: any(q.queue == "team-a" and q.used.gpu_milli >= 1000
                                     for r in reports for q in r.queues), what="a usage report")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        if standby_task is not None:
            await asyncio.wait_for(standby_task, 30)


async def test_quota_may_not_bind_decide_or_administer(connect_as: Any) -> None:
    async with connect_as(QUOTA_ID) as nc:
        for subject in (f"{POD_BOUND}.{CLUSTER}.n1", PLACEMENT_DECIDED):
            await assert_publish_refused(nc, subject)
        await assert_stream_admin_refused(nc)
