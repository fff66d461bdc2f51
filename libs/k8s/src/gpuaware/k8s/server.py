"""The extender's HTTP front (aiohttp): ``POST /<verb>``, ``GET /healthz``.

Why a separate module: the answers are pure (``extender.Extender``); this only maps HTTP onto them.
kube-scheduler treats any status but 200 as a transport failure, so a request we can read always gets
200 (a "no" is in the body); a request we cannot read (malformed JSON, an unknown verb, a pod we
cannot translate, nodes not in our cache) gets 400 with the reason as ``{"Error": ...}``; a fault of
ours is logged and answered 200 with ``Error`` set (filter, bind, preempt) or an empty list
(prioritize, whose errors kube-scheduler ignores), never a 500. Bodies are capped (1 MiB by default,
as HAMi does).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

from gpuaware.k8s.extender import BadRequest, Extender, FilterResult

__all__ = ["extender_app"]

log = logging.getLogger(__name__)
_enc = msgspec.json.Encoder()


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=_enc.encode(obj), status=status, content_type="application/json")


def extender_app(extender: Extender, *, max_body: int = 1 << 20) -> web.Application:
    async def verb(request: web.Request) -> web.Response:
        name = request.match_info["verb"]
        body = await request.read()
        try:
            return _json(extender.answer(name, body))
        except BadRequest as exc:
            return _json({"Error": str(exc)}, 400)
        except Exception as exc:  # our fault: kube-scheduler must still get an answer it can read
            log.exception("extender %s failed", name)
            if name == "prioritize":
                return _json([])
            if name == "filter":
                return _json(FilterResult(error=f"internal error: {type(exc).__name__}: {exc}"))
            if name == "preempt":
                return _json({"NodeNameToMetaVictims": {}})
            return _json({"Error": f"internal error: {type(exc).__name__}: {exc}"})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def too_big(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge as exc:
            return _json({"Error": f"request body over {max_body} bytes ({exc.text})"}, 400)

    app = web.Application(client_max_size=max_body, middlewares=[web.middleware(too_big)])
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/{verb}", verb)
    return app


def admission_app(*, default_queue: str = "default", max_body: int = 3 << 20) -> web.Application:
    """``POST /mutate`` and ``POST /validate`` (AdmissionReview v1 in and out; ``gpuaware.k8s.admission``).
    A review we cannot read is a 400 with ``{"error": ...}``; the apiserver then applies the webhook's
    failurePolicy."""
    from gpuaware.k8s.admission import BadReview, mutate, validate

    def handler(fn: Callable[[Any], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def run(request: web.Request) -> web.Response:
            try:
                review = msgspec.json.decode(await request.read())
                return _json(fn(review))
            except (msgspec.DecodeError, BadReview) as exc:
                return _json({"error": f"{request.path}: {exc}"}, 400)
        return run

    app = web.Application(client_max_size=max_body)
    app.router.add_post("/mutate", handler(lambda r: mutate(r, default_queue=default_queue)))
    app.router.add_post("/validate", handler(validate))
    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", healthz)
    return app
