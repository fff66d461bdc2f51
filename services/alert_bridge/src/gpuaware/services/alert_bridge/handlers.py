"""The alert bridge on the bus: ``mount`` starts the bridge and its HTTP endpoint. No logic here.

    followed                         what happens
    alerts.gpu.raised.v1.>           posted to Alertmanager (``AlertBridge``, ``gpuaware.alerting.Forwarder``)
    alerts.gpu.resolved.v1.>         (ALERTS stream, replayed from its start: what is open)
    HTTP POST /webhook               published as alerts.gpu.{raised,resolved}.v1.<cluster token>;
                                     a refused alert dead-lettered with the reason (``http.py``)
    HTTP GET /healthz, /readyz       liveness; readiness (NATS connected, Alertmanager answering)

No request/reply endpoint: NATS micro's ``$SRV.PING|INFO|STATS.alert-bridge`` still answer. Metrics
(``metrics_port``): ``gpuaware_alert_bridge_*`` counters (posted, post failures, notifications,
published, refused, skipped) and gauges (open alerts, alerts waiting, Alertmanager up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gpuaware import bus
from gpuaware.runtime import Mount, Sample, ServiceContext, counter, gauge
from gpuaware.services.alert_bridge.bridge import AlertBridge
from gpuaware.services.alert_bridge.http import HttpEndpoint
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings

__all__ = ["bridge_samples", "make_mount", "mount"]

log = logging.getLogger(__name__)


def bridge_samples(bridge: AlertBridge) -> Iterable[Sample]:
    st = bridge.stats
    yield counter("gpuaware_alert_bridge_alerts_posted", "alerts Alertmanager accepted", st.posted)
    yield counter("gpuaware_alert_bridge_post_failures", "posts to Alertmanager that failed", st.post_failures)
    yield counter("gpuaware_alert_bridge_notifications", "webhook notifications received", st.notifications)
    yield counter("gpuaware_alert_bridge_bad_notifications", "webhook bodies refused whole (HTTP 400)",
                  st.bad_notifications)
    for outcome, n in (("published", st.published), ("refused", st.refused), ("skipped_own", st.skipped_own)):
        yield counter("gpuaware_alert_bridge_webhook_alerts", "webhook alerts by outcome (refused ones are "
                      "dead-lettered; the bus's own are not published back)", n, outcome=outcome)
    yield gauge("gpuaware_alert_bridge_open_alerts", "the bus's alerts open (posted until resolved)",
                len(bridge.forwarder.alerts.open))
    yield gauge("gpuaware_alert_bridge_waiting_alerts", "alerts waiting to be posted", bridge.forwarder.waiting)
    if bridge.alertmanager_up is not None:
        yield gauge("gpuaware_alert_bridge_alertmanager_up", "1 when the last post or probe reached Alertmanager",
                    float(bridge.alertmanager_up))


def make_mount(on_bridge: Callable[[AlertBridge], None] | None = None) -> Mount:
    """A ``mount`` for ``run_service``; tests get the running bridge back."""

    async def mount_bridge(ctx: ServiceContext) -> list[bus.Endpoint]:
        settings: AlertBridgeSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
        bridge = AlertBridge(ctx.nc, ctx.js, settings, source=f"{settings.service_name}/{ctx.instance_id}")
        ctx.on_stop(bridge)
        await bridge.start()
        if settings.listen_port:
            endpoint = HttpEndpoint(bridge, settings.listen_addr, settings.listen_port, webhook=settings.webhook)
            await endpoint.start()
            ctx.on_stop(endpoint)  # stopped before the bridge: no notification arrives after it
        ctx.metrics.source(lambda: bridge_samples(bridge))
        if on_bridge is not None:
            on_bridge(bridge)
        return []

    return mount_bridge


mount = make_mount()
