"""The demo's proof that the foundation works end to end: publish → JetStream → durable consume →
PostgreSQL, with every message accounted for.

Telemetry-shaped batches (one per node per tick, the real `GpuSampled` contract) are published
with message ids, consumed by a durable consumer that writes the samples with the COPY writer and
records each message id in `bus_roundtrip`, so a redelivery stores nothing twice. The result
counts what was published, consumed and stored, and how long publish → stored took.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaware import bus, tsdb
from gpuaware.schemas import DEADLETTER, GPU_SAMPLED, TELEMETRY, GpuSampled, percentile
from gpuaware.telemetry import to_columns


def _batch_id(batch: GpuSampled) -> str:
    return f"{batch.node}:{batch.seq}"


CHANNEL = bus.Channel(GPU_SAMPLED, GpuSampled, id_of=_batch_id)
DURABLE = "demo-roundtrip"


@dataclass
class RoundTrip:
    published: int = 0
    consumed: int = 0
    stored_messages: int = 0
    stored_samples: int = 0
    redelivered_ignored: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)


def make_batch(node: str, seq: int, gpus: int, rng: random.Random, now: float) -> GpuSampled:
    util = tuple(round(rng.uniform(0, 100), 1) for _ in range(gpus))
    return GpuSampled(
        source="gpuaware-demo", emitted_at=now, node=node, sampled_at=now, interval_s=1.0, seq=seq,
        gpu_uuid=tuple(f"GPU-{node}-{i}" for i in range(gpus)), gpu_index=tuple(range(gpus)),
        util_pct=util, mem_used_mib=tuple(int(u * 800) for u in util), mem_total_mib=(81920,) * gpus,
        temperature_c=tuple(round(35 + u * 0.4, 1) for u in util), power_w=tuple(round(80 + u * 5, 1) for u in util),
    )


async def run_roundtrip(nats_url: str, database_url: str, *, nodes: int = 8, gpus: int = 8, ticks: int = 25,
                        progress: Callable[[int, int], None] | None = None, timeout: float = 60.0,
                        nats_options: Mapping[str, Any] | None = None) -> RoundTrip:
    result = RoundTrip()
    total = nodes * ticks
    sent_at: dict[str, float] = {}
    done = asyncio.Event()
    pool = await tsdb.open_pool(database_url, application_name="gpuaware-demo", max_size=4)
    try:
        async with bus.connected(nats_url, name="gpuaware-demo", **(nats_options or {})) as nc:
            js = nc.jetstream()
            for spec in (TELEMETRY, DEADLETTER):
                await bus.ensure_stream(js, spec)
            await js.purge_stream(TELEMETRY.name, subject=GPU_SAMPLED)

            async def store(batch: GpuSampled, delivery: bus.Delivery) -> None:
                result.consumed += 1
                msg_id = delivery.msg_id or _batch_id(batch)
                async with pool.connection() as conn, conn.transaction():
                    # the id and the samples commit together: a redelivery finds the id and stores nothing
                    fresh = await tsdb.store_roundtrip(conn, msg_id, delivery.subject,
                                                             {"node": batch.node, "seq": batch.seq})
                    # the collector's own road: GpuSampled -> columns -> one binary COPY
                    stored = (await tsdb.write_sample_columns(conn, tsdb.SampleColumns(*to_columns([batch])))
                              if fresh else 0)
                if fresh:
                    result.stored_samples += stored
                    result.stored_messages += 1
                    result.latencies_ms.append((time.perf_counter() - sent_at.get(msg_id, 0.0)) * 1000)
                else:
                    result.redelivered_ignored += 1
                if progress:
                    progress(result.stored_messages, total)
                if result.stored_messages >= total:
                    done.set()

            consumer = await bus.subscribe_durable(js, CHANNEL, DURABLE, store, batch=64, poll=0.2,
                                                   concurrency=4, deliver_policy="new")
            try:
                rng = random.Random(7)
                run_id = int(time.time())
                for tick in range(ticks):
                    now = time.time()
                    for n in range(nodes):
                        batch = make_batch(f"demo-node-{n}", run_id * 1000 + tick, gpus, rng, now)
                        sent_at[_batch_id(batch)] = time.perf_counter()
                        await bus.publish(js, CHANNEL, batch)
                        result.published += 1
                await asyncio.wait_for(done.wait(), timeout)
            finally:
                await consumer.stop()
    finally:
        await pool.close()
    return result
