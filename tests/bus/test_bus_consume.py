"""Publish -> durable consume against a real nats-server: acks, redelivery, de-duplication,
retries and dead letters decided by the handler's exceptions."""

from __future__ import annotations

import asyncio
import importlib
import time

import msgspec
import pytest
from bus_helpers import Handled, Names, Sample, own_stream
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas.deadletter import (
    DEAD_LETTER_STREAM,
    HEADER_ATTEMPTS,
    HEADER_CONSUMER,
    HEADER_ORIGINAL_SUBJECT,
    HEADER_REASON,
    dead_letter_subject,
)


async def collect_dead_letters(nc: bus.Client, subject: str) -> list:
    got: list = []

    async def cb(msg) -> None:
        got.append(msg)

    await nc.subscribe(dead_letter_subject(subject), cb=cb)
    await nc.flush()
    return got


async def test_published_messages_arrive_once_typed_and_acked(js, stream, channel, names: Names) -> None:
    sent = [Sample(id=f"s{i}", gpu=f"gpu-{i}", util=10.0 * i) for i in range(3)]
    for s in sent:
        ack = await bus.publish(js, channel, s)
        assert not ack.duplicate
    got: list[tuple[Sample, bus.Delivery]] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        got.append((msg, ctx))

    async with await bus.subscribe_durable(js, channel, names.durable(), handle, ack_wait=1.0) as consumer:
        await eventually(lambda: consumer.stats.processed == 3, what="3 processed")
        info = await js.consumer_info(stream, names.durable())

    assert [m for m, _ in got] == sent  # typed, in order, each once
    assert all(isinstance(m, Sample) for m, _ in got)
    assert [c.msg_id for _, c in got] == ["s0", "s1", "s2"]  # id_of -> Nats-Msg-Id
    assert [c.attempt for _, c in got] == [1, 1, 1]
    # the server agrees: everything acked, nothing pending or redelivered
    assert info.num_ack_pending == 0 and info.num_pending == 0 and info.num_redelivered == 0
    assert info.ack_floor.stream_seq == 3


async def test_consumer_dying_before_ack_gets_message_redelivered_to_new_instance(
        nats_url: str, js, stream, channel, names: Names) -> None:
    await bus.publish(js, channel, Sample(id="crash-1", gpu="g", util=1.0))

    # instance A: its handler dies mid-message (the task is cancelled, as in a crash) and its
    # connection goes away without acking
    entered = asyncio.Event()

    async def dies(msg: Sample, ctx: bus.Delivery) -> None:
        entered.set()
        raise asyncio.CancelledError

    nc_a = await bus.connect(nats_url, name="instance-a", initial_timeout=5)
    consumer_a = await bus.subscribe_durable(nc_a.jetstream(), channel, names.durable(), dies, ack_wait=1.0)
    await asyncio.wait_for(entered.wait(), 5)
    await eventually(lambda: not consumer_a.running, what="instance A dead")
    await nc_a.close()

    # instance B on the same durable receives it after ack_wait, flagged as a redelivery
    got: list[tuple[Sample, bus.Delivery]] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        got.append((msg, ctx))

    async with bus.connected(nats_url, name="instance-b", initial_timeout=5) as nc_b:
        consumer_b = await bus.subscribe_durable(nc_b.jetstream(), channel, names.durable(), handle, ack_wait=1.0)
        async with consumer_b:
            await eventually(lambda: consumer_b.stats.processed == 1, timeout=5, what="redelivery")
    (msg, ctx), = got
    assert msg.id == "crash-1"
    assert ctx.attempt == 2 and ctx.redelivered


async def test_same_msg_id_is_stored_once(js, stream, channel, names: Names) -> None:
    s = Sample(id="dup", gpu="g", util=5.0)
    first = await bus.publish(js, channel, s)
    again = await bus.publish(js, channel, s)  # a producer retrying after a lost ack
    explicit = await bus.publish(js, channel, Sample(id="other", gpu="g", util=6.0), msg_id="dup")
    assert not first.duplicate
    assert again.duplicate and explicit.duplicate
    info = await js.stream_info(stream)
    assert info.state.messages == 1

    # without id_of the id is a content hash: identical content dedupes, different content does not
    hashed = bus.Channel(names.subject, Sample)
    a = await bus.publish(js, hashed, Sample(id="h", gpu="g", util=1.0))
    b = await bus.publish(js, hashed, Sample(id="h", gpu="g", util=1.0))
    c = await bus.publish(js, hashed, Sample(id="h", gpu="g", util=2.0))
    assert (a.duplicate, b.duplicate, c.duplicate) == (False, True, False)
    assert (await js.stream_info(stream)).state.messages == 3


