"""Soak benchmark: the scheduling loop at 500 pods/s and telemetry at 100,000 samples/s together, for ten
minutes, with the resident memory (RSS) of every process sampled over time.

What runs: a private nats-server and PostgreSQL (gpuaware.devstack), the real placement service and the
real telemetry collector as processes of their own, this process as the world of `bench/loop.py`
(inventories of the openb cluster, pending pods published open loop at `--pods-per-s`, a minimal binder
answering each decision with a binding and finishing the oldest pods above 70 % allocation), and a
load-generator process as the agents of `bench/telemetry.py` (a simulated fleet at 1 Hz: 4,000 GPUs
x 25 metrics = 100,000 samples/s, 500 messages/s).

Sampled every `--sample-every-s`: RSS and CPU of placement, the collector, nats-server, PostgreSQL (the
postmaster and its backends) and this process; decisions per second and pending -> decided latency
(p50/p99, numpy) of the pods published in the period; telemetry rows stored per second and how far
the collector is behind the agents. The goal: memory growth after warm-up <= 10 % for every process
(PSS: the median over the last minute against the median over the first minute after warm-up; the
two single samples beside it).

Run: `make bench-soak` or `.venv/bin/python bench/soak.py --help`. Writes bench/results/soak.json
(machine noted, repo-relative paths only). The openb traces stay outside the repository
(GPUAWARE_SHARED_DATA, default ../shared/data); without them loop.py's synthetic cluster is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from bench_paths import RESULTS_DIR, ROOT
from loop import CLUSTER, MILLI, World, load_cluster, pending_payloads, publish_world
from machine_info import machine as shared_machine
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from telemetry import GPUS_PER_NODE, METRICS_PER_ROW, _children, _cpu_of, loadgen_main, start_time

from gpuaware import bus, tsdb
from gpuaware.devstack import start_nats, start_postgres
from gpuaware.schemas import STREAMS, percentile
from gpuaware.sim import shared_data_dir

RESULTS = RESULTS_DIR / "soak.json"
GOAL_RSS_GROWTH = 0.10
#: the loop streams' duplicate window (nats-server keeps each message id of the last two minutes in
#: memory: 240,000 of them at this rate) and PostgreSQL's 128 MB of shared buffers, touched within about
#: 90 s, are full by then; a minute more for the first garbage collections after that
WARMUP_S = max(s.duplicate_window_s for s in STREAMS if s.name in ("BINDER", "PLACEMENT")) + 60.0


def memory_mib(pids: list[int]) -> tuple[float, float]:
    """(RSS, PSS) of ``pids`` in MiB. PSS splits each shared page among the processes sharing it, so
    PostgreSQL's shared buffers count once over its postmaster and backends (summed RSS counts them in
    every backend that touched them); for a single process the two are about equal."""
    rss = pss = 0
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.Error, OSError):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20


def roles_pids(roles: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every pid of each role now (PostgreSQL: the postmaster and its current backends)."""
    return {role: pids + ([c for p in pids for c in _children(p)] if role == "postgres" else [])
            for role, pids in roles.items()}


def pct(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 2) if values else None


class Soaker(World):
    """loop.py's world, forgetting each pod once its latency was counted (so this process's own memory
    stays flat over ten minutes and does not blur the figures)."""

    def take_latencies(self, since: float) -> tuple[list[float], int]:
        """Latencies (ms) of pods sent before now and decided, and how many were decided since ``since``."""
        lat = []
        for uid in [u for u in self.decided if u in self.sent]:
            lat.append(1e3 * (self.decided[uid] - self.sent[uid]))
            del self.sent[uid], self.sent_wall[uid]
        done = sum(1 for t in self.decided.values() if t >= since)
        cutoff = time.monotonic() - 30.0
        for uid in [u for u, t in self.decided.items() if t < cutoff]:
            del self.decided[uid], self.decided_wall[uid]
        self.parked = {u for u in self.parked if u in self.sent}
        return lat, done


