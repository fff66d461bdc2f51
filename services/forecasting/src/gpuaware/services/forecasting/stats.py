"""What a forecasting instance reports about itself: the ``forecasting.stats`` reply and its
Prometheus series."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from gpuaware.runtime.metrics import Sample, counter, gauge

if TYPE_CHECKING:
    from gpuaware.services.forecasting.service import ForecastService

STATS_SUBJECT = "forecasting.stats"


class StatsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Ask a forecasting instance for its counters (no fields)."""


class ForecastStats(msgspec.Struct, frozen=True, kw_only=True):
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


def forecasting_samples(service: ForecastService) -> Iterable[Sample]:
    """Forecasting's Prometheus series: forecasts published, whether each model is served or drifting
    (``gpuaware_forecast_model_drift`` 1 = its recent error is above persistence's: persistence is
    served), minutes of demand stepped, runtimes learnt."""
    c = service.counts
    yield counter("gpuaware_forecast_published", "forecast messages published", c["published"] + c["demand_published"])
    yield counter("gpuaware_forecast_demand_minutes", "closed minutes of demand stepped", c["demand_minutes"])
    yield counter("gpuaware_forecast_store_failures", "forecasts whose record could not be stored", c["store_failures"])
    yield counter("gpuaware_forecast_reloads", "models loaded from the registry (hot reloads)", c["reloads"])
    for slot, server in service.servers.items():
        label = server.model_label if server.model is not None else ""
        yield gauge("gpuaware_forecast_model_served", "1 when a registry model serves (0: persistence)",
                    int(server.model is not None), slot=slot, model=label)
        yield gauge("gpuaware_forecast_model_drift", "1 while the model's recent error is above persistence's",
                    int(server.drifting), slot=slot, model=label)
    yield counter("gpuaware_forecast_runtimes_learnt", "finished runs the duration predictor learnt from",
                  c["runtimes_learnt"])
