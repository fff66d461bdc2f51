"""The recorder under least privilege: the real service, logged in as ``recorder`` on an auth-enabled server
whose streams an admin provisioned, stores the loop's events the binder and placement publish under their
own users and dead-letters one it cannot read; its user may not publish a loop event, take another
service's durable, or administer streams."""

from __future__ import annotations

from typing import Any

import psycopg
from permissions_helpers import assert_publish_refused, assert_refused, assert_stream_admin_refused
from service_runner import eventually, in_process, quiet_settings

from gpuaware import bus
from gpuaware.schemas import (
    BINDER,
    PLACEMENT_DECIDED,
    POD_BOUND,
    POD_PENDING,
    PlacementDecided,
    PodPending,
    recorder_durable,
)
from gpuaware.schemas.permissions import ADMIN, BINDER_ID, PLACEMENT_ID, RECORDER_ID, placement_durable
from gpuaware.services.recorder.handlers import mounter
from gpuaware.services.recorder.settings import RecorderSettings

CLUSTER = "default"  # the devstack renders the permissions for the default cluster
T = 1_767_225_600.0


def rows(url: str, pod: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return sorted(s for (s,) in conn.execute("SELECT subject FROM placement_events WHERE pod_uid = %s",
                                                 (pod,)).fetchall())


async def test_the_recorder_stores_the_loop_as_its_own_user(provisioned: Any, connect_as: Any,
                                                            fresh_database_url: str) -> None:
    user, password = provisioned.credentials()[RECORDER_ID]
    settings = quiet_settings(RecorderSettings, nats_url=provisioned.url, nats_user=user, nats_password=password,
                              database_url=fresh_database_url, cluster=CLUSTER, instance_id="auth1")
    pod = "rec-auth-pod"
    async with connect_as(ADMIN) as admin, connect_as(BINDER_ID) as binder, connect_as(PLACEMENT_ID) as placement, \
            in_process(settings, mounter, what="the recorder") as service:
        letters: list[Any] = []

        async def keep(msg: Any) -> None:
            letters.append(msg)

        await admin.subscribe("deadletter.>", cb=keep)
        await admin.flush()
        await bus.publish(binder.jetstream(), bus.event_channel(PodPending), PodPending(
            source="binder/t", emitted_at=T, cluster=CLUSTER, pod_uid=pod, pod_name=pod, namespace="ns",
            submitted_at=T, num_gpu=1), msg_id=f"{CLUSTER}/pending/{pod}/0")
        await bus.publish(placement.jetstream(), bus.event_channel(PlacementDecided), PlacementDecided(
            source="placement/t", emitted_at=T, cluster=CLUSTER, decision_id=f"{pod}/0", pod_uid=pod, pod_name=pod,
            namespace="ns", node="n1", slices=(), policy="GpuAware", score=50.0, decided_at=T))
        await binder.jetstream().publish(POD_BOUND, b"{not json")  # the recorder dead-letters it as itself
        await eventually(lambda: rows(fresh_database_url, pod) == [POD_PENDING, PLACEMENT_DECIDED], timeout=20,
                         what="both events stored")
        await eventually(lambda: len(letters) == 1, timeout=20, what="the dead letter")
        assert letters[0].subject == f"deadletter.{POD_BOUND}" and service.refused == 0


async def test_the_recorder_may_not_forge_events_take_other_durables_or_administer(connect_as: Any) -> None:
    async with connect_as(RECORDER_ID) as nc:
        for subject in (f"{POD_BOUND}.{CLUSTER}.n1", PLACEMENT_DECIDED, POD_PENDING):
            await assert_publish_refused(nc, subject)
        js = nc.jetstream(timeout=1.0)
        durable = placement_durable(CLUSTER)  # placement's pending pods are not the recorder's to pull
        await assert_refused(nc, f"$JS.API.CONSUMER.MSG.NEXT.{BINDER.name}.{durable}",
                             lambda: nc.request(f"$JS.API.CONSUMER.MSG.NEXT.{BINDER.name}.{durable}", b"{}",
                                                timeout=1.0))
        await assert_refused(nc, f"$JS.API.CONSUMER.DELETE.{BINDER.name}.{recorder_durable(CLUSTER)}",
                             lambda: js.delete_consumer(BINDER.name, recorder_durable(CLUSTER)))
        await assert_stream_admin_refused(nc)