async def drive_pods(world: Soaker, pods: list[Any], rate: float, seconds: float, stop: asyncio.Event) -> int:
    """Publish pending pods at ``rate`` for ``seconds`` in one-second slices; returns how many."""
    sent = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end and not stop.is_set():
        batch = pending_payloads(pods, int(rate), 10_000_000 + sent)
        await world.offer(batch, rate)
        sent += len(batch)
    return sent


#: rows inserted into gpu_samples's partitions (native partitions or TimescaleDB chunks both inherit
#: from it), from PostgreSQL's statistics: constant work per probe, where a count(*) every five seconds
#: scanned a table growing by 4,000 rows/s with parallel workers and was the soak's own biggest load on
#: PostgreSQL and its memory
STORED_ROWS = """
SELECT coalesce(sum(s.n_tup_ins), 0) FROM pg_stat_user_tables s
JOIN pg_inherits i ON i.inhrelid = s.relid WHERE i.inhparent = 'gpu_samples'::regclass
"""


async def stored_rows(conn: tsdb.Connection) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    cur = await conn.execute(STORED_ROWS)
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    nodes, pods, pods_csv, source = load_cluster(shared_data_dir(ROOT))
    gpus = sum(n.num_gpu for n in nodes)
    seconds = args.minutes * 60
    tmp = Path(tempfile.mkdtemp(prefix="gpuaware-bench-soak-"))
    report: dict[str, Any] = {
        "benchmark": "soak: scheduling loop + telemetry ingest together, RSS of every process over time",
        "machine": {**shared_machine("nats-py", "psycopg", "numpy", nats_server=True),
                    "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
        "offered": {"pods_per_s": args.pods_per_s, "samples_per_s": args.samples_per_s,
                    "telemetry_gpus": args.samples_per_s // METRICS_PER_ROW, "minutes": args.minutes,
                    "warmup_s": args.warmup_s, "sample_every_s": args.sample_every_s},
        "cluster": {"source": source, "nodes": len(nodes), "gpus": gpus},
        "goal": {"rss_growth_after_warmup_max": GOAL_RSS_GROWTH},
    }
    nats = start_nats(tmp / "nats")
    pg = start_postgres(tmp / "postgres")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    gen = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    partial = False
    try:
        await tsdb.migrate(pg.url)
        async with bus.connected(nats.url, name="bench-soak") as nc:
            js = nc.jetstream()
            await publish_world(js, nodes)
            base = {**os.environ, "NATS_URL": nats.url, "DATABASE_URL": pg.url}
            env_p = {**base, "GPUAWARE_PLACEMENT_CLUSTER": CLUSTER, "GPUAWARE_PLACEMENT_INSTANCE_ID": "soak",
                     "GPUAWARE_PLACEMENT_WORLD_SNAPSHOT": "false", "GPUAWARE_PLACEMENT_LOG_LEVEL": "WARNING"}
            if pods_csv is not None:
                env_p["GPUAWARE_PLACEMENT_TYPICAL_PODS_FILE"] = str(pods_csv)
            env_c = {**base, "GPUAWARE_TELEMETRY_COLLECTOR_INSTANCE_ID": "soak",
                     "GPUAWARE_TELEMETRY_COLLECTOR_LOG_LEVEL": "WARNING"}
            for name, module, env in (("placement", ["gpuaware.services.placement"], env_p),
                                      ("collector", ["gpuaware.services.telemetry", "collector"], env_c)):
                with (tmp / f"{name}.log").open("wb") as log:
                    procs[name] = subprocess.Popen([sys.executable, "-m", *module], env=env, stdout=log,
                                                   stderr=subprocess.STDOUT)
            world = Soaker(nc, gpus * MILLI, sum(n.cpu_milli for n in nodes), 0.7)
            await world.start()
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            tel_gpus = max(GPUS_PER_NODE, args.samples_per_s // METRICS_PER_ROW)
            ticks = int(seconds) + 5
            gen = ctx.Process(target=loadgen_main, args=(nats.url, tel_gpus, ticks, True, start_time(), out))
            gen.start()
            kind, _ = await asyncio.to_thread(out.get, True, 120)
            assert kind == "ready"
            roles = {"placement": [procs["placement"].pid], "collector": [procs["collector"].pid],
                     "nats": [nats.pid], "postgres": [pg.pid], "bench_driver": [os.getpid()],
                     "bench_agents": [gen.pid]}
            driver = asyncio.create_task(drive_pods(world, pods, args.pods_per_s, seconds, stop))
            t0 = time.monotonic()
            series: list[dict[str, Any]] = []
            probe = await tsdb.connect(pg.url, autocommit=True)
            rows0, since = await stored_rows(probe), time.monotonic()
            cpu_prev = {r: sum(_cpu_of(p) for p in pids) for r, pids in roles_pids(roles).items()}
            with Progress(TextColumn("soak"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                          TimeRemainingColumn(), console=Console(stderr=True)) as bar:
                task = bar.add_task("soak", total=seconds)
                while not driver.done() and not stop.is_set():
                    await asyncio.sleep(args.sample_every_s)
                    now = time.monotonic()
                    lat, done = world.take_latencies(since)
                    rows = await stored_rows(probe)
                    pids = roles_pids(roles)
                    cpu = {r: sum(_cpu_of(p) for p in ps) for r, ps in pids.items()}
                    mem = {r: memory_mib(ps) for r, ps in pids.items()}
                    elapsed = now - t0
                    series.append({
                        "t_s": round(elapsed, 1),
                        "rss_mib": {r: round(m[0], 1) for r, m in mem.items()},
                        "pss_mib": {r: round(m[1], 1) for r, m in mem.items()},
                        "cpu_cores": {r: round((cpu[r] - cpu_prev.get(r, 0.0)) / (now - since), 2) for r in cpu},
                        "decisions_per_s": round(done / (now - since), 1),
                        "latency_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "n": len(lat)},
                        "rows_stored_per_s": round((rows - rows0) / (now - since), 1),
                        "samples_stored_per_s": round((rows - rows0) * METRICS_PER_ROW / (now - since)),
                    })
                    cpu_prev, rows0, since = cpu, rows, now
                    bar.update(task, completed=min(seconds, elapsed))
            await probe.close()
            partial = stop.is_set()
            driver.cancel()
            published = (await asyncio.gather(driver, return_exceptions=True))[0]
            report["pods_published"] = published if isinstance(published, int) else None
            report["series"] = series
            report["summary"] = summarise(series, args.warmup_s)
    finally:
        if gen is not None and gen.is_alive():
            gen.terminate()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        nats.stop()
        pg.stop()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    report["partial"] = partial
    report["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    return report


def summarise(series: list[dict[str, Any]], warmup_s: float, window_s: float = 60.0) -> dict[str, Any]:
    """Per process: memory at the end of warm-up and at the end, growth; rates and latency after warm-up.

    Growth is judged on the medians of the first and the last ``window_s`` after warm-up, not on two
    single samples: nats-server's Go heap saws by 10-15 % between collections and PostgreSQL's
    autovacuum workers come and go, so one sample taken at a trough and another at a crest would read
    as growth that is not there (or hide growth that is). The single-sample figures stay beside it."""
    after = [s for s in series if s["t_s"] >= warmup_s]
    if len(after) < 2:
        return {"note": "too short for a figure after warm-up"}
    first, last = after[0], after[-1]
    head = [s for s in after if s["t_s"] < first["t_s"] + window_s]
    tail = [s for s in after if s["t_s"] > last["t_s"] - window_s]
    rss = {}
    for role in first["pss_mib"]:  # judged on PSS: PostgreSQL's shared memory counted once (memory_mib)
        a, b = first["pss_mib"][role], last["pss_mib"][role]
        ma = float(np.median([s["pss_mib"][role] for s in head]))
        mb = float(np.median([s["pss_mib"][role] for s in tail]))
        growth = (mb - ma) / ma if ma else None
        # still growing at the end, or settled? the growth over the last third of the soak tells
        third = [s for s in after if s["t_s"] >= after[-1]["t_s"] - (after[-1]["t_s"] - after[0]["t_s"]) / 3]
        t0_mib = third[0]["pss_mib"][role]
        rss[role] = {"after_warmup_mib": a, "end_mib": b, "peak_mib": max(s["pss_mib"][role] for s in after),
                     "median_first_window_mib": round(ma, 1), "median_last_window_mib": round(mb, 1),
                     "rss_after_warmup_mib": first["rss_mib"][role], "rss_end_mib": last["rss_mib"][role],
                     "growth": None if growth is None else round(growth, 4),
                     "growth_single_samples": round((b - a) / a, 4) if a else None,
                     "growth_last_third": round((b - t0_mib) / t0_mib, 4) if t0_mib else None,
                     "goal_met": growth is not None and growth <= GOAL_RSS_GROWTH}
    services = ("placement", "collector", "nats", "postgres")
    p99 = [s["latency_ms"]["p99"] for s in after if s["latency_ms"]["p99"] is not None]
    return {
        "rss": rss,
        "rss_goal_met_by_every_service": all(rss[r]["goal_met"] for r in services if r in rss),
        "decisions_per_s": {"mean": round(float(np.mean([s["decisions_per_s"] for s in after])), 1),
                            "min": min(s["decisions_per_s"] for s in after)},
        "samples_stored_per_s": {"mean": round(float(np.mean([s["samples_stored_per_s"] for s in after]))),
                                 "min": min(s["samples_stored_per_s"] for s in after)},
        "latency_p99_ms_per_period": {"median": pct(p99, 50), "max": max(p99) if p99 else None},
        "cpu_cores_mean": {r: round(float(np.mean([s["cpu_cores"][r] for s in after])), 2)
                           for r in first["cpu_cores"]},
    }


def show(report: dict[str, Any]) -> None:
    s = report.get("summary", {})
    table = Table(title=f"soak, {report['offered']['minutes']} min: {report['offered']['pods_per_s']} pods/s + "
                        f"{report['offered']['samples_per_s']:,} samples/s")
    for col in ("process", "PSS 1st min after warm-up (median) MiB", "PSS last min (median) MiB", "peak MiB",
                "growth", "single samples", "goal <= 10 %"):
        table.add_column(col)
    for role, r in (s.get("rss") or {}).items():
        table.add_row(role, f"{r['median_first_window_mib']:.0f}", f"{r['median_last_window_mib']:.0f}",
                      f"{r['peak_mib']:.0f}", f"{100 * r['growth']:+.1f} %" if r["growth"] is not None else "-",
                      f"{100 * r['growth_single_samples']:+.1f} %" if r["growth_single_samples"] is not None else "-",
                      "yes" if r["goal_met"] else "NO")
    console = Console()
    console.print(table)
    console.print({k: v for k, v in s.items() if k != "rss"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the soak")
    ap.add_argument("--pods-per-s", type=float, default=500.0, help="pending pods offered per second")
    ap.add_argument("--samples-per-s", type=int, default=100_000, help="telemetry samples per second (25 per GPU row)")
    ap.add_argument("--warmup-s", type=float, default=WARMUP_S,
                    help="seconds before memory growth is counted: bounded state fills first (the loop streams' "
                         "2-minute duplicate window in nats-server, PostgreSQL's shared buffers), plus a minute")
    ap.add_argument("--sample-every-s", type=float, default=5.0, help="sampling period")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    if not (0 < args.minutes <= 240 and 0 < args.pods_per_s <= 10_000 and 0 < args.samples_per_s <= 10_000_000
            and 0 <= args.warmup_s < args.minutes * 60 and 0.5 <= args.sample_every_s <= 60):
        ap.error("out of range: 0 < minutes <= 240, pods/s <= 10,000, samples/s <= 10,000,000, warm-up shorter "
                 "than the soak, 0.5 <= sample period <= 60")
    report = asyncio.run(run(args))
    out = Path(args.out).resolve()
    report["parameters"] = {**vars(args), "out": str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else out.name}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    show(report)
    print(f"wrote {report['parameters']['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
