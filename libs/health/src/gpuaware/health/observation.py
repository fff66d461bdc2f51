"""What health scoring reads about one GPU at one time, and how the telemetry contract becomes it.

Why a type of its own and not ``GpuSample`` / ``GpuRollup`` directly: the service sees both (raw
samples carry cumulative counters, NVLink links and the pending-remap flag; one-minute rollups carry
deltas, throttle time and the window's worst temperature), the Calchas evaluation replays HBM error
logs, and the simulated fleet of the benchmark produces its own stream. One ``Observation`` with
both forms of each counter lets the same tracker serve all of them:

* a *cumulative* counter (``ecc_*_aggregate`` / ``_volatile``, ``retired_pages``, ``remapped_rows_*``,
  ``pcie_replay``, ``nvlink_crc_errors``) is differenced by the tracker, which also notices a counter
  going down (a driver reload clears the volatile counters) and re-baselines instead of counting;
* a *delta* (``*_delta``) is taken as is; it is used only when the cumulative form is absent.

``None`` means "not reported" everywhere (the contract's convention), never zero. ``xids`` are the
XIDs that arrived within the observation; ``xid_last`` is the sample's "last XID since the agent
started" gauge, of which only a *change* is a new XID.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from gpuaware.schemas import Anomaly, GpuRolledUp, GpuRollup, GpuSample, GpuSampled, ThrottleReason

__all__ = [
    "THERMAL_BITS",
    "Observation",
    "from_rolledup",
    "from_rollup",
    "from_sample",
    "from_sampled",
]

THERMAL_BITS = ThrottleReason.SW_THERMAL_SLOWDOWN | ThrottleReason.HW_THERMAL_SLOWDOWN | ThrottleReason.HW_SLOWDOWN
"""throttle bits that count as thermal throttling (HW slowdown fires on over-temperature too)"""


class Observation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One GPU at time ``at`` (Unix seconds; the end of the window for a rollup)."""

    gpu_uuid: str
    at: float
    node: str = ""
    gpu_index: int = 0
    interval_s: float = 60.0
    """how much time the observation stands for (the sample interval, the window width)"""
    model: str | None = None
    """GPU model (any name ``gpuaware.schemas.find_gpu_model`` knows): the slowdown temperature"""
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    pcie_replay: int | None = None
    nvlink_crc_errors: int | None = None
    ecc_corrected_delta: int | None = None
    ecc_uncorrected_delta: int | None = None
    remapped_rows_delta: int | None = None
    pcie_replay_delta: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    xid_last: int | None = None
    xids: tuple[int, ...] = ()
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None
    thermal_throttled_pct: float | None = None
    """share of the interval spent thermally throttled (rollups); else ``throttle_reasons`` decides"""
    nvlink_up: int | None = None


def from_sample(sample: GpuSample, *, at: float, node: str = "", interval_s: float = 60.0,
                model: str | None = None) -> Observation:
    """A raw sample (cumulative counters, gauges at the tick)."""
    return Observation(
        gpu_uuid=sample.gpu_uuid, gpu_index=sample.gpu_index, node=node, at=at, interval_s=interval_s,
        model=model,
        ecc_corrected_volatile=sample.ecc_corrected_volatile,
        ecc_uncorrected_volatile=sample.ecc_uncorrected_volatile,
        ecc_corrected_aggregate=sample.ecc_corrected_aggregate,
        ecc_uncorrected_aggregate=sample.ecc_uncorrected_aggregate,
        retired_pages=sample.retired_pages,
        remapped_rows_correctable=sample.remapped_rows_correctable,
        remapped_rows_uncorrectable=sample.remapped_rows_uncorrectable,
        pcie_replay=sample.pcie_replay,
        row_remap_pending=sample.row_remap_pending,
        xid_last=sample.xid_last,
        temperature_c=sample.temperature_c,
        power_w=sample.power_w,
        power_limit_w=sample.power_limit_w,
        throttle_reasons=sample.throttle_reasons,
        nvlink_up=sample.nvlink_up,
    )  # fmt: skip


def from_sampled(batch: GpuSampled, model_of: Callable[[str], str | None] | None = None) -> list[Observation]:
    """Every GPU row of a ``GpuSampled`` batch; ``model_of(gpu_uuid)`` names the model (inventory)."""
    return [from_sample(row, at=batch.sampled_at, node=batch.node, interval_s=batch.interval_s,
                        model=model_of(row.gpu_uuid) if model_of else None)
            for row in batch.rows()]  # fmt: skip


def from_rollup(rollup: GpuRollup, *, node: str, window_start: float, width_s: float,
                model: str | None = None) -> Observation:
    """A rollup window: counter deltas, the window's worst temperature and power, throttle time.

    The rollup's ``throttled_pct`` counts every throttle reason but idle; it is taken as thermal time
    only when the agent flagged the window ``Anomaly.THERMAL`` (else power capping, a normal state,
    would read as heat). ``Anomaly.GPU_LOST`` is the agent's XID 79 (fallen off the bus)."""
    xids: list[int] = [rollup.xid_last] if rollup.xid_last else []
    if rollup.anomaly_flags & Anomaly.GPU_LOST and 79 not in xids:
        xids.append(79)
    thermal = None
    if rollup.throttled_pct is not None:
        thermal = rollup.throttled_pct if rollup.anomaly_flags & Anomaly.THERMAL else 0.0
    return Observation(
        gpu_uuid=rollup.gpu_uuid, gpu_index=rollup.gpu_index, node=node, at=window_start + width_s,
        interval_s=width_s, model=model,
        ecc_uncorrected_delta=rollup.ecc_uncorrected_delta,
        remapped_rows_delta=rollup.remapped_rows_delta,
        pcie_replay_delta=rollup.pcie_replay_delta,
        xids=tuple(xids),
        temperature_c=rollup.temperature_c.max if rollup.temperature_c else None,
        power_w=rollup.power_w.max if rollup.power_w else None,
        thermal_throttled_pct=thermal,
    )  # fmt: skip


def from_rolledup(message: GpuRolledUp, width_s: float,
                  model_of: Callable[[str], str | None] | None = None) -> list[Observation]:
    """Every GPU of a ``GpuRolledUp`` message (``width_s``: the window's width, e.g. 60)."""
    return [from_rollup(r, node=message.node, window_start=message.window_start, width_s=width_s,
                        model=model_of(r.gpu_uuid) if model_of else None)
            for r in message.gpus]  # fmt: skip


def sorted_by_time(observations: Iterable[Observation]) -> list[Observation]:
    """Observations in time order (stable for equal times), e.g. before a replay."""
    return sorted(observations, key=lambda o: o.at)
