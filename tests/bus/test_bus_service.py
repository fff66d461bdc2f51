"""Request/reply through NATS micro services: typed replies, typed errors, $SRV discovery and stats."""

from __future__ import annotations

import json

import msgspec
import pytest
from bus_helpers import Names
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas.deadletter import HEADER_CONSUMER, HEADER_REASON, dead_letter_subject


class AdmitRequest(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    gpus: int = msgspec.field(default=1)


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    admitted: bool
    queue: str
    reason: str = ""


async def admit(req: AdmitRequest) -> Admission:
    if req.queue == "frozen":
        raise bus.ServiceError(409, "queue is frozen")
    return Admission(admitted=req.gpus <= 4, queue=req.queue, reason="" if req.gpus <= 4 else "over quota")


@pytest.fixture
async def service(nc, names: Names):
    svc = await bus.add_service(nc, f"quota-{names.token}", "1.2.3", [
        bus.Endpoint("admit", f"{names.subject}.admit", AdmitRequest, admit),
    ], description="test quota service")
    yield svc
    await svc.stop()


async def test_request_gets_typed_reply_and_stats_count_requests(nc, service, names: Names) -> None:
    subject = f"{names.subject}.admit"
    ok = await bus.request(nc, subject, AdmitRequest(queue="team-a", gpus=2), Admission, timeout=2)
    over = await bus.request(nc, subject, AdmitRequest(queue="team-a", gpus=8), Admission, timeout=2)
    assert ok == Admission(admitted=True, queue="team-a")
    assert over == Admission(admitted=False, queue="team-a", reason="over quota")
    with pytest.raises(bus.ServiceError) as err:
        await bus.request(nc, subject, AdmitRequest(queue="frozen"), Admission, timeout=2)
    assert (err.value.code, err.value.description) == (409, "queue is frozen")

    # $SRV.STATS.<name> over the wire: 3 requests, 1 error
    reply = await nc.request(f"$SRV.STATS.quota-{names.token}", b"", timeout=2)
    stats = json.loads(reply.data)
    (endpoint,) = stats["endpoints"]
    assert (endpoint["name"], endpoint["subject"]) == ("admit", subject)
    assert (endpoint["num_requests"], endpoint["num_errors"]) == (3, 1)
    assert service.stats().endpoints[0].num_requests == 3


async def test_ping_and_info_answer(nc, service, names: Names) -> None:
    ping = json.loads((await nc.request(f"$SRV.PING.quota-{names.token}", b"", timeout=2)).data)
    assert (ping["name"], ping["version"], ping["id"]) == (f"quota-{names.token}", "1.2.3", service.id)
    info = json.loads((await nc.request(f"$SRV.INFO.quota-{names.token}.{service.id}", b"", timeout=2)).data)
    assert info["description"] == "test quota service"
    assert [e["subject"] for e in info["endpoints"]] == [f"{names.subject}.admit"]


@pytest.mark.parametrize("payload, fragment", [
    (b"{not json", "malformed"),                          # garbage bytes
    (b'{"queue": "a", "gpus": "two"}', "Expected `int`"),  # schema violation
])
async def test_undecodable_request_is_a_400_and_dead_lettered(nc, service, names: Names, payload, fragment) -> None:
    subject = f"{names.subject}.admit"
    dead: list = []

    async def cb(msg) -> None:
        dead.append(msg)

    await nc.subscribe(dead_letter_subject(subject), cb=cb)
    reply = await nc.request(subject, payload, timeout=2)
    assert reply.headers[bus.headers.SERVICE_ERROR_CODE] == "400"
    assert fragment in reply.headers[bus.headers.SERVICE_ERROR]
    await eventually(lambda: len(dead) == 1, what="dead letter")
    assert dead[0].data == payload
    assert fragment in dead[0].headers[HEADER_REASON]
    assert dead[0].headers[HEADER_CONSUMER] == f"service:quota-{names.token}/admit"
    # the service keeps serving
    ok = await bus.request(nc, subject, AdmitRequest(queue="q"), Admission, timeout=2)
    assert ok.admitted
    assert service.stats().endpoints[0].num_errors == 1


async def test_no_responders_is_reported_at_once(nc, names: Names) -> None:
    with pytest.raises(bus.NoResponders):
        await bus.request(nc, f"{names.subject}.nobody", AdmitRequest(queue="q"), Admission, timeout=2)


async def test_serve_answers_on_a_plain_subscription_with_micro_semantics(nc, names: Names) -> None:
    """`bus.serve`: typed replies and the same error replies as a micro endpoint (`request` raises the same
    `ServiceError`), a bad request dead-lettered with 400; no `$SRV` service of its own; `stop()` ends it."""
    subject = f"{names.subject}.admit-leader"
    dead: list = []

    async def cb(msg) -> None:
        dead.append(msg)

    await nc.subscribe(dead_letter_subject(subject), cb=cb)

    async def failing(req: AdmitRequest) -> Admission:
        if req.queue == "busy":
            raise bus.TransientError("not leading")
        return await admit(req)

    responder = await bus.serve(nc, bus.Endpoint("admit-leader", subject, AdmitRequest, failing),
                                service=f"quota-{names.token}")
    assert responder.serving
    ok = await bus.request(nc, subject, AdmitRequest(queue="team-a", gpus=2), Admission, timeout=2)
    assert ok == Admission(admitted=True, queue="team-a")
    with pytest.raises(bus.ServiceError) as err:  # the handler's own code, passed through
        await bus.request(nc, subject, AdmitRequest(queue="frozen"), Admission, timeout=2)
    assert (err.value.code, err.value.description) == (409, "queue is frozen")
    with pytest.raises(bus.ServiceError) as err:
        await bus.request(nc, subject, AdmitRequest(queue="busy"), Admission, timeout=2)
    assert (err.value.code, err.value.description) == (503, "not leading")
    reply = await nc.request(subject, b"{not json", timeout=2)
    assert reply.headers[bus.headers.SERVICE_ERROR_CODE] == "400"
    assert "malformed" in reply.headers[bus.headers.SERVICE_ERROR]
    await eventually(lambda: len(dead) == 1, what="dead letter")
    assert dead[0].data == b"{not json"
    assert dead[0].headers[HEADER_CONSUMER] == f"service:quota-{names.token}/admit-leader"
    assert (responder.requests, responder.errors) == (4, 3)
    # not a micro service: nothing answers discovery under its name
    with pytest.raises(Exception):  # noqa: B017 (nats-py's NoRespondersError or a timeout, either is "none")
        await nc.request(f"$SRV.PING.quota-{names.token}", b"", timeout=0.5)

    await responder.stop()
    await responder.stop()  # idempotent
    assert not responder.serving
    with pytest.raises(bus.NoResponders):
        await bus.request(nc, subject, AdmitRequest(queue="q"), Admission, timeout=2)
