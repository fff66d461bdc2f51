"""gpuaware.alerting: the bus's alerts and Alertmanager's, both ways (pure: no network).

    OpenAlerts.apply(event)          -> the alerts still open, to (re)post to Alertmanager
    to_alertmanager(raised|resolved) -> one alert of Alertmanager's API v2 (POST /api/v2/alerts)
    Forwarder                        -> what to post when: live alerts, periodic resends, resolutions
                                        kept across a failed post; BridgeStats counts both ways
    from_webhook(payload)            -> a WebhookBatch: events to publish, each bad alert refused with
                                        its reason (for a dead letter), the bus's own alerts skipped

The wiring (following ``alerts.>``, posting, serving the webhook, readiness, metrics) is the
alert-bridge service, ``gpuaware.services.alert_bridge`` (``gpuaware alerts bridge`` runs it).
"""

from gpuaware.alerting.alertmanager import FINGERPRINT_LABEL, SOURCE_PREFIX, OpenAlerts, to_alertmanager
from gpuaware.alerting.forwarder import BridgeStats, Forwarder
from gpuaware.alerting.webhook import (
    RefusedAlert,
    WebhookBatch,
    WebhookError,
    from_webhook,
    parse_notification,
)

__all__ = [
    "FINGERPRINT_LABEL",
    "SOURCE_PREFIX",
    "BridgeStats",
    "Forwarder",
    "OpenAlerts",
    "RefusedAlert",
    "WebhookBatch",
    "WebhookError",
    "from_webhook",
    "parse_notification",
    "to_alertmanager",
]
