"""Names the platform does not choose, on a real nats-server: every one routes on exactly its own subject
(``Channel.at``) and names a durable consumer (``consumer_name``) the server accepts, and a filter on
the names before it (``Channel.under``) receives them all."""

from __future__ import annotations

import pytest
from bus_helpers import Handled, Names, Sample
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas import consumer_name, name_from_token

CLUSTER = "prod.eu-west-1"
NAMES = ["ip-10-0-1-2.ec2.internal", "ip-10-0-1-2_ec2_internal", "a b", "*", ">", "team_a", "名前", "", "%41",
         "$SYS", "x" * 300]


@pytest.fixture
async def routed(js: bus.JetStream, names: Names) -> object:
    """A stream of ``names.subject`` and every routing suffix, deleted afterwards."""
    await bus.ensure_stream(js, bus.SimpleStreamSpec(name=names.stream, subjects=(f"{names.subject}.>",)))
    yield names.stream
    await js.delete_stream(names.stream)


async def test_every_name_routes_on_its_own_subject_and_names_a_durable(js: bus.JetStream, nc: bus.Client,
                                                                       names: Names, routed: str) -> None:
    channel = bus.Channel(names.subject, Sample, id_of=lambda s: s.id)
    heard: list[str] = []

    async def on(msg: object) -> None:
        heard.append(msg.subject)  # type: ignore[attr-defined]  # a NATS Msg

    await nc.subscribe(f"{names.subject}.*.*", cb=on)  # two tokens after the subject: cluster and name
    sent = [Sample(id=f"s{i}", gpu=name, util=1.0) for i, name in enumerate(NAMES)]
    for s in sent:
        await bus.publish(js, channel.at(CLUSTER, s.gpu), s)
    for s in sent:  # each name's consumer, named after it, gets its message and no other
        got = Handled()
        async with await bus.subscribe_durable(js, channel.at(CLUSTER, s.gpu), consumer_name("test", s.gpu), got,
                                               ack_wait=1.0) as consumer:
            await eventually(lambda got=got: len(got) == 1, what=f"the message of {s.gpu!r}")
            assert consumer.durable == consumer_name("test", s.gpu)
        assert got == [s]
    everyone = Handled()
    async with await bus.subscribe_durable(js, channel.under(CLUSTER), consumer_name("test", CLUSTER), everyone,
                                           ack_wait=1.0):
        await eventually(lambda: len(everyone) == len(sent), what="every name under the cluster")
    assert sorted(everyone, key=lambda s: int(s.id[1:])) == sent
    await eventually(lambda: len(heard) == len(sent), what="every subject two tokens deep")
    tokens = [subject.split(".")[-2:] for subject in heard]
    assert {name_from_token(c) for c, _ in tokens} == {CLUSTER}
    assert [name_from_token(n) for _, n in tokens[:-1]] == NAMES[:-1]  # the last is hashed
