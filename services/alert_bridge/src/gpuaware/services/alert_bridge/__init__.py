"""The alert bridge: the bus's alerts to Alertmanager, and Alertmanager's notifications onto the bus.

    python -m gpuaware.services.alert_bridge      # GPUAWARE_ALERT_BRIDGE_* settings, see settings.py
    gpuaware alerts bridge --alertmanager URL --listen-port 9095     # the same process, from options

One process so one routing tree pages people. Every ``AlertRaised`` / ``AlertResolved`` on
``alerts.>`` (health-scoring's GPU alerts, forecasting's drift alert, ...) is posted to
Alertmanager's API; open alerts are posted again every ``resend_s`` and a restarted bridge rebuilds
them by replaying the ALERTS stream. Its webhook receiver publishes what Alertmanager routes to it
(Prometheus's rules in deploy/prometheus/rules.yaml, anything else) as ``AlertRaised`` /
``AlertResolved`` with ``source`` ``alertmanager/<receiver>``. Translation, batching and loop
prevention are ``gpuaware.alerting``; ``bridge.py`` is the I/O, ``http.py`` the webhook and probes,
``handlers.py`` the mount. Runs as NATS identity ``alert-bridge`` (``gpuaware.schemas.permissions``).
"""

__version__ = "0.1.0"
