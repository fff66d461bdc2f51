"""Forecasting handlers: rollups and pod events in, one batched model step per window, forecasts out.

    reads                                              does
    follow telemetry.node.inventory.v1.<c>.>          each GPU's model (the per-GPU-model series)
    follow telemetry.gpu.rolledup.v1.<c>.> (1m only)   buffers a window's rollups; steps every series
                                                       once (gpuaware.forecast.serving.Server: one
                                                       onnxruntime call for all of them) when the next
                                                       window starts or ``flush_s`` after the first
    follow telemetry.gpu.sampled.v1.<c>.> (new; only   the same from the agents' samples, in windows of
           with ``time_scale`` > 1)                    one minute of the GPUs' time (a digital twin's:
                                                       its one-minute rollup spans ``time_scale``
                                                       minutes of its GPUs' lives); a window closes
                                                       ``SAMPLE_GRACE_S`` of the telemetry's clock after
                                                       it ends (one scrape round's samples straddle
                                                       several such windows and arrive in any order)
    follow binder.pod.{pending,finished,preempted,     GPU demand (running + pending) per queue and the
           bind_failed}.v1 (all clusters': its own     cluster's total, per minute of the events' own
           kept)                                       clock (gpuaware.forecast.demand); each closed
                                                       minute steps the demand model's series once
    every reload_s: the registry (forecast_models)     a higher version of either model (utilisation:
                                                       ``model_name``; demand: ``demand_model_name``) ->
                                                       loaded and served (hot reload); an unusable one
                                                       is refused with the reason, the current one kept
    forecasting.duration (request/reply)               a job's predicted runtime (gpuaware.forecast.duration:
                                                       learnt from the pods that finished, by fingerprint)
    forecasting.stats (request/reply)                  counters, the models served, why not

    publishes  forecast.gpu.predicted.v1.<c>.<node>    per node and (model, version): p50/p90 paths
               forecast.demand.predicted.v1.<c>        node- and GPU-model-level utilisation series, and
                                                       per minute the demand series (``gpus_requested``,
                                                       per queue; p10/p50/p90 paths); every 10 minutes
                                                       the same hours ahead (gpuaware.forecast.hours:
                                                       hourly paths, labels ``horizon: hours``)
               alerts.gpu.raised|resolved.v1.<c>       forecast_model_drift: the model's recent error
                                                       above persistence's (it then serves persistence)
    stores     forecast_points                         each forecast, then its actual (accuracy)

Why follow, not a durable consumer: forecasts are for now; a restarted instance replays the stream's
retained rollups and pod events to warm every series' state and the demand book (no forecast is
published for a replayed window), then goes on live. A model is served only where ``runtime.Streams`` trusts it; elsewhere, and whenever the
registry is empty or its model unusable, persistence is published with ``model="persistence"`` and
``model_version="baseline: <reason>"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.runtime import ServiceContext
from gpuaware.schemas import (
    FORECAST_DURATION,
    FORECASTING_STATS,
    DurationReply,
    DurationRequest,
    ForecastStats,
    StatsRequest,
)
from gpuaware.services.forecasting.service import ForecastService
from gpuaware.services.forecasting.settings import ForecastingSettings
from gpuaware.services.forecasting.stats import forecasting_samples

__all__ = ["ForecastService", "mount", "mounter"]


async def mount(ctx: ServiceContext, *, on_service: Callable[[ForecastService], None] | None = None,
                ) -> list[bus.Endpoint[Any, Any]]:
    """Open the pool, start the service, and serve ``duration`` and ``stats``."""
    settings: ForecastingSettings = ctx.settings  # type: ignore[assignment]  # run_service builds the settings class mount asked for
    pool = await tsdb.open_service_pool(settings.database_url, service=settings.service_name,
                                        env=settings.database_variable, max_size=settings.pool_size,
                                        timeout=settings.db_timeout_s)
    service = ForecastService(settings, ctx.js, pool, ctx.instance_id)
    ctx.on_stop(service)
    await service.start()
    if on_service is not None:
        on_service(service)

    async def stats(_req: StatsRequest) -> ForecastStats:
        return service.stats()

    async def duration(req: DurationRequest) -> DurationReply:
        if req.cluster != settings.cluster:
            raise bus.ServiceError(404, f"this forecasting instance serves cluster {settings.cluster!r}, "
                                        f"not {req.cluster!r}")
        return service.duration(req)

    ctx.metrics.source(lambda: forecasting_samples(service))
    ctx.metrics.source(service.model_alarm.samples)
    return [bus.Endpoint(name="duration", subject=FORECAST_DURATION, request_type=DurationRequest, handler=duration),
            bus.Endpoint(name="stats", subject=FORECASTING_STATS, request_type=StatsRequest, handler=stats)]


def mounter(on_service: Callable[[ForecastService], None],
            ) -> Callable[[ServiceContext], Awaitable[list[bus.Endpoint[Any, Any]]]]:
    """``mount`` that also hands the running ``ForecastService`` to ``on_service`` (tests)."""

    async def _mount(ctx: ServiceContext) -> list[bus.Endpoint[Any, Any]]:
        return await mount(ctx, on_service=on_service)

    return _mount