async def test_a_channel_without_dedupe_sends_no_id_and_no_header(js, stream, names: Names) -> None:
    """High-rate samples: no Nats-Msg-Id (nothing would retry them), so no header at all; identical
    messages are both stored, for the consumer's natural key to dedupe. An explicit id still counts."""
    plain = bus.Channel(names.subject, Sample, dedupe=False)
    assert not plain.at("n1").dedupe
    s = Sample(id="same", gpu="g", util=5.0)
    acks = [await bus.publish(js, plain, s), await (await bus.publish_async(js, plain, s))]
    assert [(a.duplicate, a.msg_id) for a in acks] == [(False, ""), (False, "")]
    assert (await js.stream_info(stream)).state.messages == 2
    named = await bus.publish(js, plain, s, msg_id="given")
    again = await bus.publish(js, plain, s, msg_id="given")
    assert (named.msg_id, named.duplicate, again.duplicate) == ("given", False, True)
    stored = [await js.get_msg(stream, seq) for seq in (1, 2, 3)]
    assert [m.headers for m in stored] == [None, None, {bus.MSG_ID: "given"}]


async def test_publish_async_settles_every_future_a_refusal_no_stream_or_silence_included(
        nc, js, stream, channel, names: Names, monkeypatch) -> None:
    """Stored, refused by the stream (nats-py's own publish_async never settles that one), no stream
    for the subject, and no reply at all: each future settles, and a full pipeline waits for room."""
    from nats.js.errors import APIError, NoStreamResponseError

    publishing = importlib.import_module("gpuaware.bus.publish")  # the module (bus.publish is the function)

    ok = await (await bus.publish_async(js, channel, Sample(id="a", gpu="g", util=1.0)))
    assert (ok.stream, ok.seq, ok.duplicate, ok.msg_id) == (stream, 1, False, "a")
    refused = await bus.publish_async(js, channel, Sample(id="b", gpu="g", util=1.0),
                                      headers={"Nats-Expected-Last-Sequence": "99"})
    with pytest.raises(APIError) as err:
        await asyncio.wait_for(refused, 5)
    assert err.value.code == 400
    nowhere = bus.Channel(f"{names.subject}-nowhere", Sample)
    with pytest.raises(NoStreamResponseError):
        await asyncio.wait_for(await bus.publish_async(js, nowhere, Sample(id="c", gpu="g", util=1.0)), 5)
    # a subject someone listens on but no stream stores: no reply ever comes
    silent = bus.Channel(f"{names.subject}-silent", Sample)
    listener = await nc.subscribe(silent.subject)
    monkeypatch.setattr(publishing._AckInbox, "ack_timeout_s", 0.3)
    monkeypatch.setattr(publishing._AckInbox, "sweep_s", 0.05)
    box = await publishing._ack_inbox(js)
    monkeypatch.setattr(box, "max_pending", 2)
    first = [await bus.publish_async(js, silent, Sample(id=f"s{i}", gpu="g", util=1.0)) for i in range(2)]
    started = time.monotonic()
    third = await bus.publish_async(js, silent, Sample(id="s2", gpu="g", util=1.0))  # waits for room
    assert time.monotonic() - started >= 0.2
    for fut in (*first, third):
        with pytest.raises(TimeoutError, match="no acknowledgement"):
            await asyncio.wait_for(fut, 5)
    assert not box.pending
    assert (await (await bus.publish_async(js, channel, Sample(id="d", gpu="g", util=1.0)))).seq == 2
    await listener.unsubscribe()


async def test_garbage_and_schema_violations_are_dead_lettered_and_consumer_keeps_serving(
        nc, js, stream, channel, names: Names) -> None:
    dead = await collect_dead_letters(nc, names.subject)
    garbage = b"\x00\xffnot json at all"
    violating = b'{"id": "bad", "gpu": "g", "util": 150.0}'  # util must be <= 100
    await js.publish(names.subject, garbage, headers={"Nats-Msg-Id": "garbage"})
    await js.publish(names.subject, violating, headers={"Nats-Msg-Id": "violating"})
    await bus.publish(js, channel, Sample(id="good", gpu="g", util=50.0))
    handled = Handled()
    async with await bus.subscribe_durable(js, channel, names.durable(), handled) as consumer:
        await eventually(lambda: consumer.stats.processed == 1 and len(dead) == 2, what="1 handled, 2 dead")
        stats = consumer.stats

    assert [m.id for m in handled] == ["good"]
    assert (stats.dead_lettered, stats.decode_errors, stats.failed) == (2, 2, 0)
    assert [m.data for m in dead] == [garbage, violating]  # raw bytes intact
    for m in dead:
        assert m.headers[HEADER_REASON].startswith("decode error")
        assert m.headers[HEADER_ORIGINAL_SUBJECT] == names.subject
        assert m.headers[HEADER_CONSUMER] == f"{stream}/{names.durable()}"
        assert m.headers[HEADER_ATTEMPTS] == "1"
    assert "100" in dead[1].headers[HEADER_REASON]  # the validation message says what was wrong
    info = await js.consumer_info(stream, names.durable())
    assert info.num_ack_pending == 0 and info.num_pending == 0  # nothing left to redeliver


