"""The collector's batch handler against a real PostgreSQL: what one pulled batch does.

A pull loop's batch is handled at once (`CollectorHandlers.handle_batch`); these tests call it
directly with real messages and deliveries, without NATS, to pin what a batch means for the
inventory check: every node a batch announces counts for all of the batch's samples, so another
pull loop's samples never bounce for an announcement this batch is still writing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from telemetry_helpers import T0, collector_settings, count_rows, flat_trace, fleet_batches, quiet_fleet

from gpuaware import bus, tsdb
from gpuaware.gpu import ManualClock
from gpuaware.services.telemetry.handlers import CollectorHandlers


def delivered(msgs: Sequence[Any]) -> list[bus.Delivery]:
    return [bus.Delivery(subject="telemetry.test", stream="TELEMETRY", consumer="test", stream_seq=i + 1, attempt=1,
                         max_deliver=100, msg_id=None, headers={}) for i in range(len(msgs))]


@pytest.fixture
async def handlers(fresh_database_url: str) -> AsyncIterator[CollectorHandlers]:
    await tsdb.migrate(fresh_database_url)
    settings = collector_settings("nats://unused:4222", fresh_database_url, inventory_attempts=3)
    pool = await tsdb.open_pool(fresh_database_url, application_name="test", max_size=4)
    h = CollectorHandlers(settings, pool, None, "test", clock=lambda: T0 + 60)
    try:
        yield h
    finally:
        await h.stop()


async def test_a_batch_announcing_a_node_stores_its_samples_even_those_ahead_of_the_announcement(
        handlers: CollectorHandlers, fresh_database_url: str) -> None:
    fleet = quiet_fleet(2, 4, [flat_trace(50)], clock=ManualClock(T0))
    samples = fleet_batches(fleet, T0, 2)
    inventories = fleet.inventories()
    # another pull loop's samples, then the announcements, then more samples: one batch
    batch: list[Any] = [samples[0], *inventories, *samples[1:]]
    failures = await handlers.handle_batch(batch, delivered(batch))
    assert failures == {}
    assert count_rows(fresh_database_url) == 2 * 2 * 4
    assert count_rows(fresh_database_url, "gpu_inventory") == 2 * 4
    # announced again, unchanged: nothing to write, nothing refused
    assert await handlers.handle_batch(list(inventories), delivered(inventories)) == {}
