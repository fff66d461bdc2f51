"""What the bridge posts to Alertmanager, and when, without the network.

The bridge follows ``alerts.>`` and hands every event to ``Forwarder.on_event``; a sender posts
``take()`` to ``POST /api/v2/alerts`` and reports the outcome with ``done(batch, ok)``:

* a live event's alert is queued at once (events replayed at start only rebuild the open set);
* ``resend()`` queues every open alert again: Alertmanager resolves a firing alert it does not hear
  about within its ``resolve_timeout``, and a restarted Alertmanager learns what is open;
* a failed post keeps the *resolutions* of its batch for the next try (a firing alert is resent
  anyway; a lost resolution would leave a page open), at most ``max_unsent`` of them.

``BridgeStats`` counts both directions; the service exports them as Prometheus counters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuaware.alerting.alertmanager import OpenAlerts, to_alertmanager
from gpuaware.schemas import AlertRaised, AlertResolved

__all__ = ["BridgeStats", "Forwarder"]


@dataclass(slots=True)
class BridgeStats:
    """The bridge's counters, both ways."""

    followed: int = 0
    """alert events read from the bus (replayed ones included)"""
    posted: int = 0
    """alerts Alertmanager accepted"""
    post_failures: int = 0
    """posts Alertmanager did not accept (unreachable, or an error status)"""
    notifications: int = 0
    """webhook notifications received"""
    bad_notifications: int = 0
    """webhook bodies refused whole (HTTP 400: not a notification)"""
    published: int = 0
    """alerts from Alertmanager published on the bus"""
    skipped_own: int = 0
    """the bus's own alerts coming back through the webhook: not published again"""
    refused: int = 0
    """alerts of a notification that could not become an event (dead-lettered with the reason)"""


class Forwarder:
    """The bus -> Alertmanager direction's state: open alerts, and what waits to be posted."""

    def __init__(self, *, max_unsent: int = 10_000) -> None:
        self.alerts = OpenAlerts()
        self.max_unsent = max_unsent
        self.stats = BridgeStats()
        self._queued: list[dict[str, Any]] = []
        self._unsent: list[dict[str, Any]] = []
        """resolutions Alertmanager has not taken yet"""

    def on_event(self, ev: AlertRaised | AlertResolved, *, replay: bool) -> bool:
        """Track ``ev``; True when an alert was queued for posting (live, and not Alertmanager's own)."""
        self.stats.followed += 1
        alert = self.alerts.apply(ev)
        if alert is None or replay:
            return False
        self._queued.append(alert)
        return True

    def resend(self) -> None:
        """Queue every open alert again."""
        self._queued.extend(to_alertmanager(a) for a in self.alerts.firing())

    def take(self) -> list[dict[str, Any]]:
        """The next batch to post (resolutions a failed post left first); empty when nothing waits."""
        batch, self._unsent, self._queued = [*self._unsent, *self._queued], [], []
        return batch

    def done(self, batch: list[dict[str, Any]], ok: bool) -> None:
        """The outcome of posting ``batch``: counted; on failure its resolutions wait for the next post."""
        if ok:
            self.stats.posted += len(batch)
            return
        self.stats.post_failures += 1
        self._unsent = [*(a for a in batch if "endsAt" in a), *self._unsent][-self.max_unsent:]

    @property
    def waiting(self) -> int:
        return len(self._queued) + len(self._unsent)
