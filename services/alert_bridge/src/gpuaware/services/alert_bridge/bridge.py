"""The bridge's I/O: following ``alerts.>``, posting to Alertmanager, publishing the webhook's alerts.

What to post when, and what a notification becomes, is ``gpuaware.alerting`` (``Forwarder``,
``from_webhook``); this class only moves bytes:

    out   follow ALERTS (alerts.gpu.raised.v1.>, alerts.gpu.resolved.v1.>, from the stream's start)
          -> Forwarder -> one sender task POSTs <alertmanager>/api/v2/alerts; a resend task every
          ``resend_s``
    in    a notification's events -> alerts.gpu.{raised,resolved}.v1.<subject_token(cluster)>
          (``Nats-Msg-Id``: source, fingerprint, status and start, so a re-notification is stored once);
          each refused alert -> deadletter.alerts.gpu.{raised,resolved}.v1 with the reason in headers

A notification is answered 200 with what was accepted (published, skipped, refused with reasons); 400
when the body is not a notification; 503 when the bus did not take an alert or a dead letter
(Alertmanager retries the notification: what was published already is stored once).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from typing import Any

import aiohttp

from gpuaware import bus
from gpuaware.alerting import Forwarder, WebhookBatch, WebhookError, from_webhook, parse_notification
from gpuaware.runtime import redact_url, supervise
from gpuaware.schemas import ALERTS, AlertRaised, AlertResolved, subject_token
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings

__all__ = ["RAISED", "RESOLVED", "AlertBridge"]

log = logging.getLogger(__name__)

RAISED = bus.event_channel(AlertRaised)
RESOLVED = bus.event_channel(AlertResolved)
_PROBE_PATH = "/-/ready"
_POST_PATH = "/api/v2/alerts"


class AlertBridge:
    """The bus <-> Alertmanager, as the settings ask (see the module docstring). ``start`` / ``stop``."""

    def __init__(self, nc: bus.Client, js: bus.JetStream, settings: AlertBridgeSettings, *, source: str) -> None:
        self.nc, self.js, self.settings, self.source = nc, js, settings, source
        self.url = settings.alertmanager_url.rstrip("/")
        self.forwarder = Forwarder()
        self.stats = self.forwarder.stats
        self.alertmanager_up: bool | None = None
        """the last post or probe's outcome (None: not asked yet, or no Alertmanager configured)"""
        self._dead_letters = bus.DeadLetters(nc, js)
        self._session: aiohttp.ClientSession | None = None
        self._follower: bus.Follower | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> AlertBridge:
        if not self.settings.forwarding:
            return self
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.settings.post_timeout_s))
        self._follower = await bus.follow(self.js, [RAISED, RESOLVED], self._on_alert, stream=ALERTS.name,
                                          deliver="all", with_suffixes=True, name="alert-bridge")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._follower.caught_up.wait(), self.settings.catch_up_s)
        self.forwarder.resend()  # what was open before this process started
        self._tasks = [supervise("alertmanager sender", self._send_loop),
                       supervise("alertmanager resend", self._resend_loop)]
        self._wake.set()
        log.info("alert bridge: %d open alerts, posting to %s", len(self.forwarder.alerts.open), redact_url(self.url))
        return self

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._follower is not None:
            await self._follower.stop()
        if self._session is not None:
            if self.forwarder.waiting:  # a resolution that arrived just before the stop still reaches Alertmanager
                await self._post_waiting()
            await self._session.close()

    # -- out: the bus -> Alertmanager ----------------------------------------------------------------

    def _on_alert(self, ev: AlertRaised | AlertResolved, delivery: bus.FollowDelivery) -> None:
        if self.forwarder.on_event(ev, replay=delivery.replay):
            self._wake.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._post_waiting()

    async def _resend_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resend_s)
            self.forwarder.resend()
            self._wake.set()

    async def _post_waiting(self) -> None:
        batch = self.forwarder.take()
        if batch:
            self.forwarder.done(batch, await self._post(batch))

    async def _post(self, batch: list[dict[str, Any]]) -> bool:
        assert self._session is not None
        try:
            async with self._session.post(f"{self.url}{_POST_PATH}", json=batch) as resp:
                if resp.status >= 300:
                    raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        except Exception as exc:  # Alertmanager away: resolutions wait for the next post, firing ones are resent
            self.alertmanager_up = False
            log.warning("posting %d alerts to Alertmanager failed (%s: %s); retried with the next resend",
                        len(batch), type(exc).__name__, exc)
            return False
        self.alertmanager_up = True
        return True

    async def probe_alertmanager(self) -> bool | None:
        """Whether Alertmanager answers its readiness endpoint now (None: none configured)."""
        if self._session is None:
            return None
        try:
            async with self._session.get(f"{self.url}{_PROBE_PATH}") as resp:
                self.alertmanager_up = resp.status < 300
        except Exception:  # unreachable or too slow: not ready; the reason is in the sender's log
            self.alertmanager_up = False
        return self.alertmanager_up

    async def readiness(self) -> dict[str, Any]:
        """``ready``: NATS connected and, when one is configured, Alertmanager answering."""
        nats = bool(self.nc.is_connected)
        alertmanager = await self.probe_alertmanager()
        return {"ready": nats and alertmanager is not False, "nats": nats, "alertmanager": alertmanager}

    # -- in: Alertmanager's webhook -> the bus -------------------------------------------------------

    async def on_notification(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """One webhook notification: (HTTP status, JSON answer). Publishes its events, dead-letters
        its refused alerts, counts both."""
        self.stats.notifications += 1
        try:
            batch = from_webhook(parse_notification(body), cluster=self.settings.cluster, now=time.time())
        except WebhookError as exc:
            self.stats.bad_notifications += 1
            return 400, {"error": str(exc)}
        self.stats.skipped_own += batch.own
        published, dead_lettered, failed = await self._publish(batch)
        answer = batch.reply(published, dead_lettered)
        if failed:
            answer["error"] = failed
            return 503, answer
        return 200, answer

    async def _publish(self, batch: WebhookBatch) -> tuple[int, int, str]:
        """Publish every event and dead-letter every refusal of ``batch``; (published, dead-lettered,
        the first failure or "")."""
        published = dead_lettered = 0
        failed = ""
        for ev in batch.events:
            channel: bus.Channel[Any] = RAISED if isinstance(ev, AlertRaised) else RESOLVED
            status = "raised" if isinstance(ev, AlertRaised) else "resolved"
            try:
                await bus.publish(self.js, channel.at(subject_token(ev.cluster)), ev,
                                  msg_id=f"{ev.source}/{ev.fingerprint}/{status}/{ev.started_at:.3f}",
                                  timeout=self.settings.publish_timeout_s)
            except Exception as exc:  # the bus is away: Alertmanager retries the whole notification
                failed = failed or f"publishing {ev.rule} failed: {type(exc).__name__}: {exc}"
                continue
            published += 1
            self.stats.published += 1
        for refused in batch.refused:
            self.stats.refused += 1
            try:
                await self._dead_letters.send(
                    subject=refused.subject, payload=refused.raw, headers=None, reason=refused.reason,
                    consumer=f"{self.settings.service_name}/webhook/{batch.receiver}", attempts=1,
                    dedupe_id=hashlib.blake2b(refused.raw, digest_size=16).hexdigest())
            except Exception as exc:
                failed = failed or f"dead-lettering alerts[{refused.index}] failed: {type(exc).__name__}: {exc}"
                continue
            dead_lettered += 1
        return published, dead_lettered, failed
