"""Operational endpoints: what a service answers about itself on ``<service>.stats``.

These are introspection for operators, the demo, the drills and the benches, not messages another
service acts on, so they stay outside the contract's registry: the subjects carry no version, a
request is ``{}``, and a reply is a plain object of counters without the event envelope. Their
subjects and reply shapes are still the contract's, defined here once: the services serve them and
any consumer decodes them with these types.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "COLLECTOR_STATS",
    "FORECASTING_STATS",
    "HEALTH_STATS",
    "CollectorStats",
    "ConsumerCounters",
    "ForecastStats",
    "HealthStats",
    "StatsRequest",
]

COLLECTOR_STATS = "collector.stats"
HEALTH_STATS = "health.stats"
FORECASTING_STATS = "forecasting.stats"


class StatsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Ask a service for its counters (no fields)."""


class ConsumerCounters(msgspec.Struct, frozen=True, kw_only=True):
    """What a service's durable consumers did since it started, summed over them."""

    received: int
    processed: int
    decode_errors: int
    dead_lettered: int
    retried: int


class CollectorStats(ConsumerCounters, frozen=True, kw_only=True):
    """Counters of one collector process since it started (``collector.stats``)."""

    instance: str
    rejected: dict[str, int]
    """refused sample batches by ``check_batch`` code (each also dead-lettered)"""
    redeliveries: int
    """sample batches seen again (after a crash, a timeout or a retry); their rows are never stored twice"""
    rows_written: int
    rows_new: int
    """rows not stored before (rows_written - rows_new were already there: redelivered)"""
    copies: int
    copy_retries: int
    copy_failures: int
    last_db_error: str
    inventory_gpus: int
    usage_rows: int
    rollups_published: dict[str, int]
    maintenance_errors: int
    watermark: float | None


class HealthStats(ConsumerCounters, frozen=True, kw_only=True):
    """Counters of one health-scoring instance since it started (states and bad input: since ever)
    (``health.stats``)."""

    instance: str
    cluster: str
    gpus: int
    states: dict[str, int]
    """GPUs per effective state"""
    open_alerts: int
    counts: dict[str, int]
    """observations, redelivered (skipped: already applied), refused, state_changes, cordons ..."""
    issues: dict[str, int]
    """bad input met since this instance started, by kind (out_of_order, duplicate, gap, counter_reset,
    unknown_xid, stale)"""
    inputs: dict[str, Any]
    """the book's InputCounters summed over the GPUs (persisted with them: since the GPUs were first seen)"""
    published: dict[str, int]
    publish_duplicates: int
    checkpoints: int
    checkpoint_failures: int
    last_db_error: str
    restored_gpus: int
    restored_alerts: int


class ForecastStats(msgspec.Struct, frozen=True, kw_only=True):
    """What one forecasting instance serves and has done since it started (``forecasting.stats``)."""

    model: str
    """``name@version`` served, or empty"""
    unusable: str
    """why no model is served (empty when one is)"""
    series: int
    windows: int
    published: int
    late_windows: int
    store_failures: int
    reloads: int
    drift_alerts: int
    demand_model: str = ""
    """``name@version`` of the demand model served, or empty"""
    demand_unusable: str = ""
    demand_series: int = 0
    demand_minutes: int = 0
    demand_published: int = 0
    runtimes_learnt: int = 0
    """finished runs the duration predictor learnt from"""
    publish_failures: int = 0
    """forecasts and drift alerts that could not be published (the window's others still were)"""
    window_failures: int = 0
    """windows whose step failed (logged with the error; later windows go on)"""
