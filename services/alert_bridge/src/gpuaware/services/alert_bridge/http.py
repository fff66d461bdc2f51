"""The bridge's HTTP endpoint: Alertmanager's webhook receiver and the probes.

    POST /webhook (and POST /)   an Alertmanager notification (``webhook_configs``; only when the
                                 webhook is on): 200 with what was accepted, 400 not a notification,
                                 503 the bus did not take it (Alertmanager retries)
    GET  /healthz                200 while the process serves (liveness)
    GET  /readyz                 200 when NATS is connected and, if configured, Alertmanager answers;
                                 503 otherwise; the body says which part is missing

Bodies are limited to 1 MiB (a notification holds one alert group).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from gpuaware.services.alert_bridge.bridge import AlertBridge

__all__ = ["HttpEndpoint"]

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20


def bridge_app(bridge: AlertBridge, *, webhook: bool) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)

    async def on_webhook(request: web.Request) -> web.Response:
        status, answer = await bridge.on_notification(await request.read())
        return web.json_response(answer, status=status)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        state = await bridge.readiness()
        return web.json_response(state, status=200 if state["ready"] else 503)

    if webhook:
        app.router.add_post("/webhook", on_webhook)
        app.router.add_post("/", on_webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class HttpEndpoint:
    """The endpoint on ``addr:port`` (``port`` 0 asks the OS for one; ``port`` holds it once started)."""

    def __init__(self, bridge: AlertBridge, addr: str, port: int, *, webhook: bool) -> None:
        self.addr, self.port = addr, port
        self.runner = web.AppRunner(bridge_app(bridge, webhook=webhook), access_log=None)
        self._site: Any = None

    async def start(self) -> None:
        await self.runner.setup()
        self._site = web.TCPSite(self.runner, self.addr, self.port)
        try:
            await self._site.start()
        except OSError as exc:
            await self.runner.cleanup()
            raise RuntimeError(f"cannot listen on {self.addr}:{self.port} ({exc}); free the port or change "
                               "GPUAWARE_ALERT_BRIDGE_LISTEN_PORT") from exc
        server = self._site._server
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        log.info("alert bridge: HTTP on %s:%d", self.addr, self.port)

    async def stop(self) -> None:
        await self.runner.cleanup()
