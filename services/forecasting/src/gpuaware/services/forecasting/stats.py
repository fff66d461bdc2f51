"""What a forecasting instance reports about itself: its Prometheus series (the ``forecasting.stats``
reply is the contract's ``gpuaware.schemas.ForecastStats``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuaware.runtime import Sample, counter, gauge

if TYPE_CHECKING:
    from gpuaware.services.forecasting.service import ForecastService


def forecasting_samples(service: ForecastService) -> Iterable[Sample]:
    """Forecasting's Prometheus series: forecasts published, whether each model is served or drifting
    (``gpuaware_forecast_model_drift`` 1 = its recent error is above persistence's: persistence is
    served), minutes of demand stepped, runtimes learnt."""
    c = service.counts
    yield counter("gpuaware_forecast_published", "forecast messages published", c["published"] + c["demand_published"])
    yield counter("gpuaware_forecast_demand_minutes", "closed minutes of demand stepped", c["demand_minutes"])
    yield counter("gpuaware_forecast_store_failures", "forecasts whose record could not be stored", c["store_failures"])
    yield counter("gpuaware_forecast_publish_failures", "forecasts and drift alerts that could not be published",
                  c["publish_failures"])
    yield counter("gpuaware_forecast_window_failures", "windows whose step failed (logged)", c["window_failures"])
    yield counter("gpuaware_forecast_reloads", "models loaded from the registry (hot reloads)", c["reloads"])
    for slot, server in service.servers.items():
        label = server.model_label if server.model is not None else ""
        yield gauge("gpuaware_forecast_model_served", "1 when a registry model serves (0: persistence)",
                    int(server.model is not None), slot=slot, model=label)
        yield gauge("gpuaware_forecast_model_drift", "1 while the model's recent error is above persistence's",
                    int(server.drifting), slot=slot, model=label)
    yield counter("gpuaware_forecast_runtimes_learnt", "finished runs the duration predictor learnt from",
                  c["runtimes_learnt"])
