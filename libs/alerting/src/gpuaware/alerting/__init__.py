"""gpuaware.alerting: the bus's alerts and Alertmanager's, both ways (pure: no network).

    OpenAlerts.apply(event)        -> the alerts still open, to (re)post to Alertmanager
    to_alertmanager(raised|resolved) -> one alert of Alertmanager's API v2 (POST /api/v2/alerts)
    from_webhook(payload)          -> AlertRaised / AlertResolved events from a webhook notification

The wiring (following ``alerts.>``, posting, serving the webhook) is ``gpuaware alerts bridge``.
"""

from gpuaware.alerting.alertmanager import (
    FINGERPRINT_LABEL,
    OpenAlerts,
    WebhookError,
    from_webhook,
    to_alertmanager,
)

__all__ = ["FINGERPRINT_LABEL", "OpenAlerts", "WebhookError", "from_webhook", "to_alertmanager"]
