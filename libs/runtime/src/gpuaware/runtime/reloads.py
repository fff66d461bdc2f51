"""A configuration reload that fails, told: counted, logged, and raised as an alert.

Whatever a service reloads while it runs (the quota tree, the placement profile, the served models) must
survive a reload that raises, *any* exception and not only a validation error: the last good
configuration stays in force and the loop that reloads lives on. The service keeps the last good
configuration itself (it knows what that is); a `ReloadAlarm` makes the failure visible:

* ``gpuaware_config_reload_failures_total{config}`` counts the failures and
  ``gpuaware_config_reload_failing{config}`` is 1 while the latest reload of ``config`` failed;
* the failure is logged with its reason;
* an ``AlertRaised`` (rule ``config_reload_failed``, labels ``cluster``, ``service`` and ``config``) goes
  out on the alerts subject every failure, the same fingerprint each time (receivers dedupe on it), and
  the next reload that succeeds resolves it.

Publishing happens in the background (a reload is often synchronous, between two decisions); a
publication that fails is logged and forgotten: the metric and the log still tell.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from gpuaware import bus
from gpuaware.runtime.metrics import Sample, counter, gauge
from gpuaware.schemas import AlertRaised, AlertResolved, Severity, fingerprint

__all__ = ["RELOAD_RULE", "ReloadAlarm"]

log = logging.getLogger(__name__)

RELOAD_RULE = "config_reload_failed"

T = TypeVar("T")


class ReloadAlarm:
    """Tells the failures and recoveries of one configuration's reloads (see the module)."""

    def __init__(self, js: Any, *, config: str, service: str, cluster: str, source: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.js = js
        self.config = config
        self.cluster = cluster
        self.source = source
        self.clock = clock
        self.labels = {"cluster": cluster, "service": service, "config": config}
        self.fingerprint = fingerprint(RELOAD_RULE, self.labels)
        self.failures = 0
        self.last_error = ""
        """the latest failure's reason; empty while the latest reload succeeded"""
        self.alerts_published = 0
        self._since: float | None = None
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, reason: str | BaseException) -> None:
        """A reload failed and the last good configuration stays: count, log, raise the alert."""
        if isinstance(reason, BaseException):
            reason = f"{type(reason).__name__}: {reason}"
        now = self.clock()
        self.failures += 1
        self.last_error = reason
        if self._since is None:
            self._since = now
        log.error("%s reload failed, the last good configuration stays: %s", self.config, reason,
                  extra={"config": self.config})
        self._publish(AlertRaised(
            source=self.source, emitted_at=now, cluster=self.cluster, fingerprint=self.fingerprint,
            rule=RELOAD_RULE, severity=Severity.WARNING, started_at=self._since, labels=self.labels,
            summary=f"{self.labels['service']}: reloading {self.config} failed ({reason[:300]}); the last good "
                    f"configuration stays in force"))

    def succeeded(self) -> None:
        """A reload succeeded: resolve the alert if one is open."""
        self.last_error = ""
        if self._since is None:
            return
        started, self._since = self._since, None
        now = self.clock()
        log.info("%s reloads again", self.config, extra={"config": self.config})
        self._publish(AlertResolved(
            source=self.source, emitted_at=now, cluster=self.cluster, fingerprint=self.fingerprint,
            rule=RELOAD_RULE, severity=Severity.WARNING, started_at=started, resolved_at=max(now, started),
            summary=f"{self.config} reloads again"))

    async def guard(self, reload: Callable[[], Awaitable[T]]) -> T | None:
        """``await reload()``; an exception is `failed` (and None returned), a result `succeeded`."""
        try:
            result = await reload()
        except Exception as exc:
            self.failed(exc)
            return None
        self.succeeded()
        return result

    async def settle(self) -> None:
        """Wait for the alerts being published (a test; a service's stop)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def samples(self) -> Iterable[Sample]:
        yield counter("gpuaware_config_reload_failures", "configuration reloads that failed (the last good "
                      "configuration stayed in force)", self.failures, config=self.config)
        yield gauge("gpuaware_config_reload_failing", "1 while the latest reload of the configuration failed",
                    1 if self.failing else 0, config=self.config)

    def _publish(self, event: AlertRaised | AlertResolved) -> None:
        if self.js is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._send(event), name=f"{self.config} reload alert")
        except RuntimeError:  # no event loop (a synchronous caller outside a service): the log tells
            return
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, event: AlertRaised | AlertResolved) -> None:
        channel: bus.Channel[Any] = bus.event_channel(type(event))
        try:
            await bus.publish(self.js, channel.at(self.cluster), event)
        except Exception as exc:
            log.warning("%s reload alert not published: %s: %s", self.config, type(exc).__name__, exc)
            return
        self.alerts_published += 1
