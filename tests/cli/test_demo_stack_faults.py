"""What the demo does when its stack misbehaves: recorded events survive a PostgreSQL stop
(kept and written again), a nats-server named by NATS_URL keeps its streams, a run's durable consumers
do not outlive it, and a killed nats-server of the demo's own stack is started again."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuaware import bus, tsdb
from gpuaware.cli.demo import _keep_stack_up
from gpuaware.cli.demo_bus import delete_loop_streams, delete_run_consumers
from gpuaware.cli.demo_record import EventWriter, RunLog
from gpuaware.devstack import NatsProcess, stack_down, stack_health, stack_up, start_nats, start_postgres
from gpuaware.devstack.processes import pid_alive
from gpuaware.schemas.streams import BINDER, PLACEMENT
from gpuaware.tsdb import PlacementEvent, count_placement_events

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


def _rows(cluster: str, n: int, start: int) -> list[PlacementEvent]:
    now = datetime.now(UTC)
    return [PlacementEvent(cluster=cluster, subject="placement.pod.decided.v1", msg_key=f"d{i}", pod_uid=f"p{i}",
                           event_at=now, decision_id=f"d{i}", node="n1", gpu_milli=1000, detail="GpuAware")
            for i in range(start, start + n)]


async def _eventually(check, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_recorded_events_are_kept_through_a_postgres_stop_and_written_when_it_is_back(tmp_path: Path) -> None:
    # a 20 s PostgreSQL stop made the demo drop 619 rows ("couldn't get a connection"): now none is lost
    pg = start_postgres(tmp_path / "pg")
    try:
        await tsdb.migrate(pg.url)
        pool = await tsdb.open_pool(pg.url, application_name="t", min_size=0, max_size=1, timeout=0.5)
        cluster = f"c{uuid.uuid4().hex[:6]}"
        log = RunLog(cluster)
        writer = EventWriter(pool, log, every_s=0.1, drain_s=30.0)
        task = asyncio.create_task(writer.run())
        log.rows.extend(_rows(cluster, 5, 0))
        await _eventually(lambda: writer.written == 5, what="the first rows written")
        pg.stop()
        log.rows.extend(_rows(cluster, 7, 5))
        await _eventually(lambda: writer.failures > 0, what="a failed write")
        assert len(log.rows) == 7  # kept, not dropped
        pg = start_postgres(tmp_path / "pg", port=pg.port)
        log.rows.extend(_rows(cluster, 3, 12))
        writer.stop.set()
        await asyncio.wait_for(task, 40)
        assert writer.written == 15 and log.rows == []
        async with pool.connection() as conn:
            assert await count_placement_events(conn, cluster) == {"placement.pod.decided.v1": 15}
        await pool.close()
    finally:
        pg.stop()


async def test_somebody_elses_server_keeps_its_streams_and_a_run_leaves_no_durables(tmp_path: Path) -> None:
    proc: NatsProcess = start_nats(tmp_path / "nats")
    try:
        async with bus.connected(proc.url, name="t") as nc:
            js = nc.jetstream()
            for spec in (BINDER, PLACEMENT):
                await bus.ensure_stream(js, spec)
            await js.publish("binder.pod.pending.v1", b"{}")
            await delete_loop_streams(js, ours=False)  # NATS_URL: not ours, nothing deleted
            assert (await js.stream_info(BINDER.name)).state.messages == 1
            await delete_loop_streams(js, ours=True)
            assert (await js.stream_info(BINDER.name)).state.messages == 0
            for durable in ("placement-run1-gpuaware", "binder-run1-gpuaware", "placement-other"):
                await js.add_consumer(BINDER.name, durable_name=durable, filter_subject="binder.pod.pending.*")
            gone = await delete_run_consumers(js, "run1-gpuaware")
            assert sorted(gone) == ["BINDER/binder-run1-gpuaware", "BINDER/placement-run1-gpuaware"]
            assert [c.name for c in await js.consumers_info(BINDER.name)] == ["placement-other"]
    finally:
        proc.stop()


async def test_the_demo_starts_a_killed_nats_server_of_its_own_stack_again(stack_dir: Path) -> None:
    data = stack_dir / "keeper"
    first = await asyncio.to_thread(stack_up, data, nats_port=0, pg_port=0, env={})
    keeper = asyncio.create_task(_keep_stack_up(data, every_s=0.2))
    try:
        os.kill(first.state.nats_pid, signal.SIGKILL)
        await _eventually(lambda: not pid_alive(first.state.nats_pid), what="nats-server gone")

        def revived() -> bool:
            state, alive = stack_health(data)
            return state is not None and state.nats_pid != first.state.nats_pid and all(alive.values())

        await _eventually(revived, what="nats-server started again")
        async with bus.connected(first.state.nats_url, name="t") as nc:  # the same URL works again
            assert nc.is_connected
    finally:
        keeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await keeper
        await asyncio.to_thread(stack_down, data)
