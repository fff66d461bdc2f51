"""ensure_stream / ensure_consumer converge the server to the spec, idempotently."""

from __future__ import annotations

import pytest
from bus_helpers import Names

from gpuaware import bus
from gpuaware.bus.jetstream import consumer_diff, stream_config, stream_diff
from gpuaware.schemas import STREAMS


async def test_ensure_stream_creates_updates_and_refuses_impossible_changes(js, names: Names) -> None:
    spec = bus.SimpleStreamSpec(name=names.stream, subjects=(f"{names.subject}.>",), max_msgs=100,
                                duplicate_window_s=30, storage="memory")
    try:
        created = await bus.ensure_stream(js, spec)
        again = await bus.ensure_stream(js, spec)
        assert again.created == created.created and again.config.max_msgs == 100
        assert stream_diff(stream_config(spec), again.config) == {}  # the server matches: no update
        grown = await bus.ensure_stream(js, bus.SimpleStreamSpec(
            name=names.stream, subjects=(f"{names.subject}.>",), max_msgs=1000, max_age_s=3600,
            duplicate_window_s=30, storage="memory"))
        assert (grown.config.max_msgs, grown.config.max_age) == (1000, 3600.0)
        with pytest.raises(bus.StreamConfigError, match="storage"):
            await bus.ensure_stream(js, bus.SimpleStreamSpec(
                name=names.stream, subjects=(f"{names.subject}.>",), storage="file"))
    finally:
        await js.delete_stream(names.stream)


async def test_ensure_consumer_creates_then_updates(js, stream: str, names: Names) -> None:
    spec = bus.ConsumerSpec(durable=names.durable(), filter_subject=names.subject, ack_wait=5, max_deliver=3)
    info = await bus.ensure_consumer(js, stream, spec)
    assert (info.config.ack_wait, info.config.max_deliver) == (5.0, 3)
    assert info.config.ack_policy == "explicit"
    assert consumer_diff(spec.config(), info.config) == {}  # so a second ensure is a no-op
    updated = await bus.ensure_consumer(js, stream, bus.ConsumerSpec(
        durable=names.durable(), filter_subject=names.subject, ack_wait=2, max_deliver=4, backoff=(0.5, 1.0)))
    assert updated.config.max_deliver == 4 and updated.config.backoff == [0.5, 1.0]
    assert (await js.consumer_info(stream, names.durable())).config.max_deliver == 4


async def test_ensure_stream_takes_the_contracts_stream_spec(js, names: Names) -> None:
    import msgspec

    from gpuaware.schemas.streams import TELEMETRY

    spec = msgspec.structs.replace(TELEMETRY, name=names.stream, subjects=(f"{names.subject}.>",),
                                   storage="memory")
    try:
        info = await bus.ensure_stream(js, spec)
        c = info.config
        assert (c.max_age, c.max_bytes, c.duplicate_window) == (TELEMETRY.max_age_s, TELEMETRY.max_bytes,
                                                                TELEMETRY.duplicate_window_s)
        assert c.description == TELEMETRY.description
        assert stream_diff(stream_config(spec), (await bus.ensure_stream(js, spec)).config) == {}
    finally:
        await js.delete_stream(names.stream)


def test_every_duplicate_window_outlasts_a_retried_publish() -> None:
    # a handler that timed out publishing is retried at most RetryPolicy.cap later: the retry must
    # still find its first copy in the window, or the stream stores the event twice
    cap = bus.RetryPolicy().cap
    for spec in STREAMS:
        window = spec.duplicate_window_s or 120.0  # 0 = the server's default, two minutes
        assert window >= cap, f"{spec.name}: duplicate window {window} s < the retry cap {cap} s"
