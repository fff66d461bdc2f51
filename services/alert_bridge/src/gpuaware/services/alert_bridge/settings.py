"""The alert bridge's one frozen settings object, read once from ``GPUAWARE_ALERT_BRIDGE_*``.

``NATS_URL`` / ``NATS_USER`` / ``NATS_PASSWORD`` are honoured as fallbacks, as for every service (its
identity is ``alert-bridge``). ``CLUSTER`` is the cluster of a webhook alert without a ``cluster``
label. The bridge needs something to do: an Alertmanager to post to, a webhook to serve, or both.
"""

from __future__ import annotations

from typing import ClassVar

from gpuaware.runtime import ServiceSettings, SettingsError


class AlertBridgeSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_ALERT_BRIDGE_"

    service_name: str = "alert-bridge"
    alertmanager_url: str = ""
    """Alertmanager's base URL (``http://alertmanager:9093``): every alert on ``alerts.>`` is posted to
    its ``/api/v2/alerts``; empty = nothing is forwarded (the webhook alone)"""
    resend_s: float = 60.0
    """post the open alerts again this often; keep it under Alertmanager's ``resolve_timeout`` (5 min)"""
    post_timeout_s: float = 5.0
    """how long one post to Alertmanager (or one readiness probe of it) may take"""
    catch_up_s: float = 30.0
    """at start, how long to replay the alerts stream (what is open) before posting it"""
    listen_port: int = 0
    """serve HTTP on this port: ``POST /webhook`` (when ``webhook``), ``GET /healthz`` (alive) and
    ``GET /readyz`` (NATS connected and, when configured, Alertmanager answering); 0 = no HTTP"""
    listen_addr: str = "127.0.0.1"
    """address the HTTP endpoint listens on (the chart: ``0.0.0.0``, for Alertmanager and the kubelet)"""
    webhook: bool = True
    """receive Alertmanager's webhook notifications (``POST /webhook``) and publish them on the bus"""
    publish_timeout_s: float = 5.0
    """how long publishing one webhook alert on the bus may take before the notification fails (503,
    Alertmanager retries it)"""

    def __post_init__(self) -> None:
        if self.alertmanager_url and not self.alertmanager_url.startswith(("http://", "https://")):
            raise SettingsError(f"{self.prefix}ALERTMANAGER_URL must be an http:// or https:// URL, "
                                f"got {self.alertmanager_url!r}")
        if not 0 <= self.listen_port <= 65535:
            raise SettingsError(f"{self.prefix}LISTEN_PORT must be 0 (no HTTP) or a TCP port, got {self.listen_port}")
        for name in ("resend_s", "post_timeout_s", "publish_timeout_s"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{self.prefix}{name.upper()} must be positive")
        if not self.alertmanager_url and not (self.listen_port and self.webhook):
            raise SettingsError(f"nothing to do: set {self.prefix}ALERTMANAGER_URL (post the bus's alerts), "
                                f"{self.prefix}LISTEN_PORT (serve the webhook), or both")

    @property
    def forwarding(self) -> bool:
        return bool(self.alertmanager_url)

    @property
    def serving_webhook(self) -> bool:
        return bool(self.listen_port and self.webhook)
