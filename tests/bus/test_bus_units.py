"""Pure parts of the bus, table-driven: backoff arithmetic, the LRU deduper, headers, channels."""

from __future__ import annotations

import random

import pytest
from bus_helpers import Sample

from gpuaware import bus
from gpuaware.bus.headers import header_value
from gpuaware.bus.jetstream import ConsumerSpec, SimpleStreamSpec, consumer_diff, stream_config, stream_diff
from gpuaware.schemas import POD_PENDING, PodPending, subject_token


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize("attempt, draw, expected", [
    # base 0.1 * 2**0 = 0.1, no jitter drawn
    (0, 0.0, 0.1),
    # 0.1 * 2**3 = 0.8, jitter 0.5 * draw 1.0 removes half: 0.4
    (3, 1.0, 0.4),
    # 0.1 * 2**10 = 102.4, capped at 5.0
    (10, 0.0, 5.0),
    # huge attempt counts do not overflow: still the cap
    (10_000, 0.0, 5.0),
])
def test_reconnect_delay(attempt: int, draw: float, expected: float) -> None:
    assert bus.reconnect_delay(attempt, bus.ReconnectPolicy(), Fixed(draw)) == pytest.approx(expected)


@pytest.mark.parametrize("attempt, expected", [
    (1, 1.0),    # first failure: base
    (2, 2.0),    # 1 * 2**1
    (4, 8.0),    # 1 * 2**3
    (8, 60.0),   # 128 capped at 60
])
def test_retry_policy_delay(attempt: int, expected: float) -> None:
    assert bus.RetryPolicy().delay(attempt) == expected


def test_deduper_is_a_bounded_lru() -> None:
    d = bus.Deduper(capacity=2)
    assert not d.seen("a")
    d.remember("a")
    d.remember("b")
    assert d.seen("a")           # "a" becomes the most recent
    d.remember("c")              # evicts "b", the least recently used
    assert ("a" in d, "b" in d, "c" in d) == (True, False, True)
    assert len(d) == 2 and d.hits == 1
    assert d.check_and_remember("x") is False and d.check_and_remember("x") is True


@pytest.mark.parametrize("text, expected", [
    ("plain", "plain"),
    ("line one\r\nline two\n", "line one line two"),   # CR/LF would break the NATS protocol
    ("x" * 2000, "x" * 1021 + "..."),                   # bounded to 1024 characters
])
def test_header_value(text: str, expected: str) -> None:
    assert header_value(text) == expected


def test_channel_codec_ids_and_tokens() -> None:
    ch = bus.Channel("telemetry.gpu.sampled.v1", Sample)
    s = Sample(id="1", gpu="g", util=1.0)
    payload = ch.encode(s)
    assert ch.decode(payload) == s
    assert ch.msg_id(s, payload) == bus.content_id(ch.subject, payload)
    node = ch.at("c1", "node-7")
    assert node.subject == "telemetry.gpu.sampled.v1.c1.node-7" and node.decoder is ch.decoder
    assert node.msg_id(s, payload) != ch.msg_id(s, payload)  # the subject is part of the hash
    # a name is one token by the contract's rule, escaped once however often it goes through it
    dotted = ch.at("prod.eu-west-1", "ip-10-0-1-2.ec2.internal")
    assert dotted.subject == "telemetry.gpu.sampled.v1.prod_eu-west-1.ip-10-0-1-2_ec2_internal"
    assert ch.at(subject_token("prod.eu-west-1"), "ip-10-0-1-2.ec2.internal") == dotted
    assert ch.at("a b", "*", ">").subject == "telemetry.gpu.sampled.v1.a%20b.%2A.%3E"
    assert ch.under("prod.eu-west-1").subject == "telemetry.gpu.sampled.v1.prod_eu-west-1.>"


def test_event_channel_is_published_on_the_events_tag() -> None:
    pending = bus.event_channel(PodPending, id_of=lambda p: p.pod_uid, dedupe=False)
    assert (pending.subject, pending.type, pending.dedupe) == (POD_PENDING, PodPending, False)
    assert pending.id_of is not None
    with pytest.raises(TypeError, match="not a tagged event"):
        bus.event_channel(Sample)  # a Struct without a tag has no subject


def test_stream_and_consumer_diffs() -> None:
    spec = SimpleStreamSpec(name="S", subjects=("a.>", "b.>"), max_msgs=10)
    want = stream_config(spec)
    assert want.max_msgs == 10 and want.max_bytes == -1 and want.max_age == 0.0
    same = stream_config(SimpleStreamSpec(name="S", subjects=("b.>", "a.>"), max_msgs=10))
    assert stream_diff(want, same) == {}  # subject order does not matter
    other = stream_config(SimpleStreamSpec(name="S", subjects=("a.>",), max_msgs=10, max_age_s=60))
    assert set(stream_diff(want, other)) == {"subjects", "max_age"}
    c = ConsumerSpec(durable="d", max_deliver=3).config()
    assert consumer_diff(c, ConsumerSpec(durable="d", max_deliver=3).config()) == {}
    assert set(consumer_diff(c, ConsumerSpec(durable="d", max_deliver=4, ack_wait=5).config())) == {
        "max_deliver", "ack_wait"}
    with pytest.raises(ValueError):
        ConsumerSpec(durable="d", max_deliver=2, backoff=(1.0, 2.0)).config()


@pytest.mark.parametrize("reply", [
    "$JS.ACK.PODS.placement.3.1042.977.1764150000000000000.12",                     # the usual layout
    "$JS.ACK.hub.ACCOUNTHASH.PODS.placement.3.1042.977.1764150000000000000.12.tok",  # with a domain
])
def test_position_reads_the_reply_subject_as_nats_py_does(reply: str) -> None:
    from nats.aio.msg import Msg

    from gpuaware.bus.position import position

    msg = Msg(_client=None, subject="pods.pending", reply=reply, data=b"")  # type: ignore[arg-type]  # no client: the message is never acked
    meta = msg.metadata
    assert position(msg) == (meta.stream, meta.consumer, meta.num_delivered, meta.sequence.stream,
                             meta.num_pending) == ("PODS", "placement", 3, 1042, 12)