@pytest.mark.parametrize("failure", [
    # two failures then success: attempts 1 and 2 nak'd, attempt 3 acked
    bus.TransientError("gpu busy", delay=0.05),
    # an unexpected exception is retried the same way, with the retry policy's backoff
    RuntimeError("bug fixed by the third try"),
])
async def test_failures_are_retried_then_succeed(js, stream, channel, names: Names, failure) -> None:
    await bus.publish(js, channel, Sample(id="flaky", gpu="g", util=1.0))
    attempts: list[int] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise failure

    async with await bus.subscribe_durable(js, channel, names.durable(), handle, max_deliver=5,
                                           retry=bus.RetryPolicy(base=0.05)) as consumer:
        await eventually(lambda: consumer.stats.processed == 1, what="success on the third attempt")
        stats = consumer.stats
    assert attempts == [1, 2, 3]
    assert (stats.failed, stats.retried, stats.dead_lettered) == (2, 2, 0)


async def test_transient_failure_beyond_max_deliver_is_dead_lettered(nc, js, stream, channel, names: Names) -> None:
    dead = await collect_dead_letters(nc, names.subject)
    await bus.publish(js, channel, Sample(id="hopeless", gpu="g", util=1.0))
    attempts: list[int] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        attempts.append(ctx.attempt)
        raise bus.TransientError("still busy", delay=0.05)

    async with await bus.subscribe_durable(js, channel, names.durable(), handle, max_deliver=3) as consumer:
        await eventually(lambda: len(dead) == 1 and consumer.stats.dead_lettered == 1, what="dead letter")
        # terminated, not left to expire: the server holds nothing it could deliver again
        info = await js.consumer_info(stream, names.durable())
        assert info.num_ack_pending == 0 and info.num_pending == 0
        stats = consumer.stats
    assert attempts == [1, 2, 3]
    assert (stats.failed, stats.retried, stats.dead_lettered, stats.processed) == (3, 2, 1, 0)
    (m,) = dead
    assert msgspec.json.decode(m.data, type=Sample).id == "hopeless"
    assert m.headers[HEADER_ATTEMPTS] == "3"
    assert m.headers[HEADER_REASON] == "gave up after 3 attempts: still busy"


async def test_permanent_error_is_dead_lettered_at_once_into_the_dead_letter_stream(
        js, stream, channel, names: Names) -> None:
    await bus.ensure_dead_letter_stream(js)
    attempts: list[int] = []

    async def handle(msg: Sample, ctx: bus.Delivery) -> None:
        attempts.append(ctx.attempt)
        raise bus.PermanentError("unknown GPU model")

    await bus.publish(js, channel, Sample(id="perm", gpu="g", util=1.0))
    async with await bus.subscribe_durable(js, channel, names.durable(), handle, max_deliver=5) as consumer:
        await eventually(lambda: consumer.stats.dead_lettered == 1, what="dead letter")
    assert attempts == [1]
    stored = await js.get_last_msg(DEAD_LETTER_STREAM, dead_letter_subject(names.subject))
    assert msgspec.json.decode(stored.data, type=Sample).id == "perm"
    assert stored.headers[HEADER_REASON] == "permanent: unknown GPU model"
    assert stored.headers[HEADER_ATTEMPTS] == "1"
    # the original is terminated: never redelivered
    info = await js.consumer_info(stream, names.durable())
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_deduper_skips_a_message_handled_before(js, names: Names) -> None:
    # a 0.2 s duplicate window lets the producer's re-send through, as after a long outage
    async with own_stream(js, names, 0.2):
        channel = bus.Channel(names.subject, Sample, id_of=lambda s: s.id)
        await bus.publish(js, channel, Sample(id="bind-pod-1", gpu="g", util=1.0))
        await asyncio.sleep(0.3)
        resent = await bus.publish(js, channel, Sample(id="bind-pod-1", gpu="g", util=1.0))
        assert not resent.duplicate  # the stream stored it twice...
        effects: list[str] = []

        async def handle(msg: Sample, ctx: bus.Delivery) -> None:
            effects.append(msg.id)

        deduper = bus.Deduper(capacity=10)
        async with await bus.subscribe_durable(js, channel, names.durable(), handle, deduper=deduper) as consumer:
            await eventually(lambda: consumer.stats.received == 2, what="both deliveries")
            stats = consumer.stats
        assert effects == ["bind-pod-1"]  # ...but the effect happened once
        assert (stats.processed, stats.duplicates) == (1, 1)


