"""The recorder against a real nats-server and PostgreSQL: every loop event of its cluster stored once,
what it cannot read dead-lettered, a restart that reads the streams again writes nothing twice, and it
answers as a NATS micro service with its metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from recorder_helpers import caught_up, pod_events, publish, running, stored, until
from service_runner import ensure_streams

from gpuaware import bus
from gpuaware.schemas import BINDER, HEADER_REASON, PLACEMENT, POD_BOUND, recorder_durable
from gpuaware.services.recorder.handlers import recorder_samples

C = "rec1"
EXPECTED = {"binder.pod.pending.v1": 2, "placement.pod.decided.v1": 2, "binder.pod.bound.v1": 2,
            "binder.checkpoint.requested.v1": 2}


async def test_every_loop_event_is_stored_once_and_bad_messages_are_dead_lettered(
        nats_proc: Any, fresh_database_url: str) -> None:
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        letters: list[Any] = []

        async def on_letter(msg: Any) -> None:
            letters.append(msg)

        await nc.subscribe("deadletter.>", cb=on_letter)
        # published before the recorder starts: the durable reads the streams from their start
        await publish(js, pod_events(C, "a"))
        async with running(nats_proc.url, fresh_database_url, C) as service:
            await publish(js, pod_events(C, "b") + pod_events("another-cluster", "c"))
            await js.publish(POD_BOUND, b"not json")  # undecodable
            await js.publish("binder.pod.bound.v9", b"{}")  # a version nobody reads here
            await until(lambda: caught_up(js, C), what="both durables acknowledged everything")
            assert stored(fresh_database_url, C) == EXPECTED
            assert stored(fresh_database_url, "another-cluster") == {}  # left to that cluster's recorder
            await until(lambda: asyncio.sleep(0, len(letters) >= 2), what="two dead letters")
            assert sorted(m.subject for m in letters) == [f"deadletter.{POD_BOUND}", "deadletter.binder.pod.bound.v9"]
            assert all("decode error" in m.headers[HEADER_REASON] for m in letters)
            # it answers like every service, and its series say what it stored
            ping = await bus.request(nc, "$SRV.PING.recorder", {}, dict, timeout=5.0)
            assert ping["name"] == "recorder"
            series = {(x.name, tuple(x.labels.values())): x.value for x in recorder_samples(service)}
            assert series[("gpuaware_recorder_rows_new", ())] == 8
            assert series[("gpuaware_recorder_skipped", ("other_cluster",))] == 4
            assert series[("gpuaware_recorder_events", ("binder.pod.bound.v1",))] == 2
            assert series[("gpuaware_bus_dead_letters", (f"BINDER/{recorder_durable(C)}",))] == 2


async def test_a_restart_that_reads_the_streams_again_writes_nothing_twice(nats_proc: Any,
                                                                           fresh_database_url: str) -> None:
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        await publish(js, pod_events(C, "a") + pod_events(C, "b"))
        async with running(nats_proc.url, fresh_database_url, C):
            await until(lambda: caught_up(js, C), what="the first pass")
        assert stored(fresh_database_url, C) == EXPECTED
        # the durables forgotten (a new deployment, a lost consumer): every message is delivered again
        for stream in (BINDER.name, PLACEMENT.name):
            await js.delete_consumer(stream, recorder_durable(C))
        async with running(nats_proc.url, fresh_database_url, C) as service:
            await until(lambda: caught_up(js, C), what="the second pass")
            assert service.writer.stats.rows == 8 and service.writer.stats.new_rows == 0
        assert stored(fresh_database_url, C) == EXPECTED
