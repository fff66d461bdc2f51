"""Per-service NATS users against a real nats-server: each identity can do what its code does, and
representative subjects outside its permissions are refused.

The flows run the bus's real code paths (JetStream publish with acks, durable and pipelined pull
consumers, ordered followers, the KV leader lease, micro endpoints, dead letters) on the contract's
real subjects and streams; payloads are a stand-in Struct, since permissions are about subjects. A
refused JetStream publish or API call is answered by the server with a permissions violation, so
the client's request times out: that is what the refusal tests assert (plus the server's error).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest
from permissions_helpers import assert_publish_refused, assert_refused, assert_stream_admin_refused
from service_runner import eventually

from gpuaware import bus
from gpuaware.runtime import ServiceSettings, StreamsNotProvisioned, run_service
from gpuaware.runtime.service import declare_stream
from gpuaware.schemas import (
    CHECKPOINT_ACKNOWLEDGED,
    CHECKPOINT_REQUESTED,
    DEAD_LETTER_STREAM,
    GPU_ROLLED_UP,
    GPU_SAMPLED,
    GPU_STATE_CHANGED,
    GPU_UTIL_PREDICTED,
    NODE_INVENTORY,
    PLACEMENT_DECIDED,
    PLACEMENT_EXPLAIN,
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PENDING,
    POD_PREEMPTED,
    POD_UNSCHEDULABLE,
    POD_USAGE_REPORTED,
    QUOTA_ADMIT,
    WORLD_SNAPSHOT,
    dead_letter_subject,
)
from gpuaware.schemas.permissions import (
    ADMIN,
    BINDER_DURABLE,
    BINDER_ID,
    COLLECTOR_DURABLE,
    LEASE_BUCKET,
    OPERATIONAL_ENDPOINTS,
    PLACEMENT_ID,
    TELEMETRY_AGENT,
    TELEMETRY_COLLECTOR,
    placement_durable,
)
from gpuaware.schemas.streams import ALERTS, BINDER, FORECAST, PLACEMENT, QUOTA, TELEMETRY

Connect = Callable[[str], AbstractAsyncContextManager[bus.Client]]  # the `connect_as` fixture

COLLECTOR_STATS = OPERATIONAL_ENDPOINTS[TELEMETRY_COLLECTOR][0]
CLUSTER = "default"  # the devstack renders the permissions for the default cluster


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """A stand-in payload (the bus is schema-agnostic; permissions are about subjects)."""

    text: str = ""


def ch(subject: str, *tokens: str) -> bus.Channel[Note]:
    c = bus.Channel(subject, Note)
    return c.at(*tokens) if tokens else c


def token() -> str:
    return uuid.uuid4().hex[:8]


# -- telemetry agent --------------------------------------------------------------------------------


async def test_agent_publishes_its_telemetry_and_replays_binder_events(connect_as: Connect) -> None:
    node = f"n{token()}"
    async with connect_as(TELEMETRY_AGENT) as nc, connect_as(BINDER_ID) as binder_nc:
        js = nc.jetstream()
        for subject in (GPU_SAMPLED, NODE_INVENTORY, POD_USAGE_REPORTED):
            ack = await bus.publish(js, ch(subject, CLUSTER, node), Note(text=node), timeout=2.0)
            assert ack.stream == TELEMETRY.name and not ack.duplicate
        bound = await bus.publish(binder_nc.jetstream(), ch(POD_BOUND, CLUSTER), Note(text=node), timeout=2.0)
        # what the agent does at start: find the stream, delete its durable, recreate it, replay
        durable = f"telemetry-agent-{node}"
        stream = await js.find_stream_name_by_subject("binder.pod.>")
        assert stream == BINDER.name
        with pytest.raises(Exception, match="not found"):
            await js.delete_consumer(stream, durable)
        seen: list[int] = []

        async def on_event(_msg: Note, d: bus.Delivery) -> None:
            seen.append(d.stream_seq)

        consumer = await bus.subscribe_durable(js, ch("binder.pod.>"), durable, on_event, stream=stream,
                                               deliver_policy="all", batch=256, poll=0.5)
        try:
            await eventually(lambda: bound.seq in seen, what="the binder event replayed")
        finally:
            await consumer.stop()
        assert await js.delete_consumer(stream, durable)


async def test_agent_may_not_decide_bind_or_administer(connect_as: Connect) -> None:
    async with connect_as(TELEMETRY_AGENT) as nc:
        await assert_publish_refused(nc, PLACEMENT_DECIDED)
        await assert_publish_refused(nc, f"{POD_BOUND}.{CLUSTER}")
        await assert_publish_refused(nc, GPU_ROLLED_UP)  # the collector's output
        await assert_stream_admin_refused(nc)


# -- telemetry collector ------------------------------------------------------------------------------


async def test_collector_consumes_telemetry_publishes_rollups_and_answers_stats(connect_as: Connect) -> None:
    node = f"n{token()}"
    async with connect_as(TELEMETRY_COLLECTOR) as nc, connect_as(TELEMETRY_AGENT) as agent, \
            connect_as(ADMIN) as admin:
        js = nc.jetstream()
        got: list[str] = []

        async def on_telemetry(msg: Note, _d: bus.Delivery) -> None:
            got.append(msg.text)

        consumer = await bus.subscribe_durable(js, ch(TELEMETRY.subjects[0]), COLLECTOR_DURABLE, on_telemetry,
                                               poll=0.5)
        service = await bus.add_service(nc, TELEMETRY_COLLECTOR, "0.0.1", [bus.Endpoint(
            name="stats", subject=COLLECTOR_STATS, request_type=Note, handler=_echo)])
        try:
            await bus.publish(agent.jetstream(), ch(GPU_SAMPLED, CLUSTER, node), Note(text=node), timeout=2.0)
            await eventually(lambda: node in got, what="the sample consumed")
            ack = await bus.publish(js, ch(GPU_ROLLED_UP, CLUSTER, node), Note(text="rollup"), timeout=2.0)
            assert ack.stream == TELEMETRY.name
            reply = await bus.request(admin, COLLECTOR_STATS, Note(text="stats?"), Note, timeout=2.0)
            assert reply.text == "stats?"
        finally:
            await service.stop()
            await consumer.stop()
        await assert_publish_refused(nc, f"{POD_BOUND}.{CLUSTER}")
        await assert_publish_refused(nc, f"{GPU_SAMPLED}.{CLUSTER}.{node}")  # only agents sample
        await assert_stream_admin_refused(nc)


async def _echo(req: Note) -> Note:
    return req


# -- placement ------------------------------------------------------------------------------------------


async def test_placement_follows_every_stream_it_reads(connect_as: Connect) -> None:
    node = f"n{token()}"
    async with connect_as(PLACEMENT_ID) as nc, connect_as(ADMIN) as admin, connect_as(TELEMETRY_AGENT) as agent, \
            connect_as(BINDER_ID) as binder_nc:
        js = nc.jetstream()
        cases = [  # (stream, subject, publisher)
            (TELEMETRY, NODE_INVENTORY, agent), (ALERTS, GPU_STATE_CHANGED, admin),
            (FORECAST, GPU_UTIL_PREDICTED, admin), (BINDER, POD_FINISHED, binder_nc),
            (PLACEMENT, PLACEMENT_DECIDED, nc)]
        for stream, subject, publisher in cases:
            seen: list[str] = []
            follower = await bus.follow(js, [ch(subject)], lambda m, _d, seen=seen: seen.append(m.text),
                                        stream=stream.name, with_suffixes=True, name=f"perm-{stream.name}")
            try:
                await asyncio.wait_for(follower.caught_up.wait(), 5)
                await bus.publish(publisher.jetstream(), ch(subject, CLUSTER, node), Note(text=node), timeout=2.0)
                await eventually(lambda seen=seen: node in seen, what=f"{subject} followed")
                assert await follower.sync(timeout=2.0)
            finally:
                await follower.stop()
        assert nc.last_error is None, nc.last_error


async def test_placement_follower_keeps_up_with_a_burst_flow_control(connect_as: Connect) -> None:
    """A burst makes the server ask for flow-control replies ($JS.FC.<stream>.>); refused, it would stall."""
    tag = token()
    async with connect_as(PLACEMENT_ID) as nc:
        js = nc.jetstream()
        body = "x" * 2048
        acks = [await bus.publish_async(js, ch(POD_UNSCHEDULABLE, CLUSTER, tag), Note(text=f"{body}{i}"))
                for i in range(3000)]
        await asyncio.gather(*acks)
        seen: list[int] = []
        follower = await bus.follow(js, [ch(POD_UNSCHEDULABLE, CLUSTER, tag)], lambda _m, d: seen.append(d.stream_seq),
                                    stream=PLACEMENT.name, name="perm-burst")
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 20)
            assert len(seen) == 3000
        finally:
            await follower.stop()
        assert nc.last_error is None, nc.last_error


async def test_placement_consumes_pending_decides_leads_and_explains(connect_as: Connect) -> None:
    uid = token()
    async with connect_as(PLACEMENT_ID) as nc, connect_as(BINDER_ID) as binder_nc, connect_as(ADMIN) as admin:
        js = nc.jetstream()
        # the leader lease: win, release, win again (the second create reads the deleted key back)
        for holder in ("p1", "p2"):
            lease = await bus.LeaderLease(js, LEASE_BUCKET, CLUSTER, holder, ttl_s=3.0).start()
            assert await lease.wait_leading(5.0), f"{holder} never led"
            await lease.stop(release=True)
        # pending pods through the pipelined durable, decisions stored before the ack
        decided: list[bus.PubAck] = []

        async def on_pending(pod: Note, _d: bus.Delivery) -> Any:
            if pod.text != uid:
                return None
            fut = await bus.publish_async(js, ch(PLACEMENT_DECIDED), Note(text=uid))

            async def stored() -> None:
                decided.append(await fut)

            return stored()

        consumer = await bus.subscribe_pipelined(js, ch(POD_PENDING), placement_durable(CLUSTER), on_pending,
                                                 stream=BINDER.name, ack_wait=2.0, poll=0.5)
        try:
            await bus.publish(binder_nc.jetstream(), ch(POD_PENDING), Note(text=uid), timeout=2.0)
            await eventually(lambda: decided, what="a decision stored")
        finally:
            await consumer.stop()
        stored = await bus.read_stored(js, ch(PLACEMENT_DECIDED), decided[0].stream, decided[0].seq)
        assert stored.text == uid
        for subject in (POD_UNSCHEDULABLE, "placement.pod.explained.v1"):
            await bus.publish(js, ch(subject, CLUSTER), Note(text=uid), timeout=2.0)
        # quota.admit may be asked (nobody answers here: no responders, not a refusal)
        with pytest.raises(bus.NoResponders):
            await bus.request(nc, QUOTA_ADMIT, Note(), Note, timeout=2.0)
        # placement.explain as a micro endpoint, asked by another user; $SRV discovery answers too
        service = await bus.add_service(nc, PLACEMENT_ID, "0.0.1", [bus.Endpoint(
            name="explain", subject=PLACEMENT_EXPLAIN, request_type=Note, handler=_echo)])
        try:
            # asked until answered: on a loaded machine the first ask, moments after the endpoint's
            # subscription was flushed, has now and then found no responder yet
            reply = None
            for _ in range(10):
                with contextlib.suppress(bus.NoResponders):
                    reply = await bus.request(admin, PLACEMENT_EXPLAIN, Note(text="why?"), Note, timeout=2.0)
                    break
                await asyncio.sleep(0.2)
            assert reply is not None and reply.text == "why?"
            ping = await admin.request(f"$SRV.PING.{PLACEMENT_ID}", b"", timeout=2.0)
            assert msgspec.json.decode(ping.data)["name"] == PLACEMENT_ID
        finally:
            await service.stop()
        assert nc.last_error is None, nc.last_error


async def test_placement_may_not_bind_publish_pending_or_administer(connect_as: Connect) -> None:
    async with connect_as(PLACEMENT_ID) as nc:
        await assert_publish_refused(nc, POD_BOUND)
        await assert_publish_refused(nc, f"{POD_PENDING}.{CLUSTER}")
        await assert_publish_refused(nc, f"{GPU_SAMPLED}.{CLUSTER}.n1")
        await assert_stream_admin_refused(nc)
        # the binder's durable is not placement's to pull from (INFO and DELETE of any consumer on a
        # followed stream are granted: follow consumers get server-chosen names)
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{PLACEMENT.name}.{BINDER_DURABLE}"
        await assert_refused(nc, next_subject, lambda: nc.request(next_subject, b'{"batch": 1}', timeout=1.0))
        # core subscriptions outside its list are refused too (the server reports the subscription)
        await nc.subscribe(POD_BOUND)
        await nc.flush()
        await eventually(lambda: "subscription" in str(nc.last_error).lower(), what="subscription refused")


# -- binder ----------------------------------------------------------------------------------------------


async def test_binder_consumes_decisions_publishes_outcomes_and_serves_the_world(connect_as: Connect) -> None:
    uid = token()
    async with connect_as(BINDER_ID) as nc, connect_as(PLACEMENT_ID) as placement_nc, \
            connect_as(ADMIN) as admin:
        js = nc.jetstream()
        decisions: list[str] = []
        answers: list[str] = []

        async def on_decision(msg: Note, _d: bus.Delivery) -> None:
            decisions.append(msg.text)

        async def on_answer(msg: Note, _d: bus.Delivery) -> None:
            answers.append(msg.text)

        consumers = [
            await bus.subscribe_durable(js, ch(PLACEMENT_DECIDED), BINDER_DURABLE, on_decision, poll=0.5),
            await bus.subscribe_durable(js, ch(CHECKPOINT_ACKNOWLEDGED), f"{BINDER_DURABLE}-checkpoints", on_answer,
                                        deliver_policy="new", poll=0.5)]
        service = await bus.add_service(nc, BINDER_ID, "0.0.1", [bus.Endpoint(
            name="snapshot", subject=WORLD_SNAPSHOT, request_type=Note, handler=_echo)])
        try:
            await bus.publish(placement_nc.jetstream(), ch(PLACEMENT_DECIDED), Note(text=uid), timeout=2.0)
            await eventually(lambda: uid in decisions, what="the decision consumed")
            for subject in (POD_PENDING, POD_BOUND, POD_BIND_FAILED, POD_PREEMPTED, POD_FINISHED,
                            CHECKPOINT_REQUESTED, CHECKPOINT_ACKNOWLEDGED):
                ack = await bus.publish(js, ch(subject), Note(text=uid), timeout=2.0)
                assert ack.stream == BINDER.name
            await eventually(lambda: uid in answers, what="the checkpoint answer consumed")
            # an undecodable decision is dead-lettered by the binder's own user
            before = (await admin.jetstream().stream_info(DEAD_LETTER_STREAM)).state.messages
            await admin.jetstream().publish(PLACEMENT_DECIDED, b"not json", timeout=2.0)
            await eventually(lambda: consumers[0].stats.dead_lettered >= 1, what="a dead letter")
            last = await admin.jetstream().get_last_msg(DEAD_LETTER_STREAM, dead_letter_subject(PLACEMENT_DECIDED))
            assert last.data == b"not json"
            assert (await admin.jetstream().stream_info(DEAD_LETTER_STREAM)).state.messages == before + 1
            # placement asks the world's snapshot (request/reply across users)
            reply = await bus.request(placement_nc, WORLD_SNAPSHOT, Note(text="world?"), Note, timeout=2.0)
            assert reply.text == "world?"
        finally:
            await service.stop()
            for c in consumers:
                await c.stop()


async def test_binder_may_not_decide_or_touch_placements_consumer(connect_as: Connect) -> None:
    async with connect_as(BINDER_ID) as nc:
        await assert_publish_refused(nc, PLACEMENT_DECIDED)
        await assert_publish_refused(nc, f"{NODE_INVENTORY}.{CLUSTER}.n1")
        await assert_stream_admin_refused(nc)
        js = nc.jetstream(timeout=1.0)
        durable = placement_durable(CLUSTER)
        await assert_refused(nc, f"$JS.API.CONSUMER.DELETE.{BINDER.name}.{durable}",
                             lambda: js.delete_consumer(BINDER.name, durable))


# -- provisioning under least privilege -------------------------------------------------------------------


async def test_service_start_tolerates_provisioned_streams_and_names_a_missing_one(connect_as: Connect) -> None:
    async with connect_as(PLACEMENT_ID) as nc, connect_as(ADMIN) as admin:
        js = nc.jetstream(timeout=1.0)
        await declare_stream(js, TELEMETRY, user=PLACEMENT_ID)  # as provisioned: info only
        # differs in a limit only: the update is refused, the stream is used as it is
        await declare_stream(js, msgspec.structs.replace(TELEMETRY, description="another text"), user=PLACEMENT_ID)
        # differs in what it stores: refused and incompatible, the service stops saying so
        with pytest.raises(StreamsNotProvisioned, match=f"stream {TELEMETRY.name} is incompatible.*storage"):
            await declare_stream(js, msgspec.structs.replace(TELEMETRY, storage="memory"), user=PLACEMENT_ID)
        await admin.jetstream().delete_stream(QUOTA.name)
        try:
            with pytest.raises(StreamsNotProvisioned, match=f"stream {QUOTA.name} does not exist and placement"):
                await declare_stream(js, QUOTA, user=PLACEMENT_ID)
        finally:
            await bus.ensure_stream(admin.jetstream(), QUOTA)


async def test_run_service_connects_as_its_user_and_never_logs_the_password(
        provisioned: Any, capfd: pytest.CaptureFixture[str]) -> None:
    user, password = provisioned.credentials()[PLACEMENT_ID]
    settings = ServiceSettings(service_name=PLACEMENT_ID, nats_url=provisioned.url, nats_user=user,
                               nats_password=password, log_level="DEBUG", log_format="json")
    stop, ready = asyncio.Event(), asyncio.Event()

    async def mount(ctx: Any) -> list[bus.Endpoint[Any, Any]]:
        return [bus.Endpoint(name="explain", subject=PLACEMENT_EXPLAIN, request_type=Note, handler=_echo)]

    task = asyncio.create_task(run_service(settings, version="0.0.1", mount=mount, stop=stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    err = capfd.readouterr().err
    assert '"nats_password": "***"' in err
    assert password not in err


# -- inboxes ------------------------------------------------------------------------------------------


async def test_each_identity_reads_only_its_own_inbox(connect_as: Connect) -> None:
    # a shared _INBOX.> would let any service read the replies meant for another: each user has its
    # own prefix, set by bus.connect, and may subscribe only there
    from gpuaware.schemas.permissions import inbox_prefix

    async with connect_as(TELEMETRY_AGENT) as agent, connect_as(PLACEMENT_ID) as placement:
        assert agent.new_inbox().startswith(inbox_prefix(TELEMETRY_AGENT) + ".")
        spy = f"{inbox_prefix(PLACEMENT_ID)}.>"
        await agent.subscribe(spy)
        with contextlib.suppress(Exception):
            await agent.flush(timeout=2)
        await eventually(lambda: agent.last_error is not None, what="the server's refusal")
        text = str(agent.last_error).lower()
        assert "permissions violation" in text and spy.lower() in text, text
        # its own inbox works: a JetStream API request (reply on the agent's inbox) is answered
        info = await placement.jetstream().stream_info(BINDER.name)
        assert info.config.name == BINDER.name
