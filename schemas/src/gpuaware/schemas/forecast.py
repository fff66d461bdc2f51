"""Forecasts: what demand and GPU utilisation will look like over the next horizon.

A forecast is probabilistic: for each requested quantile (0.1, 0.5, 0.9 ...) a series of values
at ``start + k * step_s`` for ``k`` in ``0..horizon_steps-1``. ``values[q][k]`` is quantile
``quantiles[q]`` at step ``k``; the shape is checked on decode, so a consumer can index without
guarding. Quantiles rather than mean ± sigma because the LSTMs are trained on pinball loss and
placement/quota want "the 90th percentile of demand", not a Gaussian assumption.

Two granularities, both from the forecasting service:

* ``DemandPredicted`` — aggregate demand (per queue, per GPU model, cluster-wide), for quota
  and deferral of deferrable work. ``metric`` + ``labels`` say what a series measures.
* ``GpuUtilPredicted`` — per-GPU utilisation/memory of one node, for placement to pack
  fractional pods beside work that will stay quiet (interference-aware co-location).

``model`` and ``model_version`` name the registry entry that produced the forecast, so accuracy
tracking can join forecasts with what really happened.

And one request/reply endpoint, ``forecasting.duration``: how long will this job run? The forecasting
service learns the runtimes of recurring jobs from the binder's pod events (fingerprint: the name with
run tokens masked, the queue, the image, the GPUs) and answers with a conservative default for a job it
has never seen; quota's backfill asks it before starting a short job in a reservation's gap.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, Label, Name, Reply, Request, Text, Timestamp

__all__ = [
    "DEMAND_PREDICTED",
    "FORECAST_DURATION",
    "GPU_UTIL_PREDICTED",
    "LATENCY_SENSITIVE",
    "DemandPredicted",
    "DemandSeries",
    "DurationReply",
    "DurationRequest",
    "Forecast",
    "GpuForecast",
    "GpuUtilPredicted",
]

DEMAND_PREDICTED = "forecast.demand.predicted.v1"
GPU_UTIL_PREDICTED = "forecast.gpu.predicted.v1"
FORECAST_DURATION = "forecasting.duration"
LATENCY_SENSITIVE = "latency-sensitive"
"""``DemandSeries.labels["class"]`` of the demand of the pods someone waits for (the forecasting service's
latency-sensitive priority classes): the series placement keeps head-room for"""

Quantile = Annotated[float, Meta(gt=0, lt=1)]
Values = tuple[tuple[float, ...], ...]


def _check_shape(values: Values, quantiles: int, steps: int, where: str) -> None:
    if len(values) != quantiles or any(len(row) != steps for row in values):
        shape = f"{len(values)}x{[len(row) for row in values]}"
        raise ValueError(f"`values` of {where} is {shape}, expected {quantiles} quantiles x {steps} steps")


class DemandSeries(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One forecast series: what it measures (``metric`` + ``labels``) and its quantile values."""

    metric: Name
    """e.g. ``gpu_milli_requested``, ``gpus_busy``, ``pods_pending``"""
    labels: dict[Label, Label] = msgspec.field(default_factory=dict)
    """what the series is scoped to, e.g. ``{"queue": "team-a", "gpu_model": "A100-80GB"}``"""
    values: Values
    """``values[q][k]``: quantile ``q`` at step ``k``"""


class GpuForecast(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One GPU's forecast of one metric."""

    gpu_uuid: Name
    metric: Name = "util_pct"
    values: Values


class Forecast(Event, frozen=True, kw_only=True):
    """Fields every forecast shares (abstract: never published as such)."""

    model: Name
    model_version: Name
    issued_at: Timestamp
    """the forecast origin: the last observation the model saw"""
    start: Timestamp
    """time of step 0"""
    step_s: Annotated[float, Meta(gt=0)]
    horizon_steps: Annotated[int, Meta(ge=1, le=100_000)]
    quantiles: Annotated[tuple[Quantile, ...], Meta(min_length=1)]

    def __post_init__(self) -> None:
        if any(a >= b for a, b in zip(self.quantiles, self.quantiles[1:], strict=False)):
            raise ValueError(f"`quantiles` must increase strictly, got {self.quantiles}")

    @property
    def horizon_s(self) -> float:
        return self.step_s * self.horizon_steps


class DemandPredicted(Forecast, frozen=True, kw_only=True, tag=DEMAND_PREDICTED):
    """Aggregate demand forecast; one message per model run."""

    series: tuple[DemandSeries, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        for s in self.series:
            _check_shape(s.values, len(self.quantiles), self.horizon_steps, f"series {s.metric} {s.labels}")


class GpuUtilPredicted(Forecast, frozen=True, kw_only=True, tag=GPU_UTIL_PREDICTED):
    """Per-GPU forecast for every GPU of one node."""

    node: Name
    gpus: tuple[GpuForecast, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        for g in self.gpus:
            _check_shape(g.values, len(self.quantiles), self.horizon_steps, f"gpu {g.gpu_uuid} {g.metric}")


class DurationRequest(Request, frozen=True, kw_only=True, tag="forecasting.duration.request"):
    """How long will this job run? (What a pod says about itself; any part may be empty.)"""

    pod_name: Name
    queue: Name = "default"
    """the tenant whose past runs inform a job never seen before"""
    image: Label = ""
    num_gpu: Annotated[int, Meta(ge=0, le=64)] = 0


class DurationReply(Reply, frozen=True, kw_only=True, tag="forecasting.duration.reply"):
    """The predicted runtime and what it rests on."""

    seconds: Annotated[float, Meta(gt=0)]
    basis: Text
    """``recurring (n runs)``, ``novel: tenant p75``, ``novel: cluster p75`` or ``default``"""
    runs_observed: Annotated[int, Meta(ge=0)] = 0
    """finished runs the service has learnt from (all fingerprints)"""


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (DemandPredicted, GpuUtilPredicted)

#: the request/reply endpoints this module defines
ENDPOINTS: dict[str, tuple[type[Request], type[Reply]]] = {FORECAST_DURATION: (DurationRequest, DurationReply)}
