"""Bus benchmark: JetStream publish -> durable consume of telemetry-sized batches on loopback.

Why it is shaped like this: the telemetry path is the bus's high-rate case, one `GpuSampled`
batch per node per tick (32 GPUs x 25 columns here). The publisher (the node agent's side) and
the consumer (the collector's side) run in *separate processes*, as in production, both through
`gpuaware.bus` (typed channel, Nats-Msg-Id, trace headers, decode + validation, explicit acks), so
the figures include everything a service pays, not a bare nats-py loop. End-to-end latency is
consumer-decoded time minus publish time, both on CLOCK_MONOTONIC (system-wide on Linux), carried
in a header.

Scenarios:
  saturated  async-publish pipelining (up to `--window` unacked publishes) as fast as possible:
             peak throughput; its latency is mostly queueing, so read it with that in mind.
  paced      the same pipelined publisher held to `--rate` msg/s (e.g. 1000 nodes at 1 Hz):
             the latency a message sees when the bus is not saturated.

Run: `make bench-bus` (or `.venv/bin/python bench/bus.py --help`). Writes bench/results/bus.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec
from bench_paths import RESULTS_DIR
from machine_info import machine as shared_machine

from gpuaware import bus
from gpuaware.devstack import start_nats
from gpuaware.schemas import percentile

RESULTS = RESULTS_DIR / "bus.json"
SENT_HEADER = "Bench-Sent-Ns"
STREAM = "BENCH"
GPUS = 32

try:
    from gpuaware.schemas import METRIC_COLUMNS, GpuSampled

    SCHEMA = "gpuaware.schemas.telemetry.GpuSampled"
except ImportError:  # the contract not there yet: a local Struct of the same size and shape
    METRIC_COLUMNS = tuple(f"metric_{i:02d}" for i in range(23))
    GpuSampled = msgspec.defstruct(  # type: ignore[misc]  # a stand-in Struct class made at run time
        "GpuSampled",
        [("source", str), ("emitted_at", float), ("node", str), ("sampled_at", float), ("interval_s", float),
         ("seq", int), ("gpu_uuid", tuple[str, ...]), ("gpu_index", tuple[int, ...])]
        + [(c, tuple[float, ...]) for c in METRIC_COLUMNS],
        kw_only=True, frozen=True)
    SCHEMA = "local Struct (gpuaware.schemas.telemetry absent)"


def _column(name: str, rng: random.Random) -> tuple[Any, ...]:
    """Plausible values per metric (the encoded size depends on them)."""
    def pick() -> Any:
        if name.endswith("_pct"):
            return round(rng.uniform(0, 100), 1)
        if name == "mem_total_mib":
            return 81559
        if name == "mem_used_mib":
            return rng.randint(0, 81559)
        if name.endswith("temperature_c"):
            return round(rng.uniform(30, 85), 1)
        if name == "power_w":
            return round(rng.uniform(60, 700), 1)
        if name == "power_limit_w":
            return 700.0
        if name.endswith("clock_mhz"):
            return rng.choice((1410, 1755, 1980, 2619))
        if name == "row_remap_pending":
            return False
        if name == "nvlink_up":
            return 18
        if name == "throttle_reasons":
            return rng.choice((0, 1, 4))
        if name.startswith("metric_"):
            return round(rng.uniform(0, 100), 2)
        return rng.randint(0, 3)  # counters: ECC, retired pages, remapped rows, xid, PCIe replays
    return tuple(pick() for _ in range(GPUS))


def make_batches(count: int, variants: int = 64, seed: int = 7) -> list[Any]:
    """`count` batches cycling over `variants` nodes; each (node, seq) is a distinct message id."""
    rng = random.Random(seed)
    templates = []
    for v in range(variants):
        node = f"node-{v:04d}"
        templates.append(dict(
            source=f"agent/{node}", emitted_at=time.time(), node=node, sampled_at=time.time(), interval_s=1.0,
            gpu_uuid=tuple(f"GPU-{v:04d}-{g:02d}-5d1f0c2e-8a4b-4e0f-9c3d" for g in range(GPUS)),
            gpu_index=tuple(range(GPUS)), **{c: _column(c, rng) for c in METRIC_COLUMNS}))
    return [GpuSampled(seq=i, **templates[i % variants]) for i in range(count)]


def channel(subject: str) -> bus.Channel[Any]:
    # JetStream de-duplicates per stream, not per subject: the scenario's subject is part of the id
    return bus.Channel(subject, GpuSampled, id_of=lambda m: f"{subject}:{m.node}:{m.seq}")


# --- consumer process -------------------------------------------------------------------------

def consumer_main(url: str, subject: str, durable: str, expected: int, batch: int, ready: Any, out: Any) -> None:
    asyncio.run(_consume(url, subject, durable, expected, batch, ready, out))


async def _consume(url: str, subject: str, durable: str, expected: int, batch: int, ready: Any,
                   out: Any) -> None:
    latencies: list[int] = []
    first = last = 0
    done = asyncio.Event()

    async def handle(msg: Any, ctx: bus.Delivery) -> None:
        nonlocal first, last
        now = time.perf_counter_ns()
        latencies.append(now - int(ctx.headers[SENT_HEADER]))
        first = first or now
        last = now
        if len(latencies) >= expected:
            done.set()

    async with bus.connected(url, name="bench-consumer", initial_timeout=10) as nc:
        js = nc.jetstream()
        consumer = await bus.subscribe_durable(js, channel(subject), durable, handle, stream=STREAM, batch=batch,
                                               poll=0.5, max_ack_pending=max(batch * 4, 1000))
        ready.set()
        await done.wait()
        await consumer.stop()
        stats = consumer.stats
    out.put({"latencies_ns": latencies, "first_ns": first, "last_ns": last,
             "processed": stats.processed, "dead_lettered": stats.dead_lettered})


# --- publisher (this process) -----------------------------------------------------------------

@dataclass
class Result:
    scenario: str
    messages: int
    payload_bytes: int
    window: int
    target_rate: float | None
    publish_rate: float
    """messages/s from the first publish to the last ack"""
    e2e_rate: float
    """messages/s from the first publish to the last message handled by the consumer"""
    e2e_mib_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    processed: int
    duplicates_on_publish: int


async def run_scenario(url: str, name: str, count: int, window: int, rate: float | None, batch: int,
                       ctx: Any) -> Result:
    subject = f"bench.{name}.telemetry.gpu.sampled.v1"
    durable = f"bench_{name}"
    messages = make_batches(count)
    ch = channel(subject)
    payload_bytes = len(ch.encode(messages[0]))

    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=consumer_main, args=(url, subject, durable, count, batch, ready, out), daemon=True)
    try:
        return await _publish(url, name, count, window, rate, batch, subject, durable, messages, ch,
                              payload_bytes, ready, out, proc)
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(10)


async def _publish(url: str, name: str, count: int, window: int, rate: float | None, batch: int, subject: str,
                   durable: str, messages: list[Any], ch: bus.Channel[Any], payload_bytes: int, ready: Any,
                   out: Any, proc: Any) -> Result:
    async with bus.connected(url, name="bench-publisher", initial_timeout=10) as nc:
        js = nc.jetstream(publish_async_max_pending=window)
        await bus.ensure_consumer(js, STREAM, bus.ConsumerSpec(durable=durable, filter_subject=subject,
                                                               max_ack_pending=max(batch * 4, 1000)))
        proc.start()
        if not await asyncio.to_thread(ready.wait, 30):
            raise RuntimeError("consumer process did not start")
        futures = []
        interval = 1.0 / rate if rate else 0.0
        start = time.perf_counter()
        for i, m in enumerate(messages):
            if interval:
                delay = start + i * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            futures.append(await bus.publish_async(js, ch, m, headers={SENT_HEADER: str(time.perf_counter_ns())}))
        acks = await asyncio.gather(*futures)
        acked = time.perf_counter()
        got = await asyncio.to_thread(out.get, True, 120)

    lat = sorted(got["latencies_ns"])
    first_send_ns = int(start * 1e9)
    e2e_s = (got["last_ns"] - first_send_ns) / 1e9
    return Result(
        scenario=name, messages=count, payload_bytes=payload_bytes, window=window, target_rate=rate,
        publish_rate=count / (acked - start), e2e_rate=count / e2e_s,
        e2e_mib_s=count * payload_bytes / e2e_s / 2**20,
        p50_ms=percentile(lat, 50) / 1e6, p99_ms=percentile(lat, 99) / 1e6, max_ms=lat[-1] / 1e6,
        processed=got["processed"], duplicates_on_publish=sum(1 for a in acks if a.duplicate))


def machine() -> dict[str, Any]:
    return shared_machine("nats-py", "msgspec", nats_server=True)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="gpuaware-bench-") as tmp:
        server = start_nats(Path(tmp) / "nats")
        try:
            async with bus.connected(server.url, name="bench-setup", initial_timeout=10) as nc:
                await bus.ensure_stream(nc.jetstream(), bus.SimpleStreamSpec(
                    name=STREAM, subjects=("bench.>",), storage=args.storage, max_bytes=8 << 30,
                    duplicate_window_s=120))
            results = [
                await run_scenario(server.url, "saturated", args.messages, args.window, None, args.batch, ctx),
                await run_scenario(server.url, "paced", int(args.rate * args.paced_seconds), args.window,
                                   args.rate, args.batch, ctx),
            ]
        except BaseException:
            log = Path(tmp) / "nats" / "nats-server.log"
            print(f"--- nats-server.log (tail) ---\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
        finally:
            server.stop()
    return {
        "benchmark": "gpuaware.bus JetStream publish -> durable pull consume (separate processes, loopback)",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "parameters": {"schema": SCHEMA, "gpus_per_message": GPUS, "columns_per_gpu": 2 + len(METRIC_COLUMNS),
                       "messages_saturated": args.messages, "paced_rate_msg_s": args.rate,
                       "paced_seconds": args.paced_seconds, "publish_window": args.window,
                       "consumer_fetch_batch": args.batch, "consumer_concurrency": 1,
                       "stream_storage": args.storage, "ack": "explicit, per message",
                       "latency": "consumer handler entry minus publish call, CLOCK_MONOTONIC ns"},
        "results": [asdict(r) for r in results],
    }


def show(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    m = report["machine"]
    table = Table(title=f"gpuaware.bus: {report['parameters']['gpus_per_message']} GPUs x "
                        f"{report['parameters']['columns_per_gpu']} columns per message, "
                        f"{report['parameters']['stream_storage']} stream",
                  caption=f"{m['cpu_count']} x {m['cpu_model']}, Python {m['python']}, {m['nats_server']}")
    for col in ("scenario", "msgs", "bytes/msg", "publish msg/s", "e2e msg/s", "e2e MiB/s", "p50 ms", "p99 ms",
                "max ms"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for r in report["results"]:
        name = r["scenario"] + (f" @{r['target_rate']:.0f}/s" if r["target_rate"] else f" (window {r['window']})")
        table.add_row(name, f"{r['messages']:,}", f"{r['payload_bytes']:,}", f"{r['publish_rate']:,.0f}",
                      f"{r['e2e_rate']:,.0f}", f"{r['e2e_mib_s']:.1f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
                      f"{r['max_ms']:.2f}")
    Console(width=None if sys.stdout.isatty() else 120).print(table)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000, help="messages in the saturated run")
    p.add_argument("--rate", type=float, default=1000.0, help="msg/s of the paced run")
    p.add_argument("--paced-seconds", type=float, default=5.0, help="duration of the paced run")
    p.add_argument("--window", type=int, default=1000, help="max unacked async publishes")
    p.add_argument("--batch", type=int, default=256, help="consumer fetch batch")
    p.add_argument("--storage", choices=("file", "memory"), default="file")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    report = asyncio.run(main(arguments))
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(report, indent=2) + "\n")
    show(report)
    print(f"wrote {arguments.out}")
