"""The demo's paging path: a real Alertmanager and the alert-bridge service between it and the bus.

In the gpuaware run (when health-scoring runs) the demo starts Debian's ``prometheus-alertmanager``
when the machine has it, and the alert-bridge service (``gpuaware.services.alert_bridge``, as its own
NATS user) posting the bus's alerts to it. Alertmanager's one receiver calls two webhooks: the bridge's
(the bus's own alerts come back there and are not published twice) and this module's ``Notifications``,
which records what Alertmanager itself reports, firing then resolved: that is what the report shows,
beside the alerts raised and resolved on the bus. Without the binary, or without the service installed,
the run goes on and the report says the bridge was skipped and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gpuaware.alerting import FINGERPRINT_LABEL
from gpuaware.cli.demo_config import DemoConfig, RunSpec, nats_login
from gpuaware.cli.processes import ServiceProcess, service_built
from gpuaware.devstack import (
    ALERTMANAGER_MISSING,
    AlertmanagerProcess,
    StackError,
    alertmanager_binary,
    free_port,
    start_alertmanager,
)
from gpuaware.runtime import counter_totals

__all__ = ["BRIDGE_MODULE", "BRIDGE_NAME", "DemoAlerting", "describe_alerting"]

log = logging.getLogger(__name__)

BRIDGE_NAME = "alert-bridge"
BRIDGE_MODULE = "gpuaware.services.alert_bridge"
BRIDGE_COUNTERS = ("gpuaware_alert_bridge_alerts_posted", "gpuaware_alert_bridge_post_failures",
                   "gpuaware_alert_bridge_notifications")
StartProcess = Callable[[str, str, dict[str, str]], ServiceProcess]


def describe_alerting(am: Mapping[str, Any] | None) -> str:
    """One line for the report: what Alertmanager saw through the bridge, or why the bridge did not run."""
    if not am:
        return "not started"
    if am.get("status") != "took part":
        return str(am.get("status"))
    posted = (am.get("bridge") or {}).get("alerts_posted")
    return (f"took part (gpuaware run: {am['fired']} alerts notified firing by Alertmanager, {am['resolved']} "
            f"resolved, {am['active_at_end']} active at the end"
            + (f"; {posted:.0f} alerts posted by the bridge" if posted is not None else "") + ")")


class Notifications:
    """A webhook receiver recording Alertmanager's notifications of one cluster's alerts, by the bus's
    fingerprint: when each was first notified firing and when resolved."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.alerts: dict[str, dict[str, Any]] = {}
        self.received = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    def record(self, payload: Mapping[str, Any], now: float) -> None:
        self.received += 1
        for a in payload.get("alerts") or []:
            labels = a.get("labels") or {}
            fp = labels.get(FINGERPRINT_LABEL)
            if not fp or labels.get("cluster") != self.cluster:
                continue
            entry = self.alerts.setdefault(fp, {
                "rule": labels.get("alertname"), "severity": labels.get("severity"), "node": labels.get("node"),
                "gpu_uuid": labels.get("gpu_uuid"), "fired_at": None, "resolved_at": None})
            # an alert raised and resolved within one group interval is notified resolved only
            if a.get("status") == "firing" and entry["fired_at"] is None:
                entry["fired_at"] = now
            elif a.get("status") == "resolved" and entry["resolved_at"] is None:
                entry["resolved_at"] = now

    async def start(self) -> str:
        async def on_post(request: web.Request) -> web.Response:
            with contextlib.suppress(ValueError):
                self.record(json.loads(await request.read()), time.time())
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/", on_post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return f"http://127.0.0.1:{self.port}/"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class DemoAlerting:
    """Alertmanager, the bridge and the record of one run (see the module docstring)."""

    def __init__(self, cfg: DemoConfig, spec: RunSpec) -> None:
        self.cfg, self.cluster = cfg, spec.cluster
        self.data_dir = cfg.out / f"alertmanager-{spec.label}"
        self.status = "not started"
        self.am: AlertmanagerProcess | None = None
        self.bridge: ServiceProcess | None = None
        self.notes = Notifications(spec.cluster)
        self.metrics_port = 0
        self.started_at = 0.0

    @staticmethod
    def skipped_because() -> str | None:
        """Why the bridge cannot run on this machine (None: it can)."""
        if not service_built(BRIDGE_MODULE):
            return f"the alert-bridge service is not installed ({BRIDGE_MODULE}; pip install -e services/alert_bridge)"
        if alertmanager_binary() is None:
            return ALERTMANAGER_MISSING
        return None

    async def start(self, start_process: StartProcess, nats_url: str) -> ServiceProcess | None:
        """Alertmanager, then the bridge process pointing at it, logged in to ``nats_url`` as its own
        user; None and the reason in ``status`` when it cannot run here."""
        why = self.skipped_because()
        if why is not None:
            self.status = f"skipped: {why}"
            return None
        hook, self.metrics_port = free_port(), free_port()
        try:
            record = await self.notes.start()
            self.am = await asyncio.to_thread(start_alertmanager, self.data_dir,
                                              webhook_urls=[f"http://127.0.0.1:{hook}/webhook", record])
        except (StackError, OSError) as exc:
            self.status = f"skipped: Alertmanager did not start ({exc})"
            await self.notes.stop()
            return None
        prefix = "GPUAWARE_ALERT_BRIDGE_"
        self.bridge = start_process(BRIDGE_NAME, BRIDGE_MODULE, {
            "NATS_URL": nats_url, **nats_login(self.cfg, BRIDGE_NAME), f"{prefix}ALERTMANAGER_URL": self.am.url, f"{prefix}LISTEN_PORT": str(hook),
            f"{prefix}CLUSTER": self.cluster, f"{prefix}INSTANCE_ID": BRIDGE_NAME, f"{prefix}RESEND_S": "10",
            f"{prefix}METRICS_PORT": str(self.metrics_port)})
        self.status = "running"
        self.started_at = time.time()
        return self.bridge

    async def finish(self, resolved_on_bus: set[str], timeout: float = 15.0) -> dict[str, Any]:
        """What Alertmanager reported for this run, once it has notified every alert the bus resolved
        (or ``timeout`` passed); the alerts still active there, and the bridge's counters."""
        if self.am is None:
            return {"status": self.status}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and not all(
                (self.notes.alerts.get(fp) or {}).get("resolved_at") for fp in resolved_on_bus):
            await asyncio.sleep(0.2)
        try:
            active = [a for a in await asyncio.to_thread(self.am.alerts)
                      if (a.get("labels") or {}).get("cluster") == self.cluster]
        except OSError as exc:
            active, self.status = [], f"Alertmanager did not answer at the end ({exc})"
        alerts = [{**a, **{k: None if a[k] is None else round(a[k] - self.started_at, 1)
                           for k in ("fired_at", "resolved_at")}} for a in self.notes.alerts.values()]
        return {"status": "took part" if self.status == "running" else self.status,
                "fired": len(alerts), "resolved": sum(1 for a in alerts if a["resolved_at"] is not None),
                "resolved_on_bus": len(resolved_on_bus),
                "resolved_on_bus_not_in_alertmanager": sorted(
                    fp for fp in resolved_on_bus if not (self.notes.alerts.get(fp) or {}).get("resolved_at")),
                "active_at_end": len(active), "notifications": self.notes.received,
                "bridge": await asyncio.to_thread(self._bridge_counters), "alerts": alerts}

    def _bridge_counters(self) -> dict[str, float] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
                totals = counter_totals(resp.read().decode(), BRIDGE_COUNTERS)
        except OSError:
            return None
        return {name.removeprefix("gpuaware_alert_bridge_"): v for name, v in totals.items()}

    async def stop(self) -> None:
        """Alertmanager and the record stopped (the bridge process is stopped with the run's others)."""
        if self.am is not None:
            await asyncio.to_thread(self.am.stop)
        await self.notes.stop()
