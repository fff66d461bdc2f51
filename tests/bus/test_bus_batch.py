"""Batch consumers (`bus.subscribe_batched`) against a real nats-server: one handler call per pulled
batch, with the per-message API's guarantees member by member — a bad member is dead-lettered or
retried alone, the good ones are acknowledged once and never redelivered because of it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest
from bus_helpers import Names, Sample, own_stream
from service_runner import eventually
from test_bus_consume import collect_dead_letters

from gpuaware import bus
from gpuaware.schemas.deadletter import HEADER_REASON


async def publish_samples(js: bus.JetStream, channel: bus.Channel[Sample], n: int, prefix: str = "s") -> list[Sample]:
    sent = [Sample(id=f"{prefix}{i}", gpu=f"gpu-{i}", util=float(i % 100)) for i in range(n)]
    for s in sent:
        await bus.publish(js, channel, s)
    return sent


async def test_a_batch_with_one_undecodable_member_dead_letters_that_member_only(
        nc, js, stream, channel, names: Names) -> None:
    dead = await collect_dead_letters(nc, names.subject)
    good = await publish_samples(js, channel, 3, "a")
    await js.publish(names.subject, b'{"id": "bad", "gpu": "g", "util": 150.0}', headers={"Nats-Msg-Id": "bad"})
    good += await publish_samples(js, channel, 3, "b")
    calls: list[list[str]] = []
    attempts: list[int] = []

    async def handle(values: Sequence[Sample], deliveries: Sequence[bus.Delivery]) -> None:
        calls.append([v.id for v in values])
        attempts.extend(d.attempt for d in deliveries)

    async with await bus.subscribe_batched(js, channel, names.durable(), handle, batch=16, ack_wait=2.0) as c:
        await eventually(lambda: c.stats.processed == 6 and len(dead) == 1, what="6 handled, 1 dead")
        await asyncio.sleep(0.5)  # a redelivery would have come by now (ack_wait 2 s is not the bound: naks are)
        info = await js.consumer_info(stream, names.durable())
        stats = c.stats

    assert [i for call in calls for i in call] == [s.id for s in good]  # in order, each once
    assert len(calls) <= 2  # handled as batches, not one call per message
    assert set(attempts) == {1}  # none redelivered
    assert "<= 100" in dead[0].headers[HEADER_REASON] and dead[0].headers[HEADER_REASON].startswith("decode error")
    assert (stats.dead_lettered, stats.decode_errors, stats.failed, stats.received) == (1, 1, 0, 7)
    assert info.num_ack_pending == 0 and info.num_pending == 0 and info.num_redelivered == 0


async def test_members_the_handler_names_meet_their_own_fate(nc, js, stream, channel, names: Names) -> None:
    dead = await collect_dead_letters(nc, names.subject)
    await publish_samples(js, channel, 5)
    seen: list[tuple[str, int]] = []

    async def handle(values: Sequence[Sample], deliveries: Sequence[bus.Delivery]) -> Mapping[int, Exception]:
        seen.extend((v.id, d.attempt) for v, d in zip(values, deliveries, strict=True))
        out: dict[int, Exception] = {}
        for i, (v, d) in enumerate(zip(values, deliveries, strict=True)):
            if v.id == "s1":
                out[i] = bus.PermanentError("s1 can never be stored")
            elif v.id == "s3" and d.attempt == 1:
                out[i] = bus.TransientError("s3: try again", delay=0.05)
        return out

    async with await bus.subscribe_batched(js, channel, names.durable(), handle, batch=16, ack_wait=5.0) as c:
        await eventually(lambda: c.stats.processed == 4 and len(dead) == 1, what="4 handled, 1 dead")
        info = await js.consumer_info(stream, names.durable())

    assert sorted(seen) == sorted([("s0", 1), ("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1), ("s3", 2)])
    assert dead[0].headers[HEADER_REASON] == "permanent: s1 can never be stored"
    assert info.num_ack_pending == 0 and info.num_pending == 0


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_a_handler_that_raises_gives_the_whole_batch_another_try(
        js, stream, channel, names: Names, concurrency: int) -> None:
    await publish_samples(js, channel, 40)
    handled: dict[str, int] = {}
    failed_once = False

    async def handle(values: Sequence[Sample], deliveries: Sequence[bus.Delivery]) -> None:
        nonlocal failed_once
        if not failed_once:
            failed_once = True
            raise bus.TransientError("database away", delay=0.05)
        for v in values:
            handled[v.id] = handled.get(v.id, 0) + 1

    async with await bus.subscribe_batched(js, channel, names.durable(), handle, batch=8, ack_wait=5.0,
                                           concurrency=concurrency) as c:
        await eventually(lambda: len(handled) == 40, what="every sample handled")
        await eventually(lambda: c.stats.processed == 40, what="every sample acked")
        info = await js.consumer_info(stream, names.durable())

    assert all(n == 1 for n in handled.values())  # each handled successfully exactly once
    assert c.stats.retried >= 1 and c.stats.dead_lettered == 0
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_the_deduper_skips_members_handled_before(js, names: Names) -> None:
    async with own_stream(js, names, 0.5):
        channel = bus.Channel(names.subject, Sample, id_of=lambda s: s.id)
        deduper = bus.Deduper(capacity=100)
        got: list[str] = []

        async def handle(values: Sequence[Sample], _d: Sequence[bus.Delivery]) -> None:
            got.extend(v.id for v in values)

        await publish_samples(js, channel, 2)
        async with await bus.subscribe_batched(js, channel, names.durable(), handle, deduper=deduper) as c:
            await eventually(lambda: c.stats.processed == 2, what="2 handled")
            await asyncio.sleep(0.6)  # past the server's duplicate window
            await publish_samples(js, channel, 2)  # the same ids again: stored, but already handled
            await eventually(lambda: c.stats.duplicates == 2, what="2 duplicates skipped")
        assert got == ["s0", "s1"]
