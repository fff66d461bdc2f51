"""``gpuaware alerts bridge``: the bus's alerts to Alertmanager, and Alertmanager's notifications to the bus.

One small process so one routing tree pages people: every ``AlertRaised`` / ``AlertResolved`` on
``alerts.>`` (health-scoring's GPU alerts, forecasting's drift alert, ...) is posted to Alertmanager's
API; open alerts are posted again every ``--resend-s`` (Alertmanager resolves what it does not hear
about within its ``resolve_timeout``), and a restarted bridge rebuilds them by replaying the alerts
stream. With ``--listen-port`` it also serves an Alertmanager webhook receiver (``POST /webhook``):
alerts Alertmanager routes there (Prometheus's rules in deploy/prometheus/rules.yaml, anything else)
are published on the bus for other tools, as ``AlertRaised`` / ``AlertResolved`` whose ``source`` is
``alertmanager/<receiver>``. Translation and loop prevention: ``gpuaware.alerting``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import Annotated, Any

import typer
from rich.console import Console

from gpuaware import bus
from gpuaware.alerting import OpenAlerts, from_webhook, to_alertmanager
from gpuaware.schemas import ALERT_RAISED, ALERT_RESOLVED, ALERTS, AlertRaised, AlertResolved

__all__ = ["AlertBridge", "app"]

log = logging.getLogger(__name__)
console = Console(stderr=True)
app = typer.Typer(help="Alerts: the bus <-> Alertmanager.", no_args_is_help=True)

RAISED = bus.Channel(ALERT_RAISED, AlertRaised)
RESOLVED = bus.Channel(ALERT_RESOLVED, AlertResolved)


class AlertBridge:
    """Follows ``alerts.>`` and posts to ``alertmanager`` (when set); serves the webhook on ``listen_port``
    (when set). ``stats`` counts what went each way."""

    def __init__(self, nc: Any, *, alertmanager: str = "", listen_port: int = 0, listen_addr: str = "127.0.0.1",
                 cluster: str = "default", resend_s: float = 60.0, timeout_s: float = 5.0) -> None:
        self.nc, self.js = nc, nc.jetstream()
        self.url = alertmanager.rstrip("/")
        self.listen_port, self.listen_addr = listen_port, listen_addr
        self.cluster, self.resend_s, self.timeout_s = cluster, resend_s, timeout_s
        self.alerts = OpenAlerts()
        self.unsent: list[dict[str, Any]] = []
        """resolutions Alertmanager has not taken yet (posted again with the next resend)"""
        self.stats = {"posted": 0, "post_failures": 0, "received": 0, "published": 0, "refused": 0}
        self._follower: Any = None
        self._session: Any = None
        self._runner: Any = None
        self._resender: asyncio.Task[None] | None = None

    async def start(self) -> AlertBridge:
        import aiohttp

        if self.url:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
            self._follower = await bus.follow(self.js, [RAISED, RESOLVED], self._on_alert, stream=ALERTS.name,
                                              deliver="all", with_suffixes=True, name="alert-bridge")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._follower.caught_up.wait(), 30.0)
            await self._post([to_alertmanager(a) for a in self.alerts.firing()])  # what was open before we started
            self._resender = asyncio.create_task(self._resend(), name="alertmanager resend")
        if self.listen_port:
            from aiohttp import web

            webapp = web.Application(client_max_size=1 << 20)
            webapp.router.add_post("/webhook", self._on_webhook)
            async def healthz(_request: Any) -> Any:
                return web.Response(text="ok")

            webapp.router.add_post("/", self._on_webhook)
            webapp.router.add_get("/healthz", healthz)
            self._runner = web.AppRunner(webapp, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.listen_addr, self.listen_port)
            await site.start()
        return self

    async def stop(self) -> None:
        if self._resender is not None:
            self._resender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resender
        if self._follower is not None:
            await self._follower.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> AlertBridge:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- out: the bus -> Alertmanager ----------------------------------------------------------------

    async def _on_alert(self, ev: AlertRaised | AlertResolved, delivery: bus.FollowDelivery) -> None:
        alert = self.alerts.apply(ev)
        if alert is not None and not delivery.replay:
            await self._post([alert])

    async def _resend(self) -> None:
        while True:
            await asyncio.sleep(self.resend_s)
            await self._post([to_alertmanager(a) for a in self.alerts.firing()])

    async def _post(self, alerts: list[dict[str, Any]]) -> bool:
        batch = [*self.unsent, *alerts]
        if not batch:
            return True
        try:
            async with self._session.post(f"{self.url}/api/v2/alerts", json=batch) as resp:
                if resp.status >= 300:
                    raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        except Exception as exc:  # Alertmanager away: resolutions wait for the next try, firing ones are resent
            self.stats["post_failures"] += 1
            self.unsent = [a for a in batch if "endsAt" in a][-10_000:]
            log.warning("posting %d alerts to Alertmanager failed (%s: %s); retried with the next resend",
                        len(batch), type(exc).__name__, exc)
            return False
        self.unsent = []
        self.stats["posted"] += len(batch)
        return True

    # -- in: Alertmanager's webhook -> the bus -------------------------------------------------------

    async def _on_webhook(self, request: Any) -> Any:
        from aiohttp import web

        self.stats["received"] += 1
        try:
            payload = json.loads(await request.read())
            events = from_webhook(payload, cluster=self.cluster, now=time.time())
        except ValueError as exc:  # WebhookError, and json's decode errors, are ValueErrors
            self.stats["refused"] += 1
            return web.json_response({"error": str(exc)}, status=400)
        for ev in events:
            channel: bus.Channel[Any] = RAISED if isinstance(ev, AlertRaised) else RESOLVED
            await bus.publish(self.js, channel.at(ev.cluster), ev)
            self.stats["published"] += 1
        return web.json_response({"published": len(events)})


@app.command()
def bridge(
    alertmanager: Annotated[str, typer.Option(help="Alertmanager's base URL, e.g. http://alertmanager:9093 "
                                              "(empty: nothing is forwarded).")] = "",
    listen_port: Annotated[int, typer.Option(min=0, max=65535, help="Serve an Alertmanager webhook receiver "
                                             "(POST /webhook) on this port and publish what arrives (0: off).")] = 0,
    listen_addr: Annotated[str, typer.Option(help="Address the webhook receiver listens on.")] = "127.0.0.1",
    cluster: Annotated[str, typer.Option(help="Cluster of received alerts without a cluster label.")] = "default",
    resend_s: Annotated[float, typer.Option(min=1.0, max=3600.0, help="Post open alerts again this often "
                                            "(under Alertmanager's resolve_timeout).")] = 60.0,
) -> None:
    """Forward the bus's alerts to Alertmanager and publish Alertmanager's notifications on the bus.
    NATS from NATS_URL (NATS_USER / NATS_PASSWORD when the server requires a user)."""
    if not alertmanager and not listen_port:
        raise typer.BadParameter("give --alertmanager, --listen-port or both")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options: dict[str, Any] = ({"user": os.environ["NATS_USER"], "password": os.environ.get("NATS_PASSWORD", "")}
               if os.environ.get("NATS_USER") else {})

    async def main() -> None:
        async with bus.connected(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"), name="alert-bridge",
                                 **options) as nc, \
                AlertBridge(nc, alertmanager=alertmanager, listen_port=listen_port, listen_addr=listen_addr,
                            cluster=cluster, resend_s=resend_s):
            console.print(f"alert bridge: {'to ' + alertmanager if alertmanager else ''}"
                          f"{' and ' if alertmanager and listen_port else ''}"
                          f"{f'webhook on {listen_addr}:{listen_port}' if listen_port else ''}")
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
