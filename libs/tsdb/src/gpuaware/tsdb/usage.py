"""Per-pod GPU usage rows and the time-weighted window statistics the collector publishes.

Both are small, typed calls over SQL the migrations install (0007 `gpu_pod_usage` and its views,
0008 `gpuaware_window_rollups`).
Writes are first-writer-wins on the table's key, so a redelivered usage report inserts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from psycopg.rows import class_row

from gpuaware.tsdb.functions import aware, call_count
from gpuaware.tsdb.pool import Connection
from gpuaware.tsdb.rows import POD_USAGE_COLUMNS, PodUsage, WindowRollup

_INSERT_USAGE = (f"INSERT INTO gpu_pod_usage ({', '.join(POD_USAGE_COLUMNS)}) "
                 f"VALUES ({', '.join(['%s'] * len(POD_USAGE_COLUMNS))}) ON CONFLICT DO NOTHING")
_EXPIRE_USAGE = "SELECT gpuaware_drop_expired_pod_usage(%s)"
_WINDOW = ("SELECT node, gpu_uuid, samples, util_mean, util_max, util_p95, mem_util_mean, mem_util_max, "
           "mem_util_p95, mem_used_mean, mem_used_max, mem_used_p95, temp_mean, temp_max, temp_p95, "
           "power_mean, power_max, power_p95, tensor_mean, tensor_max, tensor_p95, throttled_pct, "
           "ecc_uncorrected_delta, remapped_rows_delta, pcie_replay_delta, xid_last, anomaly_flags "
           "FROM gpuaware_window_rollups(%s, %s, %s)")

POD_USAGE_RETENTION = timedelta(days=400)
"""per-pod usage is accounting data: kept for more than a year by default"""


async def write_pod_usage(conn: Connection, rows: Iterable[PodUsage]) -> int:
    """Insert usage rows, skipping (pod, GPU, window) already stored; returns rows offered."""
    rows = list(rows)
    for r in rows:
        aware(r.window_start, "window_start")
    params = [tuple(r) for r in rows]
    if not params:
        return 0
    async with conn.transaction(), conn.cursor() as cur:
        await cur.executemany(_INSERT_USAGE, params)
    return len(params)


async def expire_pod_usage(conn: Connection, older_than: datetime) -> int:
    """Delete usage windows starting before `older_than`; returns rows deleted."""
    return await call_count(conn, _EXPIRE_USAGE, (aware(older_than, "older_than"),))


async def window_rollups(conn: Connection, lo: datetime, hi: datetime, *,
                         max_hold: timedelta = timedelta(seconds=60)) -> list[WindowRollup]:
    """Time-weighted statistics per GPU of the window [lo, hi): GPUs with at least one sample in it,
    ordered by node and GPU. A reading holds until the next one, at most `max_hold`."""
    if aware(hi, "hi") <= aware(lo, "lo"):
        raise ValueError("the window must end after it starts")
    async with conn.cursor(row_factory=class_row(WindowRollup)) as cur:
        await cur.execute(_WINDOW, (lo, hi, max_hold))
        return await cur.fetchall()
