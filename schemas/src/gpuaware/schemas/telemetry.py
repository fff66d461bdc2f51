"""GPU samples and rollups: the high-rate side of the platform.

One ``GpuSampled`` batch per node per tick carries every GPU of the node. It is *columnar*: one
tuple per metric, one entry per GPU, aligned with ``gpu_uuid``. A 32-GPU × 25-metric batch names
each metric once instead of 32 times (about a quarter of the bytes of a list of objects), the
collector COPYs columns straight into TimescaleDB, and a validation error names the metric and the
GPU position (``$.util_pct[3]``). Producers and consumers that think in rows use
``GpuSampled.from_samples`` and ``GpuSampled.rows()`` with the ``GpuSample`` view, which is
not itself a message.

Evolution: a new metric is a new column defaulting to ``()``. An empty column means "not
collected by this agent"; ``None`` inside a column means "this GPU does not report it" (NVML
NotSupported, MIG mode, a consumer board without ECC). Counters (ECC, retired/remapped rows, PCIe
replays) are cumulative as the driver reports them; rollups turn them into deltas.

Edge aggregation: an agent sends a GPU's row only when it moved beyond a deadband, when something
that matters happened to it, or when its (backing-off) heartbeat is due, so a batch may carry a
subset of the node's GPUs. ``anomaly_flags`` (added later, hence defaulted) carries the agent's
per-GPU verdicts as ``Anomaly`` bits, computed from every local reading, not only the sent ones.

Rollups summarise a window (1 minute, 1 hour) per GPU as ``{mean, max, p95}`` per metric. They are
objects, not ``array_like`` triples: rollups are low-rate, and objects keep the published JSON
Schema within draft-07 (no ``prefixItems``), which AsyncAPI tooling still expects.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import (
    Event,
    GpuIndex,
    MiB,
    Name,
    NonNegInt,
    Percent,
    Timestamp,
)

__all__ = [
    "GPU_ROLLED_UP",
    "GPU_SAMPLED",
    "METRIC_COLUMNS",
    "Anomaly",
    "GpuRolledUp",
    "GpuRollup",
    "GpuSample",
    "GpuSampled",
    "RollupWindow",
    "Stats",
    "ThrottleReason",
]

GPU_SAMPLED = "telemetry.gpu.sampled.v1"
GPU_ROLLED_UP = "telemetry.gpu.rolledup.v1"

Celsius = Annotated[float, Meta(ge=-40, le=150, description="degrees Celsius")]
Watts = Annotated[float, Meta(ge=0, le=10_000, description="watts")]
MHz = Annotated[int, Meta(ge=0, le=10_000, description="megahertz")]
Bitmask = Annotated[int, Meta(ge=0, description="bit set, see ThrottleReason")]
NvLinks = Annotated[int, Meta(ge=0, le=36)]


class ThrottleReason:
    """Bits of ``throttle_reasons`` (NVML clocks-event reasons), for readers of the bitmask."""

    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL_SLOWDOWN = 0x20
    HW_THERMAL_SLOWDOWN = 0x40
    HW_POWER_BRAKE_SLOWDOWN = 0x80
    DISPLAY_CLOCK_SETTING = 0x100


class Anomaly:
    """Bits of ``anomaly_flags``: what the node agent saw about a GPU at this tick (0 = nothing).

    Set by the agent from its local readings and events; readers (health scoring, dashboards) treat
    them as hints, the metrics stay the evidence. Unknown bits must be ignored (new ones may come).
    """

    THERMAL = 0x1
    """thermal slowdown active, or temperature at the model's slowdown threshold"""
    POWER_CAPPED = 0x2
    """held under a power cap or power brake"""
    ECC_UNCORRECTED = 0x4
    """uncorrectable ECC errors grew since the last reading"""
    ECC_CORRECTED = 0x8
    """correctable ECC errors grew since the last reading"""
    ROW_REMAP = 0x10
    """rows were remapped / pages retired, or a remap is pending a reset"""
    XID = 0x20
    """a critical XID arrived (hardware or driver; the GPU may be unhealthy)"""
    XID_APPLICATION = 0x40
    """an application XID arrived (13, 31, 43, 45, 68, 109: the workload's fault)"""
    MEMORY_FULL = 0x80
    """framebuffer at or above 95 % used"""
    NVLINK_DOWN = 0x100
    """fewer NVLink links up than before"""
    PCIE_REPLAY = 0x200
    """PCIe replay counter grew (link errors)"""
    GPU_LOST = 0x400
    """the GPU fell off the bus or needs a reset"""


