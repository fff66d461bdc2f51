"""The collector against real servers: bad input, rollups, two replicas sharing a stream, a collector killed
mid-stream, a database outage.

The database outage lasts 30 seconds, as the acceptance list asks: COPYs are held and retried in
place, then handed back for redelivery, and the pool reconnects when PostgreSQL returns.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import msgspec
import psycopg
import pytest
from service_runner import ensure_streams
from telemetry_helpers import (
    SAMPLED,
    T0,
    collect_into,
    collector_settings,
    collector_stats,
    count_rows,
    flat_trace,
    fleet_batches,
    publish_batches,
    publish_inventory,
    quiet_fleet,
    running_collector,
    start_collector_process,
    wait_for,
)

from gpuaware import bus
from gpuaware.gpu import ManualClock
from gpuaware.schemas import GPU_ROLLED_UP, HEADER_REASON, CollectorStats, GpuRolledUp, GpuSampled
from gpuaware.tsdb import migrate

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


async def test_bad_input_is_dead_lettered_with_reason_and_counted_while_valid_samples_land(
        nats_proc, fresh_database_url: str) -> None:
    fleet = quiet_fleet(1, 2, [flat_trace(50)], clock=ManualClock(T0))
    good = fleet_batches(fleet, T0, 3)
    subject = SAMPLED.at("default", "node-0").subject
    template = msgspec.to_builtins(good[0])
    bad: dict[str, bytes] = {
        "nan": msgspec.json.encode(template).replace(b'"util_pct":[50.0', b'"util_pct":[NaN'),
        "negative": msgspec.json.encode({**template, "util_pct": [-5.0, 50.0]}),
        "garbage": b"\x00 not json at all",
        "absurd": msgspec.json.encode({**template, "mem_used_mib": [90_000, 1000]}),  # 80 GB GPU
        "oversized": msgspec.json.encode(GpuSampled(  # 65 GPUs on one node: more than any node has
            source="test", emitted_at=T0, node="node-0", sampled_at=T0, interval_s=1.0,
            gpu_uuid=tuple(f"GPU-{i}" for i in range(65)), gpu_index=tuple(i % 8 for i in range(65)))),
        "unknown": msgspec.json.encode({**template, "gpu_uuid": [template["gpu_uuid"][0], "GPU-not-announced"]}),
    }
    assert b"NaN" in bad["nan"]
    settings = collector_settings(nats_proc.url, fresh_database_url, inventory_attempts=2)
    async with running_collector(settings), bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        letters: list[Any] = []
        await nc.subscribe("deadletter.>", cb=collect_into(letters))
        await publish_inventory(js, fleet)
        await publish_batches(js, good[:1])
        for payload in bad.values():
            await js.publish(subject, payload)
        await publish_batches(js, good[1:])  # the collector keeps going
        await wait_for(lambda: len(letters) >= len(bad), 30, what="six dead letters")
        await wait_for(lambda: count_rows(fresh_database_url) == 6, 30, what="three good batches stored")
        stats = await collector_stats(nc)
    reasons = sorted(m.headers[HEADER_REASON] for m in letters)
    assert sum("decode error" in r for r in reasons) == 3  # NaN, negative, garbage: rejected by the schema
    assert any("Expected `float` >= 0.0" in r and "$.util_pct[0]" in r for r in reasons)
    assert any("absurd_value" in r and "mem_used_mib 90000 > mem_total_mib" in r for r in reasons)
    assert any("oversized: 65 GPUs" in r for r in reasons)
    assert any("unknown_gpu: GPU GPU-not-announced" in r for r in reasons)
    assert all(m.subject == f"deadletter.{subject}" for m in letters)
    assert stats.rejected == {"absurd_value": 1, "oversized": 1, "unknown_gpu": 1}
    assert (stats.decode_errors, stats.dead_lettered, stats.rows_new) == (3, 6, 6)


async def test_rollups_of_closed_windows_are_published_and_tables_refreshed(nats_proc, fresh_database_url) -> None:
    fleet = quiet_fleet(2, 4, [flat_trace(50)], clock=ManualClock(T0))
    settings = collector_settings(nats_proc.url, fresh_database_url, refresh_interval_s=0.2)
    latest = T0 + 60  # watermark T0+149 s, grace 5 s: the latest closed minute is [T0+60, T0+120)

    def minutes() -> tuple[int, int] | None:
        with psycopg.connect(fresh_database_url) as conn:
            return conn.execute("SELECT count(*), sum(samples) FROM gpu_metrics_1m").fetchone()

    async with running_collector(settings), bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        rolled: list[GpuRolledUp] = []
        await nc.subscribe(f"{GPU_ROLLED_UP}.>",
                           cb=collect_into(rolled, lambda m: msgspec.json.decode(m.data, type=GpuRolledUp)))
        await publish_inventory(js, fleet)
        await publish_batches(js, fleet_batches(fleet, T0, 150))
        await wait_for(lambda: sum(m.window_start == latest for m in rolled) == 2, 20, what="rollups of both nodes")
        # the rollup tables follow: 8 GPUs x 3 minutes, every sample counted once
        await wait_for(lambda: minutes() == (8 * 3, 8 * 150), 20, what="gpu_metrics_1m refreshed")
    # a watermark seen while the COPYs were still landing may have closed [T0, T0+60) first; nothing later
    assert {(m.node, m.window) for m in rolled if m.window_start == latest} == {("node-0", "1m"), ("node-1", "1m")}
    assert all(m.window_start in (T0, latest) for m in rolled)
    g = next(m for m in rolled if m.window_start == latest).gpus[0]
    assert g.samples == 60 and (g.util_pct.mean, g.util_pct.max, g.util_pct.p95) == pytest.approx((50, 50, 50))
    assert {x.gpu_index for m in rolled if m.window_start == latest for x in m.gpus} == {0, 1, 2, 3}


def _published_rows(batches) -> int:
    return sum(len(b.gpu_uuid) for b in batches)


async def test_collector_killed_mid_stream_loses_and_duplicates_no_sample(nats_proc, fresh_database_url, tmp_path):
    fleet = quiet_fleet(40, 8, [flat_trace(50)], clock=ManualClock(T0))
    batches = fleet_batches(fleet, T0, 60)  # 2,400 messages, 19,200 GPU rows
    expected = _published_rows(batches)
    env = {"GPUAWARE_TELEMETRY_COLLECTOR_ACK_WAIT_S": "3", "GPUAWARE_TELEMETRY_COLLECTOR_FETCH_BATCH": "64",
           "GPUAWARE_TELEMETRY_COLLECTOR_LINGER_S": "0.005"}
    log = tmp_path / "collector.log"
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        await publish_inventory(js, fleet)
        await publish_batches(js, batches[:1200])
        first = start_collector_process(nats_proc.url, fresh_database_url, log,
                                        GPUAWARE_TELEMETRY_COLLECTOR_INSTANCE_ID="first", **env)
        try:
            await wait_for(lambda: count_rows(fresh_database_url) >= 3000, 60, interval=0.02,
                           what="the first collector to be mid-stream")
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
        at_kill = count_rows(fresh_database_url)
        assert 0 < at_kill < expected
        await publish_batches(js, batches[1200:])  # published while no collector runs: they wait in JetStream
        second = start_collector_process(nats_proc.url, fresh_database_url, log,
                                         GPUAWARE_TELEMETRY_COLLECTOR_INSTANCE_ID="second", **env)
        try:
            await wait_for(lambda: count_rows(fresh_database_url) == expected, 60, what=f"{expected} rows")
            await wait_for(lambda: _settled(js), 15, what="every message acked")
            stats = await collector_stats(nc)
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0
        finally:
            if second.poll() is None:
                second.kill()
    with psycopg.connect(fresh_database_url) as conn:
        rows, distinct, ticks = conn.execute(
            "SELECT count(*), count(DISTINCT (gpu_uuid, ts)), count(DISTINCT ts) FROM gpu_samples").fetchone()
        per_tick = {n for (n,) in conn.execute("SELECT count(*) FROM gpu_samples GROUP BY ts")}
    assert (rows, distinct, ticks, per_tick) == (expected, expected, 60, {320})
    # messages in flight when the first collector died came again to the second (rows already committed by
    # the first were skipped: rows_written - rows_new of them), and nothing was dead-lettered
    assert stats.instance == "second" and stats.redeliveries > 0, log.read_text()
    # the second collector added exactly what the first had not committed
    assert stats.rows_new == expected - at_kill and stats.rows_written >= stats.rows_new
    assert stats.dead_lettered == 0


async def test_two_collectors_on_one_durable_share_a_stream_without_duplicates(nats_proc, fresh_database_url,
                                                                             tmp_path) -> None:
    """Scale-out: two collector processes started together on a filled stream split it (each stores a
    part), every row once, and neither one's partition upkeep fails (the race itself: test_tsdb_partitions)."""
    fleet = quiet_fleet(40, 8, [flat_trace(50)], clock=ManualClock(T0))
    batches = fleet_batches(fleet, T0, 60)  # 2,400 messages, 19,200 GPU rows
    expected = _published_rows(batches)
    log = tmp_path / "collectors.log"
    env = {"GPUAWARE_TELEMETRY_COLLECTOR_FETCH_BATCH": "32", "GPUAWARE_TELEMETRY_COLLECTOR_LOG_LEVEL": "INFO"}
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        await publish_inventory(js, fleet)
        await publish_batches(js, batches)
        procs = [start_collector_process(nats_proc.url, fresh_database_url, log,
                                         GPUAWARE_TELEMETRY_COLLECTOR_INSTANCE_ID=name, **env) for name in ("a", "b")]
        try:
            await wait_for(lambda: count_rows(fresh_database_url) == expected, 60, what=f"{expected} rows")
            await wait_for(lambda: _settled(js), 15, what="every message acked")
            seen: dict[str, CollectorStats] = {}
            for _ in range(40):  # the endpoint is a queue group: ask until both replicas answered
                stats = await collector_stats(nc)
                seen[stats.instance] = stats
                if len(seen) == 2:
                    break
            for p in procs:
                p.send_signal(signal.SIGTERM)
            assert [p.wait(20) for p in procs] == [0, 0]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    with psycopg.connect(fresh_database_url) as conn:
        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT (gpu_uuid, ts)) FROM gpu_samples").fetchone()
    assert (rows, distinct) == (expected, expected)
    assert set(seen) == {"a", "b"}
    assert all(x.rows_new > 0 for x in seen.values()), {k: x.rows_new for k, x in seen.items()}
    assert sum(x.rows_new for x in seen.values()) == expected
    assert sum(x.dead_lettered for x in seen.values()) == 0
    assert "upkeep failed" not in log.read_text()


