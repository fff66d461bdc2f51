"""The forecasting service's one frozen settings object, read once from ``GPUAWARE_FORECASTING_*``
(``NATS_URL`` / ``DATABASE_URL`` as fallbacks, as for every service).

Sample::

    GPUAWARE_FORECASTING_MODEL_NAME=gentd26     # utilisation: the newest version of this registry name
    GPUAWARE_FORECASTING_DEMAND_MODEL_NAME=demand  # demand per queue (trained on Helios VCs' demand)
    GPUAWARE_FORECASTING_RELOAD_S=30            # how often the registry is asked for a newer version
    GPUAWARE_FORECASTING_TIME_SCALE=1           # a digital twin's speed (its GPUs' seconds per second)
    GPUAWARE_FORECASTING_LATENCY_CLASSES=inference-critical,interactive  # their demand: one more series
    GPUAWARE_FORECASTING_HOURS_AHEAD=true       # demand 3, 6 and 12 h ahead too (labels horizon=hours)
    GPUAWARE_FORECASTING_HOURS_HORIZONS=3,6,12  # whole hours, at most 24
    GPUAWARE_FORECASTING_HOURS_HISTORY_DAYS=14  # the 10-minute history kept per demand series

Why ``time_scale``: a step of the per-GPU series is a minute of the GPUs' own time. Real GPUs live on
their telemetry's clock, and the collector's one-minute rollups are those minutes. A digital twin
replaying a day in a minute lives ``time_scale`` times faster: one rollup would span hours of its
GPUs' lives, so the series are built from the agents' samples instead, a window per minute of the
GPUs' time, and forecasts are published on the telemetry's clock (as health-scoring's ``time_scale``).
"""

from __future__ import annotations

from typing import ClassVar

from gpuaware.runtime import DatabaseSettings, SettingsError
from gpuaware.schemas import FORECASTING, FORECASTING_LEASE_BUCKET

__all__ = ["FORECASTING", "ForecastingSettings"]


class ForecastingSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_FORECASTING_"

    service_name: str = FORECASTING

    model_name: str = ""
    """the utilisation model's registry name (its highest version served); empty = the newest model
    of any name but the demand model's"""
    demand_model_name: str = "demand"
    """the demand model's registry name (GPUs requested per queue, per minute)"""
    reload_s: float = 30.0
    """how often the registry is polled for a newer version (hot reload)"""
    flush_s: float = 5.0
    """a window is stepped when the next window's first rollup arrives, or this long after its own
    first rollup (the nodes' rollups of one window arrive over the collector's flush)"""
    store_points: bool = True
    """store every forecast (p50/p90 per horizon, and the demand series' p10) and, when the target window
    arrives, its actual"""
    drift_halflife: float = 2000.0
    """drift tracking: half-life, in scored points (series x windows), of the recent squared errors"""
    drift_min_points: int = 1000
    """errors scored before the model can be judged worse than persistence"""
    drift_margin: float = 0.05
    """the model is worse when its recent RMSE exceeds persistence's by this fraction"""
    time_scale: float = 1.0
    """seconds of the GPUs' own time per second of their telemetry's clock (1: real GPUs; a twin's speed)"""
    latency_classes: str = "inference-critical,interactive"
    """comma-separated priority classes whose pods someone waits for: their demand is forecast as one more
    series (``labels`` ``{"class": "latency-sensitive"}``), the one placement keeps head-room for"""

    lease_bucket: str = FORECASTING_LEASE_BUCKET
    """NATS KV bucket of the leader lease (the key is the cluster name): two replicas follow the same
    streams and step the same series; only the leader publishes and stores"""
    lease_ttl_s: float = 3.0
    """a leader that died is replaced within about this long (plus ``lease_poll_s``)"""
    lease_poll_s: float = 0.25
    """how often a standby tries to take the lease"""
    handover_s: float = 30.0
    """wall seconds a standby keeps the forecasts it made and did not publish: a new leader publishes
    those its predecessor had not (FORECAST's duplicate window, two minutes, must cover it)"""

    hours_ahead: bool = True
    """forecast every demand series hours ahead as well (``gpuaware.forecast.hours``: persistence, seasonal
    naive or a ridge on lags and the hour of day, chosen per series on its recent errors): published as
    ``DemandPredicted`` with an hourly path and ``labels`` ``{"horizon": "hours"}``, stored at those horizons"""
    hours_horizons: str = "3,6,12"
    """comma-separated whole hours (1 to 24, increasing): the horizons forecast; the path runs hourly to the last"""
    hours_history_days: float = 14.0
    """days of each demand series kept at 10-minute resolution for the hours-ahead forecasts (the ridge is
    fitted on them once a day, from three days on)"""

    def latency_class_set(self) -> frozenset[str]:
        return frozenset(c.strip() for c in self.latency_classes.split(",") if c.strip())

    def hours_horizon_list(self) -> tuple[int, ...]:
        """``hours_horizons`` as whole hours; SettingsError unless they are 1 to 24, increasing."""
        what = f"{self.prefix}HOURS_HORIZONS must be increasing whole hours from 1 to 24, got {self.hours_horizons!r}"
        try:
            hours = tuple(int(h) for h in self.hours_horizons.split(",") if h.strip())
        except ValueError:
            raise SettingsError(what) from None
        if not hours or list(hours) != sorted(set(hours)) or hours[0] < 1 or hours[-1] > 24:
            raise SettingsError(what)
        return hours

    def __post_init__(self) -> None:
        self.require_positive("reload_s", "flush_s", "db_timeout_s", "time_scale", "lease_ttl_s", "lease_poll_s",
                              "handover_s")
        if self.handover_s > 110.0:
            raise SettingsError(f"{self.prefix}HANDOVER_S must be at most 110 s (the FORECAST stream's duplicate "
                                f"window is 120 s), got {self.handover_s:g}")
        if self.hours_ahead:
            self.hours_horizon_list()
            if not 1.0 <= self.hours_history_days <= 60.0:
                raise SettingsError(f"{self.prefix}HOURS_HISTORY_DAYS must be 1 to 60, got {self.hours_history_days:g}")
