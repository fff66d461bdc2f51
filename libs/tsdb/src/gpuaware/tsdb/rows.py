"""Row shapes shared by the writers and readers: one tuple layout per table, in column order.

NamedTuples because a tuple is what COPY consumes without conversion, and a name per field is
what callers want to read. Column types here are the contract the migrations implement.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple


class Sample(NamedTuple):
    """One raw GPU reading (a row of `gpu_samples`); `ts` must be timezone-aware."""

    ts: datetime
    node: str
    gpu_uuid: str
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons: int | None = None
    ecc_volatile: int | None = None
    ecc_aggregate: int | None = None
    retired_rows: int | None = None
    xid_last: int | None = None
    pcie_replay: int | None = None
    nvlink_up: int | None = None
    # added by migration 0006 (the rest of the telemetry contract); appended, so older tuples still fit
    mem_temperature_c: float | None = None
    tensor_active_pct: float | None = None
    ecc_corrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    retired_pages: int | None = None
    remapped_rows_correctable: int | None = None
    row_remap_pending: bool | None = None
    anomaly_flags: int | None = None


SAMPLE_COLUMNS: tuple[str, ...] = Sample._fields

# PostgreSQL types of SAMPLE_COLUMNS, for binary COPY (must match the migrations)
SAMPLE_PG_TYPES: tuple[str, ...] = (
    "timestamptz", "text", "text",
    "float4", "float4", "int4", "int4", "float4", "float4", "float4",
    "int4", "int4", "int8", "int8", "int8", "int4", "int4", "int8", "int4",
    "float4", "float4", "int8", "int8", "int4", "int4", "bool", "int4",
)
#: how many columns gpu_samples had before 0006; shorter tuples are padded with NULLs by the writers
LEGACY_SAMPLE_COLUMNS = 19


class Rollup(NamedTuple):
    """One row of `gpu_metrics_1m` / `gpu_metrics_1h` (same columns under either backend)."""

    bucket: datetime
    node: str
    gpu_uuid: str
    samples: int
    util_avg: float | None
    util_max: float | None
    mem_util_avg: float | None
    mem_used_avg: float | None
    mem_used_max: int | None
    mem_total_mib: int | None
    temp_avg: float | None
    temp_max: float | None
    power_avg: float | None
    power_max: float | None
    sm_clock_avg: float | None
    throttled_samples: int | None
    ecc_volatile_max: int | None
    ecc_aggregate_max: int | None
    retired_rows_max: int | None
    xid_last_max: int | None
    pcie_replay_max: int | None
    nvlink_up_min: int | None


ROLLUP_COLUMNS: tuple[str, ...] = Rollup._fields

# column -> PostgreSQL type (format_type spelling), the documented shape of both rollup views
ROLLUP_PG_TYPES: dict[str, str] = {
    "bucket": "timestamp with time zone", "node": "text", "gpu_uuid": "text", "samples": "bigint",
    "util_avg": "double precision", "util_max": "real", "mem_util_avg": "double precision",
    "mem_used_avg": "double precision", "mem_used_max": "integer", "mem_total_mib": "integer",
    "temp_avg": "double precision", "temp_max": "real", "power_avg": "double precision",
    "power_max": "real", "sm_clock_avg": "double precision", "throttled_samples": "bigint",
    "ecc_volatile_max": "bigint", "ecc_aggregate_max": "bigint", "retired_rows_max": "integer",
    "xid_last_max": "integer", "pcie_replay_max": "bigint", "nvlink_up_min": "integer",
}


class InventoryGpu(NamedTuple):
    """One row of `gpu_inventory`: what a node announced about one GPU."""

    gpu_uuid: str
    node: str
    gpu_index: int
    model: str
    memory_mib: int
    mig_mode: bool = False
    nvlink_island: str | None = None
    numa_node: int | None = None
    updated_at: datetime | None = None  # set by the database on write


INVENTORY_COLUMNS: tuple[str, ...] = InventoryGpu._fields


class PodUsage(NamedTuple):
    """One row of `gpu_pod_usage` (migration 0007): one pod on one GPU over one window."""

    window_start: datetime
    window_s: float
    node: str
    gpu_uuid: str
    namespace: str
    pod: str
    pod_uid: str | None
    tenant: str
    gpu_milli: int
    seconds: float
    gpu_seconds_allocated: float
    gpu_seconds_used: float
    util_pct_avg: float
    util_pct_max: float
    mem_used_mib_avg: float
    mem_used_mib_max: float
    attribution: str = "share"


POD_USAGE_COLUMNS: tuple[str, ...] = PodUsage._fields


class WindowRollup(NamedTuple):
    """One GPU over one closed window, time-weighted (`gpuaware_window_rollups`, migration 0008).

    `*_mean/_max/_p95` triples are None when the GPU reported no value of that metric."""

    node: str
    gpu_uuid: str
    samples: int
    util_mean: float | None
    util_max: float | None
    util_p95: float | None
    mem_util_mean: float | None
    mem_util_max: float | None
    mem_util_p95: float | None
    mem_used_mean: float | None
    mem_used_max: float | None
    mem_used_p95: float | None
    temp_mean: float | None
    temp_max: float | None
    temp_p95: float | None
    power_mean: float | None
    power_max: float | None
    power_p95: float | None
    tensor_mean: float | None
    tensor_max: float | None
    tensor_p95: float | None
    throttled_pct: float | None
    ecc_uncorrected_delta: int | None
    remapped_rows_delta: int | None
    pcie_replay_delta: int | None
    xid_last: int | None
    anomaly_flags: int