async def _settled(js) -> bool:
    info = await js.consumer_info("TELEMETRY", "telemetry-collector")
    return info.num_pending == 0 and info.num_ack_pending == 0


async def _outage(nats_proc, own_postgres, outage_s: float) -> None:
    url = own_postgres.url
    await migrate(url)
    fleet = quiet_fleet(20, 8, [flat_trace(50)], clock=ManualClock(T0))
    ticks = int(outage_s * 10) + 40  # one tick of 160 GPU rows every 0.1 s, before, during and after
    settings = collector_settings(nats_proc.url, url)
    published: list[Any] = []
    async with running_collector(settings), bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        await publish_inventory(js, fleet)

        async def publish() -> None:
            for k in range(ticks):
                batch = fleet_batches(fleet, T0 + k, 1)
                await publish_batches(js, batch)
                published.extend(batch)
                await asyncio.sleep(0.1)

        publisher = asyncio.create_task(publish())
        await wait_for(lambda: count_rows(url) > 0, 20, what="samples before the outage")
        await asyncio.to_thread(own_postgres.stop)
        outage_start = len(published)
        await asyncio.sleep(outage_s)
        outage_end = len(published)
        await asyncio.to_thread(own_postgres.restart)
        await publisher
        expected = _published_rows(published)
        await wait_for(lambda: count_rows(url) == expected, 60, what=f"{expected} rows after the outage")
        stats = await collector_stats(nc)
    assert outage_end - outage_start >= outage_s * 5 * 20  # samples really were published during the outage
    with psycopg.connect(url) as conn:
        during = conn.execute("SELECT count(*) FROM gpu_samples WHERE ts >= to_timestamp(%s) AND ts < to_timestamp(%s)",
                              (published[outage_start].sampled_at, published[outage_end - 1].sampled_at + 1)
                              ).fetchone()[0]
    assert during == _published_rows(published[outage_start:outage_end])
    assert stats.copy_retries > 0 and stats.dead_lettered == 0, stats


