"""The recorder through a PostgreSQL outage: the batches it holds and the messages that keep arriving
are all stored once the database is back, none twice, none dead-lettered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from recorder_helpers import caught_up, pod_events, publish, running, stored, until
from service_runner import ensure_streams

from gpuaware import bus
from gpuaware.devstack import PostgresProcess, start_postgres

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone

C = "outage1"


async def test_events_recorded_while_postgres_is_stopped_land_once_it_is_back(
        nats_proc: Any, own_postgres: PostgresProcess, tmp_path: Path) -> None:
    pg = own_postgres
    url = pg.url
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        letters: list[Any] = []

        async def on_letter(msg: Any) -> None:
            letters.append(msg)

        await nc.subscribe("deadletter.>", cb=on_letter)
        # a short hold and quick retries: the outage outlasts the hold, so messages go back to JetStream
        # and come again, as they would in a long outage
        async with running(nats_proc.url, url, C, hold_s=1.0, retry_cap_s=1.0, db_timeout_s=0.5) as service:
            await publish(js, pod_events(C, "a"))
            await until(lambda: caught_up(js, C), what="the first pod stored")
            pg.stop()
            await publish(js, pod_events(C, "b") + pod_events(C, "c"))
            await until(lambda: asyncio.sleep(0, service.writer.stats.failures >= 1),
                        what="a batch given up after its hold (handed back for redelivery)")
            assert not await caught_up(js, C)
            pg = start_postgres(tmp_path / "postgres", port=pg.port)
            await until(lambda: caught_up(js, C), timeout=60.0, what="everything stored after the outage")
            assert stored(url, C) == {"binder.pod.pending.v1": 3, "placement.pod.decided.v1": 3,
                                      "binder.pod.bound.v1": 3, "binder.checkpoint.requested.v1": 3}
            assert service.writer.stats.new_rows == 12 and service.refused == 0
        assert letters == []
        pg.stop()
