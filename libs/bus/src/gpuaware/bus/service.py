"""Request/reply as NATS micro services, with typed endpoints and a typed client.

Synchronous questions (`quota.admit`, `placement.explain`) are NATS micro services rather than a
home-made RPC: every instance then answers `$SRV.PING|INFO|STATS[.name[.id]]`, so `nats micro ls`,
dashboards and health checks see each endpoint's request/error counts and latency for free, and
replicas share load through the service's queue group.

An `Endpoint` pairs a subject with its request type and a plain typed handler
`async def handle(req: Req) -> Rep`. The wrapper decodes (a failure is answered as a typed service
error, code 400, and dead-lettered with the raw bytes, like any undecodable message), runs the
handler inside a SERVER span continuing the caller's trace, and encodes the reply. Handler
outcomes map to micro error replies: `ServiceError(code, ...)` as given, `PermanentError` -> 422,
`TransientError` -> 503 (the caller may retry), anything else -> 500 (logged with its traceback).
`request()` is the matching client: it encodes, injects trace context, and returns the decoded
reply or raises `ServiceError` / `NoResponders` / `RequestTimeout`.

`serve()` answers one endpoint on a plain core-NATS subscription instead, with the same wrapper (decode,
dead letter, span, error codes as the same micro headers, so `request()` raises the same errors): for
internal endpoints that come and go while a process runs, such as the subject only a lease holder
answers. A process keeps exactly one micro service (the one `gpuaware.runtime.run_service` registers):
two micro services of one name on one connection both receive each `$SRV.PING|INFO|STATS` and both
reply, and an authenticated server (responses allowed once per request) refuses both replies, so
discovery of the service times out.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.micro import add_service as _micro_add_service
from nats.micro.request import Request
from nats.micro.request import ServiceError as MicroServiceError
from nats.micro.service import EndpointConfig, Service, ServiceConfig
from opentelemetry.trace import SpanKind, Status, StatusCode

from gpuaware.bus import tracing
from gpuaware.bus.codec import ENCODER, DecodeFailure, decoder_for
from gpuaware.bus.deadletter import DeadLetters
from gpuaware.bus.errors import NoResponders, PermanentError, RequestTimeout, ServiceError, TransientError
from gpuaware.bus.headers import SERVICE_ERROR, SERVICE_ERROR_CODE, header_value

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Rep = TypeVar("Rep")

__all__ = ["Endpoint", "Responder", "Service", "add_service", "request", "serve"]


@dataclass(frozen=True, slots=True)
class Endpoint(Generic[Req, Rep]):
    """One typed endpoint: `name` (alphanumeric, '-', '_') answers on `subject`."""

    name: str
    subject: str
    request_type: type[Req]
    handler: Callable[[Req], Awaitable[Rep]]
    metadata: Mapping[str, str] | None = None
    queue_group: str | None = None


def _micro_handler(nc: Client, service_name: str, ep: Endpoint[Any, Any]) -> Callable[[Request], Awaitable[None]]:
    decoder = decoder_for(ep.request_type)
    consumer = f"service:{service_name}/{ep.name}"
    dead_letters = DeadLetters(nc)

    async def handle(req: Request) -> None:
        with tracing.receive_span(req.subject, req.headers, kind=SpanKind.SERVER, operation="process",
                                  attributes={"rpc.service": service_name, "rpc.method": ep.name}) as span:
            try:
                value = decoder.decode(req.data)
            except DecodeFailure as exc:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                try:
                    await dead_letters.send(subject=req.subject, payload=req.data, headers=req.headers,
                                           reason=f"decode error: {exc}", consumer=consumer, attempts=1)
                except Exception as dl_exc:
                    log.error("%s: dead letter failed: %s", consumer, dl_exc)
                raise MicroServiceError("400", header_value(f"bad request: {exc}")) from None
            try:
                reply = await ep.handler(value)
            except ServiceError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.description))
                raise MicroServiceError(str(exc.code), header_value(exc.description)) from None
            except PermanentError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.reason))
                raise MicroServiceError("422", header_value(exc.reason)) from None
            except TransientError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.reason))
                raise MicroServiceError("503", header_value(exc.reason)) from None
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                log.exception("%s: handler failed", consumer)
                raise MicroServiceError("500", header_value(f"{type(exc).__name__}: {exc}")) from None
            await req.respond(ENCODER.encode(reply))

    return handle


async def add_service(nc: Client, name: str, version: str, endpoints: Sequence[Endpoint[Any, Any]], *,
                      description: str | None = None, metadata: Mapping[str, str] | None = None,
                      queue_group: str | None = None) -> Service:
    """Start a micro service with typed endpoints; `await service.stop()` (or `async with`) ends it.

    `service.stats()` / `$SRV.STATS` report each endpoint's requests, errors and processing time.
    """
    service = await _micro_add_service(nc, ServiceConfig(
        name=name, version=version, description=description, metadata=dict(metadata or {}),
        queue_group=queue_group))
    try:
        for ep in endpoints:
            await service.add_endpoint(EndpointConfig(
                name=ep.name, subject=ep.subject, handler=_micro_handler(nc, name, ep),
                metadata=dict(ep.metadata) if ep.metadata else None, queue_group=ep.queue_group))
    except BaseException:
        await service.stop()
        raise
    await nc.flush()  # subscriptions are live on the server before callers are told we are up
    return service


@dataclass(eq=False)
class Responder:
    """One endpoint served on a plain subscription (`serve`); `await responder.stop()` ends it."""

    subject: str
    service: str
    requests: int = 0
    """requests received"""
    errors: int = 0
    """requests answered with an error"""
    last_error: str = ""
    _sub: Subscription | None = field(default=None, repr=False)

    @property
    def serving(self) -> bool:
        return self._sub is not None

    async def stop(self) -> None:
        """Unsubscribe (idempotent; a connection already closed has nothing left to end)."""
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def serve(nc: Client, ep: Endpoint[Any, Any], *, service: str = "") -> Responder:
    """Answer `ep` on a plain subscription (queue group `ep.queue_group`, if any), as a micro endpoint
    would: the same decoding, dead letters, trace span and error replies. `service` names the caller
    in spans and dead letters (default: the endpoint's name). Returns once the server has the
    subscription."""
    name = service or ep.name
    handle = _micro_handler(nc, name, ep)
    responder = Responder(subject=ep.subject, service=name)

    async def on_msg(msg: Msg) -> None:
        req = Request(msg)
        responder.requests += 1
        try:
            await handle(req)
        except MicroServiceError as exc:  # what micro's own endpoint wrapper answers, the same headers
            responder.errors += 1
            responder.last_error = exc.description
            if msg.reply:
                try:
                    await req.respond_error(exc.code, exc.description)
                except Exception as send_exc:
                    log.warning("%s on %s: error reply not sent: %s", name, ep.subject, send_exc)
        except Exception as exc:  # the reply itself failed (no reply subject, connection gone)
            responder.errors += 1
            responder.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("%s on %s: reply not sent: %s", name, ep.subject, responder.last_error)

    responder._sub = await nc.subscribe(ep.subject, queue=ep.queue_group or "", cb=on_msg)
    try:
        await nc.flush()  # live on the server before callers are told we serve
    except BaseException:
        await responder.stop()
        raise
    return responder


async def request(nc: Client, subject: str, req: Any, reply_type: type[Rep], *, timeout: float = 2.0,
                  headers: Mapping[str, str] | None = None) -> Rep:
    """Send `req` to `subject` and return the decoded reply.

    Raises `ServiceError` for an error reply, `NoResponders` when no service listens,
    `RequestTimeout` when no reply comes within `timeout` seconds.
    """
    hdrs = dict(headers) if headers else {}
    payload = ENCODER.encode(req)
    with tracing.send_span(subject, hdrs, kind=SpanKind.CLIENT, operation="request") as span:
        try:
            msg = await nc.request(subject, payload, timeout=timeout, headers=hdrs)
        except NoRespondersError:
            span.set_status(Status(StatusCode.ERROR, "no responders"))
            raise NoResponders(subject) from None
        except NatsTimeoutError:
            span.set_status(Status(StatusCode.ERROR, "timeout"))
            raise RequestTimeout(f"no reply from {subject} within {timeout}s") from None
        rh = msg.headers or {}
        if SERVICE_ERROR_CODE in rh:
            code_text = rh.get(SERVICE_ERROR_CODE, "500")
            code = int(code_text) if code_text.isdigit() else 500
            span.set_status(Status(StatusCode.ERROR, rh.get(SERVICE_ERROR, "")))
            raise ServiceError(code, rh.get(SERVICE_ERROR, ""))
        try:
            return decoder_for(reply_type).decode(msg.data)
        except DecodeFailure as exc:
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise ServiceError(502, f"undecodable reply from {subject}: {exc}") from None
