"""gpu_metrics_1m / gpu_metrics_1h: documented columns, exact arithmetic, incremental refresh."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import pytest
from tsdb_helpers import at, columns, fetch_one, sample

from gpuaware.tsdb import (
    ROLLUP_COLUMNS,
    ROLLUP_VIEWS,
    Connection,
    connect,
    expire_rollups,
    refresh_rollups,
    rollup_range,
    write_samples,
)
from gpuaware.tsdb.rows import ROLLUP_PG_TYPES

SAMPLES = [
    # GPU-a on node-1
    sample("2025-03-01 10:00:00", util_pct=10.0, mem_used_mib=1000, temperature_c=50.0, power_w=100.0,
           throttle_reasons=0),
    sample("2025-03-01 10:00:20", util_pct=20.0, mem_used_mib=2000, temperature_c=60.0, power_w=200.0,
           throttle_reasons=4),
    sample("2025-03-01 10:00:40", util_pct=60.0, mem_used_mib=3000, temperature_c=55.0, power_w=300.0,
           throttle_reasons=0),
    sample("2025-03-01 10:01:00", util_pct=50.0, mem_used_mib=4000, temperature_c=70.0, power_w=400.0,
           throttle_reasons=0),
    sample("2025-03-01 10:01:30"),  # every metric missing: counted in `samples`, ignored by averages
    sample("2025-03-01 11:00:00", util_pct=0.0),
    # GPU-b on node-2
    sample("2025-03-01 10:00:10", gpu="GPU-b", node="node-2", util_pct=100.0, temperature_c=80.0, power_w=500.0,
           ecc_volatile=2, nvlink_up=4),
    sample("2025-03-01 10:00:50", gpu="GPU-b", node="node-2", util_pct=90.0, temperature_c=85.0, power_w=450.0,
           ecc_volatile=5, nvlink_up=3),
]


async def _rows(conn: Connection, view: str) -> dict[tuple[str, str], dict[str, Any]]:
    cur = await conn.execute(f"SELECT * FROM {view} ORDER BY bucket, gpu_uuid")
    names = [d.name for d in cur.description or ()]
    return {(f"{r[0].astimezone(UTC):%H:%M}", r[2]): dict(zip(names, r, strict=True)) for r in await cur.fetchall()}


@pytest.mark.parametrize("view", sorted(ROLLUP_VIEWS.values()))
async def test_rollup_views_have_the_documented_columns(conn: Connection, view: str) -> None:
    assert await columns(conn, view) == list(ROLLUP_PG_TYPES.items())
    assert tuple(ROLLUP_PG_TYPES) == ROLLUP_COLUMNS


async def test_rollups_aggregate_known_samples_exactly(conn: Connection) -> None:
    await write_samples(conn, SAMPLES)
    # 1m: a@10:00, a@10:01, a@11:00, b@10:00 = 4 rows; 1h: a@10, a@11, b@10 = 3 rows
    assert await refresh_rollups(conn, at("2025-03-01 10:00:00")) == 7

    m = await _rows(conn, "gpu_metrics_1m")
    assert set(m) == {("10:00", "GPU-a"), ("10:01", "GPU-a"), ("11:00", "GPU-a"), ("10:00", "GPU-b")}
    a0 = m[("10:00", "GPU-a")]
    # util (10+20+60)/3 = 30, max 60; mem (1000+2000+3000)/3 = 2000, max 3000; temp (50+60+55)/3 = 55,
    # max 60; power (100+200+300)/3 = 200, max 300; one sample with throttle bits set
    assert (a0["samples"], a0["util_avg"], a0["util_max"], a0["mem_used_avg"], a0["mem_used_max"]) == (
        3, pytest.approx(30), 60, pytest.approx(2000), 3000)
    assert (a0["temp_avg"], a0["temp_max"], a0["power_avg"], a0["power_max"], a0["throttled_samples"]) == (
        pytest.approx(55), 60, pytest.approx(200), 300, 1)
    a1 = m[("10:01", "GPU-a")]
    # two rows, one all-NULL: samples 2, util avg over the one reading = 50
    assert (a1["samples"], a1["util_avg"], a1["power_avg"], a1["throttled_samples"]) == (2, 50, 400, 0)
    b0 = m[("10:00", "GPU-b")]
    # util (100+90)/2 = 95; power (500+450)/2 = 475; worst ECC count 5; fewest NVLinks up 3
    assert (b0["samples"], b0["util_avg"], b0["power_avg"], b0["temp_max"], b0["ecc_volatile_max"],
            b0["nvlink_up_min"], b0["node"]) == (2, pytest.approx(95), pytest.approx(475), 85, 5, 3, "node-2")

    h = await _rows(conn, "gpu_metrics_1h")
    a10 = h[("10:00", "GPU-a")]
    # hour 10 of GPU-a from the raw rows, not from minute averages: 5 samples, util (10+20+60+50)/4 = 35,
    # mem (1000+2000+3000+4000)/4 = 2500, power (100+200+300+400)/4 = 250, temp max 70
    assert (a10["samples"], a10["util_avg"], a10["util_max"], a10["mem_used_avg"], a10["power_avg"],
            a10["temp_max"]) == (5, pytest.approx(35), 60, pytest.approx(2500), pytest.approx(250), 70)
    assert h[("11:00", "GPU-a")]["samples"] == 1
    assert h[("10:00", "GPU-b")]["util_avg"] == pytest.approx(95)

    # the typed reader sees the same rows
    got = await rollup_range(conn, "1m", at("2025-03-01 10:00:00"), at("2025-03-01 10:02:00"), gpu_uuid="GPU-a")
    assert [(r.bucket, r.samples, r.util_avg) for r in got] == [
        (at("2025-03-01 10:00:00"), 3, pytest.approx(30)), (at("2025-03-01 10:01:00"), 2, 50)]
    by_node = await rollup_range(conn, "1h", at("2025-03-01 00:00:00"), at("2025-03-02 00:00:00"), node="node-2")
    assert [r.gpu_uuid for r in by_node] == ["GPU-b"]


async def test_refresh_is_incremental_and_folds_in_late_samples(conn: Connection) -> None:
    await write_samples(conn, SAMPLES)
    await refresh_rollups(conn, at("2025-03-01 10:00:00"))
    await write_samples(conn, [
        sample("2025-03-01 10:01:45", util_pct=80.0, power_w=600.0),  # late, inside the refreshed window
        sample("2025-03-01 09:30:00", util_pct=1.0),  # late, before the window: must stay unrolled
    ])
    # window [10:01:45, 10:02): 1m bucket 10:01 only; 1h buckets overlapping it: hour 10 of a and b
    assert await refresh_rollups(conn, at("2025-03-01 10:01:45"), at("2025-03-01 10:02:00")) == 1 + 2

    m = await _rows(conn, "gpu_metrics_1m")
    a1 = m[("10:01", "GPU-a")]
    # util (50+80)/2 = 65; power (400+600)/2 = 500; samples 3
    assert (a1["samples"], a1["util_avg"], a1["power_avg"]) == (3, pytest.approx(65), pytest.approx(500))
    assert m[("10:00", "GPU-a")]["samples"] == 3  # outside the window: untouched
    assert ("09:30", "GPU-a") not in m

    h = await _rows(conn, "gpu_metrics_1h")
    a10 = h[("10:00", "GPU-a")]
    # util (10+20+60+50+80)/5 = 44; power (100+200+300+400+600)/5 = 320; samples 6
    assert (a10["samples"], a10["util_avg"], a10["power_avg"]) == (6, pytest.approx(44), pytest.approx(320))
    assert ("09:00", "GPU-a") not in h and ("11:00", "GPU-a") in h  # 11:00 kept, not in the window


async def test_expire_rollups_drops_only_old_buckets(conn: Connection) -> None:
    await write_samples(conn, SAMPLES)
    await refresh_rollups(conn, at("2025-03-01 00:00:00"))
    # keep 1m for 60 min before 11:30 -> buckets before 10:30 go: a@10:00, a@10:01, b@10:00 (3 rows);
    # keep 1h for a day -> nothing goes
    assert await expire_rollups(conn, now=at("2025-03-01 11:30:00"), keep_1m=timedelta(minutes=60),
                                keep_1h=timedelta(days=1)) == 3
    assert list(await _rows(conn, "gpu_metrics_1m")) == [("11:00", "GPU-a")]
    assert len(await _rows(conn, "gpu_metrics_1h")) == 3


async def test_refresh_commits_on_a_connection_outside_autocommit(migrated_url: str) -> None:
    async with await connect(migrated_url, autocommit=True) as conn:
        await write_samples(conn, SAMPLES)
    async with await connect(migrated_url) as aconn:  # not autocommit
        assert await refresh_rollups(aconn, at("2025-03-01 10:00:00")) == 7
    async with await connect(migrated_url) as conn:  # committed, visible from another session
        assert await fetch_one(conn, "SELECT count(*) FROM gpu_metrics_1m") == (4,)