@pytest.mark.slow
async def test_database_outage_of_30_seconds_loses_no_sample(nats_proc, own_postgres) -> None:
    await _outage(nats_proc, own_postgres, 30.0)


async def test_samples_wait_for_an_inventory_a_dead_replica_was_holding(nats_proc, fresh_database_url) -> None:
    """A replica that died holding a node's inventory message (delivered, never acknowledged) gives
    it back only after the consumer's ack wait; the node's samples must wait that long, not be
    dead-lettered for "no inventory" first."""
    fleet = quiet_fleet(1, 4, [flat_trace(50)], clock=ManualClock(T0))
    batches = fleet_batches(fleet, T0, 5)
    expected = sum(len(b.gpu_uuid) for b in batches)
    settings = collector_settings(nats_proc.url, fresh_database_url, ack_wait_s=5.0)
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        async with running_collector(settings):  # declares the durable, then goes away
            pass
        letters: list[Any] = []
        await nc.subscribe("deadletter.>", cb=collect_into(letters))
        await publish_inventory(js, fleet)
        dead_replica = await js.pull_subscribe_bind(settings.durable, "TELEMETRY")
        held = await dead_replica.fetch(1, timeout=5)  # the inventory, never acknowledged
        assert held[0].subject.startswith("telemetry.node.inventory.v1")
        await publish_batches(js, batches)
        async with running_collector(settings):
            await wait_for(lambda: count_rows(fresh_database_url) == expected, 40, what=f"{expected} rows")
            stats = await collector_stats(nc)
    assert letters == [] and stats.dead_lettered == 0