class GpuSample(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One GPU's values in one tick: the row view of a ``GpuSampled`` batch (not sent alone)."""

    gpu_uuid: Name
    gpu_index: GpuIndex
    util_pct: Percent | None = None
    mem_util_pct: Percent | None = None
    mem_used_mib: MiB | None = None
    mem_total_mib: MiB | None = None
    temperature_c: Celsius | None = None
    mem_temperature_c: Celsius | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: MHz | None = None
    mem_clock_mhz: MHz | None = None
    throttle_reasons: Bitmask | None = None
    ecc_corrected_volatile: NonNegInt | None = None
    ecc_uncorrected_volatile: NonNegInt | None = None
    ecc_corrected_aggregate: NonNegInt | None = None
    ecc_uncorrected_aggregate: NonNegInt | None = None
    retired_pages: NonNegInt | None = None
    remapped_rows_correctable: NonNegInt | None = None
    remapped_rows_uncorrectable: NonNegInt | None = None
    row_remap_pending: bool | None = None
    xid_last: NonNegInt | None = None
    """the last critical XID seen since the agent started; 0 = none"""
    pcie_replay: NonNegInt | None = None
    nvlink_up: NvLinks | None = None
    tensor_active_pct: Percent | None = None


#: metric columns of ``GpuSampled``, in wire order (identity columns excluded)
METRIC_COLUMNS: tuple[str, ...] = tuple(
    f for f in GpuSample.__struct_fields__ if f not in ("gpu_uuid", "gpu_index")
)


class GpuSampled(Event, frozen=True, kw_only=True, tag=GPU_SAMPLED):
    """Every GPU of one node at one tick, column by column (see the module docstring)."""

    node: Name
    sampled_at: Timestamp
    interval_s: Annotated[float, Meta(gt=0)]
    seq: NonNegInt = 0
    """per-node sequence number, +1 per tick; a gap means lost samples"""
    gpu_uuid: tuple[Name, ...]
    gpu_index: tuple[GpuIndex, ...]
    util_pct: tuple[Percent | None, ...] = ()
    mem_util_pct: tuple[Percent | None, ...] = ()
    mem_used_mib: tuple[MiB | None, ...] = ()
    mem_total_mib: tuple[MiB | None, ...] = ()
    temperature_c: tuple[Celsius | None, ...] = ()
    mem_temperature_c: tuple[Celsius | None, ...] = ()
    power_w: tuple[Watts | None, ...] = ()
    power_limit_w: tuple[Watts | None, ...] = ()
    sm_clock_mhz: tuple[MHz | None, ...] = ()
    mem_clock_mhz: tuple[MHz | None, ...] = ()
    throttle_reasons: tuple[Bitmask | None, ...] = ()
    ecc_corrected_volatile: tuple[NonNegInt | None, ...] = ()
    ecc_uncorrected_volatile: tuple[NonNegInt | None, ...] = ()
    ecc_corrected_aggregate: tuple[NonNegInt | None, ...] = ()
    ecc_uncorrected_aggregate: tuple[NonNegInt | None, ...] = ()
    retired_pages: tuple[NonNegInt | None, ...] = ()
    remapped_rows_correctable: tuple[NonNegInt | None, ...] = ()
    remapped_rows_uncorrectable: tuple[NonNegInt | None, ...] = ()
    row_remap_pending: tuple[bool | None, ...] = ()
    xid_last: tuple[NonNegInt | None, ...] = ()
    pcie_replay: tuple[NonNegInt | None, ...] = ()
    nvlink_up: tuple[NvLinks | None, ...] = ()
    tensor_active_pct: tuple[Percent | None, ...] = ()
    anomaly_flags: tuple[NonNegInt, ...] = ()
    """per GPU, ``Anomaly`` bits the agent set (empty = the agent does not flag)"""

    def __post_init__(self) -> None:
        n = len(self.gpu_uuid)
        if len(self.gpu_index) != n:
            raise ValueError(f"`gpu_index` has {len(self.gpu_index)} entries, `gpu_uuid` has {n}")
        for name in (*METRIC_COLUMNS, "anomaly_flags"):
            column = getattr(self, name)
            if column and len(column) != n:
                raise ValueError(f"column `{name}` has {len(column)} entries, expected 0 or {n}")

    @classmethod
    def from_samples(cls, samples: Iterable[GpuSample], **fields: Any) -> GpuSampled:
        """Pivot rows into columns; a metric no GPU reported becomes an empty column."""
        rows = list(samples)
        columns: dict[str, Any] = {
            "gpu_uuid": tuple(r.gpu_uuid for r in rows),
            "gpu_index": tuple(r.gpu_index for r in rows),
        }
        for name in METRIC_COLUMNS:
            column = tuple(getattr(r, name) for r in rows)
            if any(v is not None for v in column):
                columns[name] = column
        return cls(**fields, **columns)

    def rows(self) -> Iterator[GpuSample]:
        """The batch as one ``GpuSample`` per GPU, in ``gpu_uuid`` order."""
        present = [(name, getattr(self, name)) for name in METRIC_COLUMNS]
        present = [(name, col) for name, col in present if col]
        for i, (uuid, index) in enumerate(zip(self.gpu_uuid, self.gpu_index, strict=True)):
            yield GpuSample(gpu_uuid=uuid, gpu_index=index, **{name: col[i] for name, col in present})


class RollupWindow(StrEnum):
    MINUTE = "1m"
    HOUR = "1h"


class Stats(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Mean, max and 95th percentile of one metric over one window."""

    mean: float
    max: float
    p95: float

    def __post_init__(self) -> None:
        if self.mean > self.max or self.p95 > self.max:
            raise ValueError(f"stats [mean={self.mean}, max={self.max}, p95={self.p95}]: max is not the largest")


class GpuRollup(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One GPU over one window: statistics of gauges, deltas of counters."""

    gpu_uuid: Name
    gpu_index: GpuIndex
    samples: Annotated[int, Meta(ge=1)]
    """samples the window saw; with ``interval_s`` it tells how complete the window is"""
    util_pct: Stats | None = None
    mem_util_pct: Stats | None = None
    mem_used_mib: Stats | None = None
    temperature_c: Stats | None = None
    power_w: Stats | None = None
    tensor_active_pct: Stats | None = None
    throttled_pct: Percent | None = None
    """share of samples with a throttle reason other than GPU idle"""
    ecc_uncorrected_delta: NonNegInt = 0
    remapped_rows_delta: NonNegInt = 0
    pcie_replay_delta: NonNegInt = 0
    xid_last: NonNegInt | None = None
    """the last XID seen inside the window; None = none"""
    anomaly_flags: NonNegInt = 0
    """``Anomaly`` bits set by the agent on any sample of the window (bitwise or)"""


class GpuRolledUp(Event, frozen=True, kw_only=True, tag=GPU_ROLLED_UP):
    """Per-GPU summary of one node over one closed window ``[window_start, window_start + window)``."""

    node: Name
    window: RollupWindow
    window_start: Timestamp
    gpus: tuple[GpuRollup, ...]


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (GpuSampled, GpuRolledUp)