async def test_core_publish_reaches_core_subscribers(nc, names: Names) -> None:
    channel = bus.Channel(f"{names.subject}.core", Sample)
    got: list[Sample] = []

    async def cb(msg) -> None:
        got.append(channel.decode(msg.data))

    await nc.subscribe(channel.subject, cb=cb)
    await bus.publish_core(nc, channel, Sample(id="c", gpu="g", util=3.0))
    await eventually(lambda: len(got) == 1, what="core message")
    assert got == [Sample(id="c", gpu="g", util=3.0)]


async def test_another_version_of_the_subject_is_dead_lettered_with_the_reason_not_left_unread(
        nc, js, names: Names) -> None:
    # a v2 message must not lie in the stream neither consumed nor dead-lettered: the durable of a v1
    # channel filters on every version of its subject, and a foreign version is a dead letter
    family = f"test.{names.token}.pods"
    v1 = bus.Channel(f"{family}.v1", Sample, id_of=lambda s: s.id)
    await bus.ensure_stream(js, bus.SimpleStreamSpec(name=names.stream, subjects=(f"{family}.>",)))
    try:
        dead = await collect_dead_letters(nc, f"{family}.v2")
        await js.publish(f"{family}.v2", b'{"id": "new", "gpu": "g", "util": 1.0}')
        await bus.publish(js, v1, Sample(id="old", gpu="g", util=2.0))
        handled = Handled()
        async with await bus.subscribe_durable(js, v1, names.durable(), handled) as consumer:
            await eventually(lambda: consumer.stats.processed == 1 and len(dead) == 1, what="1 handled, 1 dead")
            info = await js.consumer_info(names.stream, names.durable())
        assert [m.id for m in handled] == ["old"]
        assert dead[0].headers[HEADER_REASON] == (f"decode error: version v2 of {family} is not supported here "
                                                  "(this consumer reads v1)")
        assert info.config.filter_subject == f"{family}.*" and info.num_pending == 0 and info.num_ack_pending == 0
    finally:
        await js.delete_stream(names.stream)


def test_a_channel_filters_on_any_version_and_names_a_foreign_one() -> None:
    ch = bus.Channel("telemetry.gpu.sampled.v1", Sample).at("c1", "node-a")
    assert ch.any_version == "telemetry.gpu.sampled.*.c1.node-a"
    assert ch.foreign_version("telemetry.gpu.sampled.v1.c1.node-a") is None
    assert ch.foreign_version("telemetry.gpu.sampled.v3.c1.node-a") == (
        "version v3 of telemetry.gpu.sampled is not supported here (this consumer reads v1)")
    assert bus.Channel("quota.admit", Sample).any_version == "quota.admit"


def test_only_the_contracts_version_token_is_a_version() -> None:
    # a cluster or node named like a version stays a name: the filter stays on this cluster's subjects
    ch = bus.Channel("telemetry.gpu.sampled.v1", Sample).at("v2", "node-a")
    assert ch.any_version == "telemetry.gpu.sampled.*.v2.node-a"
    assert ch.foreign_version("telemetry.gpu.sampled.v1.v2.node-a") is None


async def test_a_consumer_waiting_on_a_quiet_stream_stops_at_once(js, stream, channel, names: Names) -> None:
    """Its fetch waits up to `poll` for messages; stopping must not wait that out, and a message that
    came meanwhile is handled first."""
    got: list[str] = []

    async def handle(msg: Sample, _d: bus.Delivery) -> None:
        got.append(msg.id)

    consumer = await bus.subscribe_durable(js, channel, names.durable(), handle, poll=30.0)
    await bus.publish(js, channel, Sample(id="one", gpu="g", util=1.0))
    await eventually(lambda: got == ["one"], what="the message handled")
    await eventually(lambda: consumer._puller._waiter is not None, what="a fetch waiting for messages")
    await asyncio.wait_for(consumer.stop(), timeout=10)  # the fetch would wait 30 s
    assert not consumer.running
