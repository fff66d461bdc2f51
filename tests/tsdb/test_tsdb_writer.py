"""COPY writer: idempotent on (gpu_uuid, ts), atomic per batch, usable by the collector role."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from tsdb_helpers import at, fetch_all, fetch_one, sample

from gpuaware.tsdb import (
    SAMPLE_COLUMNS,
    SAMPLE_PG_TYPES,
    Connection,
    InventoryGpu,
    Sample,
    connect,
    copy_rows,
    fetch_roundtrip,
    latest_samples,
    list_inventory,
    store_roundtrip,
    upsert_inventory,
    utilisation_range,
    write_samples,
)


def _batch(n: int, start: str = "2025-03-01 10:00:00", gpus: int = 4) -> list[Sample]:
    t0 = at(start)
    return [sample(t0 + timedelta(seconds=i // gpus), gpu=f"GPU-{i % gpus}", util_pct=float(i % 100),
                   mem_used_mib=i, throttle_reasons=0, nvlink_up=4)
            for i in range(n)]


async def _count(conn: Connection) -> int:
    row = await fetch_one(conn, "SELECT count(*) FROM gpu_samples")
    assert row is not None
    return int(row[0])


async def test_rewriting_the_same_rows_inserts_nothing(conn: Connection) -> None:
    rows = _batch(2000)
    assert await write_samples(conn, rows) == 2000
    assert await write_samples(conn, rows) == 0
    assert await _count(conn) == 2000
    # half redelivered, half new: only the new half counts (rows 1000..2999 of a 3000-row series)
    assert await write_samples(conn, _batch(3000)[1000:]) == 1000
    assert await _count(conn) == 3000


async def test_duplicates_inside_one_batch_are_inserted_once(conn: Connection) -> None:
    row = sample("2025-03-01 10:00:00", util_pct=5.0)
    assert await write_samples(conn, [row, row, row._replace(util_pct=9.0)]) == 1
    assert await fetch_all(conn, "SELECT util_pct FROM gpu_samples") == [(5.0,)]  # first one wins


async def test_values_round_trip_with_their_types(conn: Connection) -> None:
    full = Sample(at("2025-03-01 10:00:00"), "node-1", "GPU-x", 12.5, 40.0, 30_000, 81_559, 65.0, 300.5, 700.0,
                  1980, 2619, 1 << 40, 3, 7, 2, 79, 11, 12)
    assert await write_samples(conn, [full]) == 1
    got = await fetch_one(conn, f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM gpu_samples")
    assert got is not None and Sample(*got) == full


async def test_mappings_and_attribute_objects_are_accepted(conn: Connection) -> None:
    @dataclass
    class Reading:
        ts: datetime
        node: str
        gpu_uuid: str
        util_pct: float

    rows = [{"ts": at("2025-03-01 10:00:00"), "node": "n", "gpu_uuid": "GPU-m", "power_w": 250.0},
            Reading(at("2025-03-01 10:00:01"), "n", "GPU-m", 33.0)]
    assert await write_samples(conn, rows) == 2
    assert await fetch_all(conn, "SELECT power_w, util_pct FROM gpu_samples ORDER BY ts") == [
        (250.0, None), (None, 33.0)]


@pytest.mark.parametrize("bad", [
    {"ts": datetime(2025, 3, 1, 10), "node": "n", "gpu_uuid": "g"},  # naive timestamp
    {"ts": at("2025-03-01 10:00:00"), "node": "", "gpu_uuid": "g"},
    ("too", "short"),
])
async def test_malformed_samples_are_rejected_before_anything_is_written(conn: Connection, bad: object) -> None:
    with pytest.raises(ValueError):
        await write_samples(conn, [sample("2025-03-01 10:00:00"), bad])
    assert await _count(conn) == 0


async def test_a_batch_inside_the_callers_transaction_rolls_back_with_it(migrated_url: str) -> None:
    class Abort(Exception):
        pass

    async with await connect(migrated_url, autocommit=True) as conn:
        with pytest.raises(Abort):
            async with conn.transaction():
                assert await write_samples(conn, _batch(10)) == 10
                assert await write_samples(conn, _batch(20)) == 10  # staging was cleared between the two batches
                raise Abort
        assert await _count(conn) == 0
    async with await connect(migrated_url) as conn:  # not autocommit, idle: the writer commits its own batch
        assert await write_samples(conn, _batch(5)) == 5
    async with await connect(migrated_url) as conn:
        assert await _count(conn) == 5


async def test_copy_rows_binary_and_text(conn: Connection) -> None:
    rows = [tuple(s) for s in _batch(100)]
    async with conn.transaction():
        assert await copy_rows(conn, "gpu_samples", SAMPLE_COLUMNS, rows, types=SAMPLE_PG_TYPES) == 100
    await conn.execute("CREATE TABLE bench (id int, label text)")
    assert await copy_rows(conn, "public.bench", ["id", "label"], [(1, "a"), (2, None)]) == 2
    assert await fetch_all(conn, "SELECT * FROM bench ORDER BY id") == [(1, "a"), (2, None)]
    # raw COPY has no dedupe: the same rows again violate the primary key
    with pytest.raises(psycopg.errors.UniqueViolation):
        async with conn.transaction():
            await copy_rows(conn, "gpu_samples", SAMPLE_COLUMNS, rows, types=SAMPLE_PG_TYPES)


async def test_latest_sample_per_gpu(conn: Connection) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await write_samples(conn, [
        sample(now - timedelta(seconds=30), gpu="GPU-a", node="n1", util_pct=1.0),
        sample(now - timedelta(seconds=10), gpu="GPU-a", node="n1", util_pct=2.0),  # newest of GPU-a
        sample(now - timedelta(seconds=20), gpu="GPU-b", node="n2", util_pct=3.0),
        sample(now - timedelta(hours=2), gpu="GPU-c", node="n1", util_pct=4.0),  # outside the window
    ])
    latest = await latest_samples(conn, within=timedelta(minutes=15), now=now)
    assert [(s.gpu_uuid, s.util_pct, s.ts) for s in latest] == [
        ("GPU-a", 2.0, now - timedelta(seconds=10)), ("GPU-b", 3.0, now - timedelta(seconds=20))]
    assert [s.gpu_uuid for s in await latest_samples(conn, node="n2", now=now)] == ["GPU-b"]
    assert [s.gpu_uuid for s in await latest_samples(conn, within=timedelta(days=1), now=now)] == [
        "GPU-a", "GPU-c", "GPU-b"]  # ordered by node, then GPU


@pytest.fixture
async def login_roles(migrated_url: str) -> AsyncIterator[dict[str, str]]:
    """Throwaway LOGIN roles in the collector and reader groups; dropped afterwards (roles are cluster-wide)."""
    suffix = uuid.uuid4().hex[:8]
    names = {"collector": f"t_collector_{suffix}", "reader": f"t_reader_{suffix}"}
    async with await connect(migrated_url, autocommit=True) as admin:
        for group, name in names.items():
            await admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE gpuaware_{group}')
    dbname = migrated_url.rsplit("/", 1)[1]
    base = migrated_url.rsplit("@", 1)[1].rsplit("/", 1)[0]
    yield {group: f"postgresql://{name}@{base}/{dbname}" for group, name in names.items()}
    async with await connect(migrated_url, autocommit=True) as admin:
        for name in names.values():
            await admin.execute(f'DROP OWNED BY "{name}"')
            await admin.execute(f'DROP ROLE "{name}"')


async def test_collector_role_can_write_and_reader_role_cannot(login_roles: dict[str, str]) -> None:
    async with await connect(login_roles["collector"], autocommit=True) as collector:
        # a day with no partition yet: made through the SECURITY DEFINER function, not by the collector
        assert await write_samples(collector, [sample("2025-06-01 12:00:00")]) == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await collector.execute("DELETE FROM gpu_samples")
    async with await connect(login_roles["reader"], autocommit=True) as reader:
        assert await fetch_one(reader, "SELECT count(*) FROM gpu_samples") == (1,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await write_samples(reader, [sample("2025-06-01 12:00:01")])


async def test_inventory_upsert_replaces_and_roundtrip_ignores_redelivery(conn: Connection) -> None:
    gpu = InventoryGpu("GPU-a", "node-1", 0, "H100", 81_559, False, "island-0", 0)
    assert await upsert_inventory(conn, [gpu, InventoryGpu("GPU-b", "node-1", 1, "H100", 81_559)]) == 2
    assert await upsert_inventory(conn, [gpu._replace(mig_mode=True)]) == 1
    listed = await list_inventory(conn, node="node-1")
    assert [(g.gpu_uuid, g.mig_mode, g.nvlink_island) for g in listed] == [("GPU-a", True, "island-0"),
                                                                        ("GPU-b", False, None)]
    assert all(g.updated_at is not None for g in listed)
    # one statement for many GPUs: a GPU named twice (a node announcing twice in one batch) keeps the last
    moved = [InventoryGpu("GPU-c", "node-2", 0, "A100", 40_960), InventoryGpu("GPU-c", "node-3", 2, "A100", 40_960)]
    assert await upsert_inventory(conn, moved) == 1
    assert [(g.node, g.gpu_index) for g in await list_inventory(conn, node="node-3")] == [("node-3", 2)]
    assert [g.gpu_uuid for g in await list_inventory(conn)] == ["GPU-a", "GPU-b", "GPU-c"]
    assert await upsert_inventory(conn, []) == 0

    assert await store_roundtrip(conn, "msg-1", "demo.ping.v1", {"n": 1}) is True
    assert await store_roundtrip(conn, "msg-1", "demo.ping.v1", {"n": 2}) is False
    stored = await fetch_roundtrip(conn, "msg-1")
    assert stored is not None and stored[:3] == ("msg-1", "demo.ping.v1", {"n": 1})
    assert await fetch_roundtrip(conn, "missing") is None


async def test_utilisation_range_reads_the_nodes_window_oldest_first(conn: Connection) -> None:
    t0 = at("2025-04-01 08:00:00")
    rows = [sample(t0 + timedelta(seconds=s), gpu=g, node=n, util_pct=u) for s, g, n, u in (
        (5, "GPU-a", "n1", 50.0), (1, "GPU-b", "n2", 10.0), (3, "GPU-c", "n3", 99.0),  # n3 is not asked
        (30, "GPU-a", "n1", 70.0),  # after the window
        (2, "GPU-d", "n1", None))]  # no utilisation: not a reading
    await write_samples(conn, rows)
    got = await utilisation_range(conn, ["n1", "n2"], t0, t0 + timedelta(seconds=30))
    assert got == [(t0 + timedelta(seconds=1), "GPU-b", 10.0), (t0 + timedelta(seconds=5), "GPU-a", 50.0)]
