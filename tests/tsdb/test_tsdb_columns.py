"""Columnar batches: the numpy-built binary COPY, the idempotent columnar writer, pod usage, and the
time-weighted window statistics of migration 0008 - against real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest
from tsdb_helpers import at, fetch_all, fetch_one

from gpuaware.tsdb import (
    SAMPLE_COLUMNS,
    Connection,
    PodUsage,
    Sample,
    SampleColumns,
    connect,
    copy_binary,
    encode_sample_columns,
    window_rollups,
    write_pod_usage,
    write_sample_columns,
    write_samples,
)

T = datetime(2025, 3, 1, 10, 0, tzinfo=UTC).timestamp()
SELECT = f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM gpu_samples ORDER BY gpu_uuid, ts"


def _columns(n: int, *, nulls: bool, node: str = "node-1", start: float = T) -> SampleColumns:
    rng = np.random.default_rng(n)
    util = rng.uniform(0, 100, n)
    ecc = rng.integers(0, 5, n)
    pending = rng.integers(0, 2, n)
    if nulls:
        util[::3] = np.nan
        ecc[1::4] = -1
        pending[::5] = -1
    nodes = [node if i % 2 else f"{node}-with-a-longer-name-é" for i in range(n)] if nulls else [node] * n
    return SampleColumns(ts=start + np.arange(n) // 4, node=nodes, gpu_uuid=[f"GPU-{i % 4}" for i in range(n)],
                         metrics={"util_pct": util.astype(np.float32).astype(np.float64), "ecc_volatile": ecc,
                                  "mem_total_mib": np.full(n, 81_559), "row_remap_pending": pending,
                                  "anomaly_flags": np.full(n, 0x21)})


def _as_samples(cols: SampleColumns) -> list[Sample]:
    out = []
    for i in range(len(cols)):
        values = {}
        for name, col in cols.metrics.items():
            v = col[i]
            missing = np.isnan(v) if col.dtype.kind == "f" else v < 0
            values[name] = None if missing else (bool(v) if name == "row_remap_pending" else v.item())
        out.append(Sample(ts=datetime.fromtimestamp(float(cols.ts[i]), UTC), node=cols.node[i],
                          gpu_uuid=cols.gpu_uuid[i], **values))
    return out


@pytest.mark.parametrize("nulls", [False, True], ids=["uniform-layout", "scattered-layout"])
async def test_binary_payload_stores_what_the_row_writer_stores(migrated_url: str, nulls: bool) -> None:
    cols = _columns(40, nulls=nulls)
    async with await connect(migrated_url) as conn:
        assert await write_sample_columns(conn, cols) == 40
        columnar = await fetch_all(conn, SELECT)
        await conn.execute("TRUNCATE gpu_samples")
        await conn.commit()
        assert await write_samples(conn, _as_samples(cols)) == 40
        assert await fetch_all(conn, SELECT) == columnar


def test_empty_and_malformed_batches() -> None:
    empty = SampleColumns(ts=np.zeros(0), node=[], gpu_uuid=[])
    assert encode_sample_columns(empty).endswith(b"\xff\xff")
    with pytest.raises(ValueError, match="not gpu_samples columns"):
        SampleColumns(ts=np.zeros(1), node=["n"], gpu_uuid=["g"], metrics={"nope": np.zeros(1)})
    with pytest.raises(ValueError, match="rows"):
        SampleColumns(ts=np.zeros(2), node=["n"], gpu_uuid=["g", "h"])
    with pytest.raises(ValueError, match="non-finite"):
        SampleColumns(ts=np.array([np.inf]), node=["n"], gpu_uuid=["g"])


async def test_columnar_writer_is_idempotent_and_counts_only_new_rows(migrated_url: str) -> None:
    first = _columns(400, nulls=True)
    later = _columns(400, nulls=True, start=T + 50)  # overlaps the last 50 timestamps of `first`
    async with await connect(migrated_url, autocommit=True) as conn:
        assert await write_sample_columns(conn, first) == 400
        assert await write_sample_columns(conn, first) == 0        # a redelivery: nothing new
        assert await write_sample_columns(conn, later) == 200      # 50 s x 4 GPUs overlap
        cur = await conn.execute("SELECT count(*), count(DISTINCT (gpu_uuid, ts)) FROM gpu_samples")
        assert await cur.fetchone() == (600, 600)


async def test_raw_copy_of_a_payload(conn: Connection) -> None:
    payload = encode_sample_columns(_columns(100, nulls=False))
    async with conn.transaction():
        await copy_binary(conn, "gpu_samples", SAMPLE_COLUMNS, payload)
    assert await fetch_one(conn, "SELECT count(*) FROM gpu_samples") == (100,)
    with pytest.raises(psycopg.errors.UniqueViolation):
        async with conn.transaction():
            await copy_binary(conn, "gpu_samples", SAMPLE_COLUMNS, payload)


async def test_pod_usage_rows_and_tenant_views(migrated_url: str) -> None:
    def row(pod: str, tenant: str, gpu: str, start: datetime, used: float) -> PodUsage:
        return PodUsage(window_start=start, window_s=60.0, node="n", gpu_uuid=gpu, namespace="ns", pod=pod,
                        pod_uid=None, tenant=tenant, gpu_milli=500, seconds=60.0, gpu_seconds_allocated=30.0,
                        gpu_seconds_used=used, util_pct_avg=used / 60 * 100, util_pct_max=50.0,
                        mem_used_mib_avg=100.0, mem_used_mib_max=120.0)
    t0 = at("2025-03-01 10:00:00")
    rows = [row("a", "t1", "GPU-0", t0, 9.0), row("a", "t1", "GPU-0", t0 + timedelta(minutes=1), 6.0),
            row("b", "t2", "GPU-0", t0, 21.0), row("c", "t1", "GPU-1", t0 + timedelta(hours=1), 3.0)]
    async with await connect(migrated_url, autocommit=True) as conn:
        assert await write_pod_usage(conn, rows) == 4
        await write_pod_usage(conn, rows[:2])  # redelivered: ignored
        cur = await conn.execute("SELECT bucket, tenant, pods, gpus, gpu_seconds_allocated, gpu_seconds_used "
                                 "FROM tenant_usage_1h ORDER BY bucket, tenant")
        # hour 10: t1 = a's two windows (9 + 6), t2 = b (21); hour 11: t1 = c (3)
        assert await cur.fetchall() == [(t0, "t1", 1, 1, 60.0, 15.0), (t0, "t2", 1, 1, 30.0, 21.0),
                                         (t0 + timedelta(hours=1), "t1", 1, 1, 30.0, 3.0)]
        cur = await conn.execute("SELECT tenant, gpu_seconds_used FROM tenant_usage_1d ORDER BY tenant")
        assert await cur.fetchall() == [("t1", 18.0), ("t2", 21.0)]


async def test_window_statistics_are_time_weighted(migrated_url: str) -> None:
    t0 = at("2025-03-01 10:00:00")

    def s(offset: float, util: float, **more) -> Sample:
        return Sample(ts=t0 + timedelta(seconds=offset), node="n", gpu_uuid="GPU-0", util_pct=util, **more)

    async with await connect(migrated_url) as conn:
        await write_samples(conn, [
            # carried in: 40 % from -10 s holds until the first reading inside the window
            s(-10, 40.0, ecc_aggregate=2, throttle_reasons=0),
            s(20, 80.0, ecc_aggregate=3, throttle_reasons=0x4, anomaly_flags=0x2),
            s(50, 0.0, ecc_aggregate=5, throttle_reasons=0x1, xid_last=79),
            s(70, 10.0),  # next window
            Sample(ts=t0 + timedelta(seconds=5), node="m", gpu_uuid="GPU-9", util_pct=None),  # no util at all
        ])
    async with await connect(migrated_url, autocommit=True) as conn:
        rows = await window_rollups(conn, t0, t0 + timedelta(minutes=1))
    by_gpu = {r.gpu_uuid: r for r in rows}
    r = by_gpu["GPU-0"]
    # 40 % for 20 s, 80 % for 30 s, 0 % for 10 s: (800 + 2400 + 0) / 60 = 53.33 (a plain average would be 60)
    assert r.samples == 2 and r.util_mean == pytest.approx(3200 / 60)
    # p95 of the readings 0, 40, 80 (interpolated): rank 0.95 x 2 = 1.9 -> 40 + 0.9 x 40 = 76
    assert (r.util_max, r.util_p95) == (80.0, pytest.approx(76.0))
    # power cap (0x4) for 30 of 60 s; idle (0x1) does not count as throttled
    assert r.throttled_pct == pytest.approx(50.0)
    # ECC 2 -> 5 across the window (the carried reading is the baseline); XID 79 appeared; flags or-ed
    assert (r.ecc_uncorrected_delta, r.xid_last, r.anomaly_flags) == (3, 79, 0x2)
    assert by_gpu["GPU-9"].util_mean is None and by_gpu["GPU-9"].samples == 1
