"""Native backend: daily partitions appear for written days, stray rows are rescued, old days dropped."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tsdb_helpers import at, fetch_all, fetch_one, sample

from gpuaware.tsdb import (
    SAMPLE_COLUMNS,
    SAMPLE_PG_TYPES,
    Connection,
    connect,
    copy_rows,
    list_partitions,
    maintain_partitions,
    write_samples,
)

NOW = at("2025-03-10 12:00:00")


async def _placement(conn: Connection) -> dict[str, str]:
    """gpu_uuid -> name of the partition that physically holds its row."""
    return dict(await fetch_all(conn, "SELECT gpu_uuid, tableoid::regclass::text FROM gpu_samples"))


async def test_gpu_samples_is_range_partitioned_by_ts_with_a_default(conn: Connection) -> None:
    row = await fetch_one(conn, """
        SELECT p.partstrat, a.attname, p.partdefid <> 0
        FROM pg_partitioned_table p
        JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
        WHERE p.partrelid = 'gpu_samples'::regclass""")
    assert row == ("r", "ts", True)


async def test_written_days_get_daily_partitions_that_cover_them(conn: Connection) -> None:
    written = {
        "GPU-late": at("2025-03-08 23:59:59.999999"),
        "GPU-midnight": at("2025-03-09 00:00:00"),
        "GPU-today": at("2025-03-10 11:00:00"),
        "GPU-old": at("2025-02-01 06:00:00"),
    }
    assert await write_samples(conn, [sample(ts, gpu=gpu) for gpu, ts in written.items()]) == 4

    parts = {p.name: p for p in await list_partitions(conn)}
    assert set(parts) == {"gpu_samples_default", "gpu_samples_p20250201", "gpu_samples_p20250308",
                          "gpu_samples_p20250309", "gpu_samples_p20250310"}
    # every child is exactly one UTC day
    for p in parts.values():
        if p.name != "gpu_samples_default":
            assert p.lower is not None and p.upper is not None
            assert p.upper - p.lower == timedelta(days=1)
            assert p.lower.utcoffset() is not None
            assert p.name == f"gpu_samples_p{p.lower.astimezone(NOW.tzinfo):%Y%m%d}"
    # each row lives in the daily partition whose [lower, upper) contains it, never in the default
    for gpu, holder in (await _placement(conn)).items():
        part = parts[holder]
        assert part.lower is not None and part.upper is not None, f"{gpu} landed in the default partition"
        assert part.lower <= written[gpu] < part.upper


async def test_maintenance_premakes_days_rescues_default_rows_and_applies_retention(conn: Connection) -> None:
    await write_samples(conn, [sample("2025-02-01 06:00:00", gpu="GPU-old"),
                               sample("2025-03-08 10:00:00", gpu="GPU-kept"),
                               sample("2025-03-10 11:00:00", gpu="GPU-today")])
    # bypass the writer (raw COPY): rows for days without a partition land in the default partition,
    # one within retention (2025-03-20) and one already expired (2025-01-15)
    async with conn.transaction():
        await copy_rows(conn, "gpu_samples", SAMPLE_COLUMNS,
                        [tuple(sample("2025-03-20 08:00:00", gpu="GPU-stray")),
                         tuple(sample("2025-01-15 08:00:00", gpu="GPU-ancient"))], types=SAMPLE_PG_TYPES)
    assert (await _placement(conn))["GPU-stray"] == "gpu_samples_default"

    report = await maintain_partitions(conn, now=NOW, ahead_days=3, retention=timedelta(days=30))
    # retention: now - 30 days = 2025-02-08 12:00; a day goes when it ends at or before that,
    # so 2025-02-01 (ends 02-02) is dropped, 2025-03-08 is kept; the expired default row is deleted
    assert report.dropped == ["gpu_samples_p20250201"]
    # premake yesterday..today+3 = 03-09..03-13: 03-10 exists, so 03-09, 03-11, 03-12, 03-13 are new,
    # plus 03-20 for the stray row: 5 created
    assert report.created == 5
    names = [p.name for p in await list_partitions(conn)]
    assert names == ["gpu_samples_default", "gpu_samples_p20250308", "gpu_samples_p20250309",
                     "gpu_samples_p20250310", "gpu_samples_p20250311", "gpu_samples_p20250312",
                     "gpu_samples_p20250313", "gpu_samples_p20250320"]
    assert (await _placement(conn)) == {"GPU-kept": "gpu_samples_p20250308", "GPU-today": "gpu_samples_p20250310",
                                "GPU-stray": "gpu_samples_p20250320"}
    assert await fetch_one(conn, "SELECT count(*) FROM gpu_samples_default") == (0,)

    again = await maintain_partitions(conn, now=NOW, ahead_days=3, retention=timedelta(days=30))
    assert (again.created, again.dropped) == (0, [])  # idempotent
    # the rescued row is still deduplicated by the primary key of its new partition
    assert await write_samples(conn, [sample("2025-03-20 08:00:00", gpu="GPU-stray")]) == 0


async def test_writers_racing_into_a_new_day_create_its_partition_once(migrated_url: str) -> None:
    writers = 5
    barrier = asyncio.Barrier(writers)

    async def write(i: int) -> int:
        rows = [sample(at("2025-04-01 00:00:00") + timedelta(seconds=s), gpu=f"GPU-{i}") for s in range(200)]
        async with await connect(migrated_url, autocommit=True) as conn:
            await barrier.wait()
            return await write_samples(conn, rows)

    assert await asyncio.gather(*(write(i) for i in range(writers))) == [200] * writers
    async with await connect(migrated_url) as conn:
        assert [p.name for p in await list_partitions(conn)] == ["gpu_samples_default", "gpu_samples_p20250401"]
        assert await fetch_one(conn, "SELECT count(*) FROM gpu_samples_p20250401") == (200 * writers,)


async def test_replicas_maintaining_at_once_never_deadlock(migrated_url: str) -> None:
    """Two collectors start together and both run a pass while stray rows wait in the default partition:
    one pass read the default partition and then waited for the parent, while the other, holding the
    parent, waited to attach a partition (which locks the default one). Passes now queue instead."""
    for day in range(1, 9):
        async with await connect(migrated_url, autocommit=True) as conn, conn.transaction():
            await copy_rows(conn, "gpu_samples", SAMPLE_COLUMNS,  # raw COPY: lands in the default partition
                            [tuple(sample(f"2025-05-{day:02d} 08:00:00", gpu=f"GPU-{day}"))], types=SAMPLE_PG_TYPES)
        barrier = asyncio.Barrier(2)

        async def maintain(now: str, barrier: asyncio.Barrier = barrier) -> None:
            async with await connect(migrated_url, autocommit=True) as conn:
                await barrier.wait()
                await maintain_partitions(conn, now=at(now), ahead_days=2, retention=timedelta(days=400))

        # each pass has days of its own to premake, so both attach partitions
        await asyncio.gather(*(maintain(f"2025-{month}-{3 * day:02d} 12:00:00") for month in ("06", "07")))
    async with await connect(migrated_url) as conn:
        assert await fetch_one(conn, "SELECT count(*) FROM gpu_samples_default") == (0,)
        assert await fetch_one(conn, "SELECT count(*) FROM gpu_samples") == (8,)
