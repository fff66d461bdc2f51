"""Scheduling-loop benchmark: pending pod -> placement decision over NATS on the 1,213-node openb cluster.

What runs: a private nats-server, the real placement service as its own process
(`python -m gpuaware.services.placement`, default policy, its score cache, batched pulls and
pipelined publishes), and this process as the world: it announces every node's inventory, then
publishes pending pods (the openb default trace's requests, cycled) *open loop* at a fixed rate, and
acts as a minimal binder: every decision is answered with `binder.pod.bound.v1`, and the oldest pods
finish (`binder.pod.finished.v1`) whenever the cluster is more than `--fill` allocated, so the service
works against a busy, churning cluster (its followers apply every bound/finished event too).

Measured per offered rate, over a window after a warm-up:
  achieved   decisions per second published by placement
  latency    pending published (JetStream publish sent) -> decision received by a core subscriber on
             `placement.pod.decided.v1`, i.e. decision publication plus one delivery hop; p50/p90/p99/max
             over pods decided on their first try. Pods that waited for capacity (parked, decided when
             another pod finished) are counted separately: their wait is the cluster's, not the loop's.
  cpu        CPU seconds per wall second of the service, nats-server and this process (on a shared
             2-core machine the three compete; the figures say how much each took), and the service's
             CPU milliseconds per decision (what one dedicated core would sustain: 1000 / that).

CPU against an earlier commit (`--baseline REV`, by default bc1ec29, the commit before the throughput
work): that commit's tree is taken with `git archive`, and its own bench/loop.py and this one run
alternately at `--baseline-rate` (1,000/s), one rate and one repeat each, `--baseline-repeat` times,
each against its own code (PYTHONPATH). So both figures come from one sitting on one machine. The
medians, their ratio and every run are in `cpu_vs_baseline`. `--baseline ''` skips it.

Run: `make bench-loop` or `.venv/bin/python bench/loop.py --help`. Writes bench/results/loop.json
(machine noted). The openb traces are research-use-only and stay outside the repository: they are
found through GPUAWARE_SHARED_DATA (default ../shared/data); without them a synthetic cluster of the
same size (1,213 nodes) and a synthetic openb-like pod mix are used, and the report says so.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average
from machine_info import machine as shared_machine
from profile_summary import summarise

from gpuaware import bus
from gpuaware.devstack import start_nats
from gpuaware.placement import DEFAULT_PROFILE, GPU_CATALOG, MILLI, NodeSpec, PodRequest
from gpuaware.schemas import (
    NODE_INVENTORY,
    PLACEMENT_DECIDED,
    POD_BOUND,
    POD_FINISHED,
    POD_PENDING,
    POD_UNSCHEDULABLE,
    STREAMS,
    GpuInfo,
    GpuSlice,
    NodeInventory,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    percentile,
)
from gpuaware.sim import shared_data_dir

RESULTS = RESULTS_DIR / "loop.json"
PROFILE = RESULTS_DIR / "loop_profile.txt"
CLUSTER = "bench"
BAR = {"pods_per_s": 500, "p99_ms": 20.0, "goal_pods_per_s": 1000}
GOALS = {500: 10.0, 1000: 20.0, 2000: 50.0}
"""the throughput issue's goals: offered pods/s -> median p99 (ms) over the repeats, sustained every time"""

INVENTORY = bus.Channel(NODE_INVENTORY, NodeInventory)
PENDING = bus.Channel(POD_PENDING, PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")
ENCODER = msgspec.json.Encoder()


class _Slice(msgspec.Struct):
    gpu_uuid: str
    gpu_index: int
    gpu_milli: int
    memory_mib: int


class _Decision(msgspec.Struct):
    """The fields of placement.pod.decided.v1 the bench needs (msgspec skips the rest)."""

    pod_uid: str
    pod_name: str
    decision_id: str
    node: str
    slices: list[_Slice]
    decided_at: float = 0.0
    cpu_milli: int = 0


class _Verdict(msgspec.Struct):
    pod_uid: str
    reason: str


DECISION = msgspec.json.Decoder(_Decision)
VERDICT = msgspec.json.Decoder(_Verdict)


def machine() -> dict[str, Any]:
    return {**shared_machine(), "loadavg_before": load_average()}


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- the cluster and the workload ------------------------------------------------------------------


def load_cluster(data: Path) -> tuple[list[NodeSpec], list[PodRequest], Path | None, str]:
    openb = data / "openb"
    nodes_csv, pods_csv = openb / "openb_node_list_gpu_node.csv", openb / "openb_pod_list_default.csv"
    if nodes_csv.is_file() and pods_csv.is_file():
        from gpuaware.sim import load_nodes, load_pods

        return (load_nodes(nodes_csv), [p.request for p in load_pods(pods_csv)], pods_csv,
                "openb_node_list_gpu_node + openb_pod_list_default")
    print(f"shared data not found at {openb}: set GPUAWARE_SHARED_DATA to the shared/data folder for the openb "
          "cluster; using a synthetic openb-like cluster of the same size (1,213 nodes) instead", file=sys.stderr)
    from gpuaware.sim import synthetic_nodes, synthetic_pods

    return synthetic_nodes(1213, seed=1), synthetic_pods(20_000, seed=2), None, "synthetic (1,213 nodes)"


def inventories(nodes: list[NodeSpec]) -> list[NodeInventory]:
    out = []
    for n in nodes:
        mem = GPU_CATALOG[n.gpu_model].memory_mib if n.gpu_model in GPU_CATALOG else None
        gpus = tuple(GpuInfo(uuid=f"GPU-{n.name}-{i}", index=i, model=n.gpu_model, memory_mib=mem or 0,
                             pci_bus_id=f"00000000:{i:02x}:00.0") for i in range(n.num_gpu))
        out.append(NodeInventory(source="bench", emitted_at=time.time(), cluster=CLUSTER, node=n.name,
                                 cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, gpus=gpus))
    return out


async def publish_world(js: Any, nodes: list[NodeSpec]) -> None:
    """The streams, then every node's inventory: the world the placement service reads at start."""
    for spec in STREAMS:
        await bus.ensure_stream(js, spec)
    for inv in inventories(nodes):
        await bus.publish(js, INVENTORY.at(CLUSTER, inv.node), inv)


def pending_payloads(pods: list[PodRequest], count: int, start: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """`count` pending pods (uid, encoded PodPending, headers), cycling the trace's requests."""
    now = time.time()
    out = []
    for i in range(start, start + count):
        r = pods[i % len(pods)]
        uid = f"pod-{i:07d}"
        p = PodPending(source="bench", emitted_at=now, cluster=CLUSTER, pod_uid=uid, pod_name=uid, namespace="bench",
                       submitted_at=now, cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, num_gpu=r.num_gpu,
                       gpu_milli=r.gpu_milli if r.num_gpu == 1 else MILLI, gpu_types=r.gpu_types)
        out.append((uid, ENCODER.encode(p), {bus.MSG_ID: f"{uid}/0"}))
    return out


# -- the world: publisher, minimal binder -----------------------------------------------------------


class World:
    def __init__(self, nc: Any, total_gpu_milli: int, total_cpu_milli: int, fill: float) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.total = total_gpu_milli
        self.total_cpu = total_cpu_milli
        self.cpu = 0
        self.fill = fill
        self.sent: dict[str, float] = {}
        self.sent_wall: dict[str, float] = {}
        self.decided: dict[str, float] = {}
        self.decided_wall: dict[str, float] = {}
        self.parked: set[str] = set()
        self.verdicts: collections.Counter[str] = collections.Counter()
        self.running: collections.deque[tuple[_Decision, int]] = collections.deque()
        self.max_cpu_pct = 0.0
        self.used = 0
        self.finished = 0

    async def start(self) -> None:
        await self.nc.subscribe(PLACEMENT_DECIDED, cb=self._on_decided)
        await self.nc.subscribe(POD_UNSCHEDULABLE, cb=self._on_verdict)
        await self.nc.flush()

    async def _on_verdict(self, msg: Any) -> None:
        v = VERDICT.decode(msg.data)
        if v.pod_uid not in self.decided:
            self.parked.add(v.pod_uid)
        self.verdicts[v.reason] += 1

    async def _on_decided(self, msg: Any) -> None:
        now = time.monotonic()
        d = DECISION.decode(msg.data)
        if d.pod_uid in self.decided:
            return
        self.decided[d.pod_uid] = now
        self.decided_wall[d.pod_uid] = d.decided_at
        milli = sum(s.gpu_milli for s in d.slices)
        self.running.append((d, milli))
        self.used += milli
        self.cpu += d.cpu_milli
        t = time.time()
        slices = tuple(GpuSlice(gpu_uuid=s.gpu_uuid, gpu_index=s.gpu_index, gpu_milli=s.gpu_milli,
                                memory_mib=s.memory_mib) for s in d.slices)
        await self.nc.publish(POD_BOUND, ENCODER.encode(PodBound(
            source="bench", emitted_at=t, cluster=CLUSTER, pod_uid=d.pod_uid, pod_name=d.pod_name, namespace="bench",
            node=d.node, slices=slices, bound_at=t, decision_id=d.decision_id)))
        self.max_cpu_pct = max(self.max_cpu_pct, 100 * self.cpu / self.total_cpu)
        # keep the cluster busy but not full: GPU *and* CPU (openb's CPU is nearly as scarce as its GPUs)
        while (self.used > self.fill * self.total or self.cpu > self.fill * self.total_cpu) and self.running:
            old, m = self.running.popleft()
            self.used -= m
            self.cpu -= old.cpu_milli
            self.finished += 1
            await self.nc.publish(POD_FINISHED, ENCODER.encode(PodFinished(
                source="bench", emitted_at=t, cluster=CLUSTER, pod_uid=old.pod_uid, pod_name=old.pod_name,
                namespace="bench", outcome=PodOutcome.SUCCEEDED, finished_at=t, node=old.node)))

    async def offer(self, payloads: list[tuple[str, bytes, dict[str, str]]], rate: float) -> float:
        """Publish pending pods at `rate` per second (ticks of 5 ms); returns the wall time taken."""
        tick = 0.005
        per_tick = rate * tick
        start = time.monotonic()
        acks: list[asyncio.Future] = []
        sent = 0.0
        i = 0
        while i < len(payloads):
            target = (time.monotonic() - start) / tick * per_tick + per_tick
            while i < len(payloads) and sent < target:
                uid, data, hdrs = payloads[i]
                self.sent[uid] = time.monotonic()
                self.sent_wall[uid] = time.time()
                acks.append(await self.js.publish_async(POD_PENDING, data, headers=hdrs))
                sent += 1
                i += 1
            if len(acks) > 2000:
                await asyncio.gather(*acks)
                acks.clear()
            await asyncio.sleep(max(0.0, start + (sent / rate) - time.monotonic()))
        await asyncio.gather(*acks)
        return time.monotonic() - start


async def wait_until(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def pct(values: list[float], q: float) -> float:
    return round(percentile(values, q), 3)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    nodes, pods, pods_csv, source = load_cluster(shared_data_dir(ROOT))
    gpus = sum(n.num_gpu for n in nodes)
    report: dict[str, Any] = {"machine": machine(), "cluster": {"source": source, "nodes": len(nodes), "gpus": gpus},
                              "bar": BAR,
                              "note": "placement, nats-server and this process share the machine's cores with "
                                      "whatever else runs there (loadavg_before/after); latency tails move with "
                                      "that load, placement_cpu_ms_per_decision much less"}
    tmp = Path(tempfile.mkdtemp(prefix="gpuaware-bench-loop-"))
    nats = start_nats(tmp / "nats")
    service: subprocess.Popen | None = None
    try:
        async with bus.connected(nats.url, name="bench-world") as nc:
            js = nc.jetstream()
            await publish_world(js, nodes)
            env = {**os.environ, "NATS_URL": nats.url, "GPUAWARE_PLACEMENT_CLUSTER": CLUSTER,
                   "GPUAWARE_PLACEMENT_INSTANCE_ID": "bench", "GPUAWARE_PLACEMENT_WORLD_SNAPSHOT": "false",
                   "GPUAWARE_PLACEMENT_LOG_LEVEL": "WARNING", "GPUAWARE_PLACEMENT_LOG_FORMAT": "console",
                   "GPUAWARE_PLACEMENT_PENDING_BATCH": str(args.batch)}
            if args.policy:
                env["GPUAWARE_PLACEMENT_POLICY"] = args.policy
            if pods_csv is not None:
                env["GPUAWARE_PLACEMENT_TYPICAL_PODS_FILE"] = str(pods_csv)
            log = open(tmp / "placement.log", "w")  # noqa: SIM115 - the child's stderr
            profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
            service = subprocess.Popen([sys.executable, *profile, "-m", "gpuaware.services.placement"], env=env,
                                       stdout=log, stderr=subprocess.STDOUT)
            world = World(nc, gpus * MILLI, sum(n.cpu_milli for n in nodes), args.fill)
            await world.start()
            probe = pending_payloads(pods, 1, 9_999_000)
            await world.offer(probe, 100.0)
            if not await wait_until(lambda: probe[0][0] in world.decided, 60.0):
                raise RuntimeError(f"placement never decided the probe pod; see {tmp / 'placement.log'}")
            report["startup_s_to_first_decision"] = round(world.decided[probe[0][0]] - world.sent[probe[0][0]], 2)
            report["policy"] = args.policy or DEFAULT_PROFILE
            report["workload"] = "the trace's pod requests cycled, unique uids; bound at once, oldest finished above " \
                                 f"{args.fill:.0%} GPU or CPU allocation"
            runs = []
            next_pod = 0
            for rep_i, rate in [(r, x) for r in range(args.repeat) for x in args.rates]:
                warm = pending_payloads(pods, int(rate * args.warmup), next_pod)
                next_pod += len(warm)
                timed = pending_payloads(pods, int(rate * args.duration), next_pod)
                next_pod += len(timed)
                await world.offer(warm, rate)
                cpu0 = (cpu_seconds(service.pid), cpu_seconds(nats.pid), own_cpu(), time.monotonic())
                d0 = len(world.decided)
                wall = await world.offer(timed, rate)
                cpu1 = (cpu_seconds(service.pid), cpu_seconds(nats.pid), own_cpu(), time.monotonic())
                d1 = len(world.decided)
                uids = [u for u, _, _ in timed]
                drained = await wait_until(lambda u=uids: all(x in world.decided or x in world.parked for x in u),
                                           args.drain)
                first = [1e3 * (world.decided[u] - world.sent[u]) for u in uids
                         if u in world.decided and u not in world.parked]
                at_decision = [1e3 * (world.decided_wall[u] - world.sent_wall[u]) for u in uids
                               if u in world.decided and u not in world.parked]
                waited = [u for u in uids if u in world.parked]
                span = cpu1[3] - cpu0[3]
                row = {
                    "offered_per_s": rate, "repeat": rep_i, "offered_pods": len(uids), "publish_wall_s": round(wall, 2),
                    "achieved_per_s": round((d1 - d0) / span, 1),
                    "decided_first_try": len(first), "waited_for_capacity": len(waited),
                    "undecided_after_drain": sum(1 for u in uids if u not in world.decided and u not in world.parked),
                    "drained": drained,
                    "latency_ms": {"p50": pct(first, 50), "p90": pct(first, 90), "p99": pct(first, 99),
                                   "max": round(max(first), 3) if first else None},
                    "to_decided_at_ms": {"p50": pct(at_decision, 50), "p99": pct(at_decision, 99)},
                    "cpu_s_per_s": {"placement": round((cpu1[0] - cpu0[0]) / span, 2),
                                    "nats_server": round((cpu1[1] - cpu0[1]) / span, 2),
                                    "bench_world": round((cpu1[2] - cpu0[2]) / span, 2)},
                    "placement_cpu_ms_per_decision": round(1e3 * (cpu1[0] - cpu0[0]) / max(1, d1 - d0), 3),
                    "gpu_allocated_pct": round(100 * world.used / (gpus * MILLI), 1),
                    "cpu_allocated_pct": round(100 * world.cpu / world.total_cpu, 1),
                }
                row["keeps_up"] = bool(row["achieved_per_s"] >= 0.98 * rate and drained and first)
                row["p99_within_bar"] = bool(first and row["latency_ms"]["p99"] <= BAR["p99_ms"])
                runs.append(row)
                lat = row["latency_ms"]
                print(f"offered {rate:>6.0f}/s  achieved {row['achieved_per_s']:>7.1f}/s  p50 {lat['p50']:>7.2f} ms  "
                      f"p99 {lat['p99']:>8.2f} ms  max {lat['max']:>8.2f} ms  "
                      f"(decided_at p50 {row['to_decided_at_ms']['p50']:.2f} p99 {row['to_decided_at_ms']['p99']:.2f})  "
                      f"waited {len(waited):>4}  cpu/decision {row['placement_cpu_ms_per_decision']:.2f} ms  "
                      f"cpu placement {row['cpu_s_per_s']['placement']:.2f} nats {row['cpu_s_per_s']['nats_server']:.2f}"
                      f" bench {row['cpu_s_per_s']['bench_world']:.2f}", flush=True)
                # settle before the next rate: nothing queued from this one
                await asyncio.sleep(0.5)
            report["runs"] = runs
            report["verdicts"] = dict(world.verdicts)
            report["pods_finished_by_world"] = world.finished
            report["decisions"] = len(world.decided)
            report["by_rate"] = by_rate(runs)
            # a rate counts when it kept up in every repeat and its median p99 is within the bar
            kept = [r["offered_per_s"] for r in report["by_rate"] if r["keeps_up_every_time"]]
            good = [r["offered_per_s"] for r in report["by_rate"]
                    if r["keeps_up_every_time"] and r["p99_ms"]["median"] <= BAR["p99_ms"]]
            report["max_sustained_per_s"] = max(kept, default=None)
            report["max_sustained_per_s_with_p99_within_bar"] = max(good, default=None)
            report["meets_bar"] = bool(good and max(good) >= BAR["pods_per_s"])
            report["goals"] = goals(report["by_rate"])
    finally:
        if service is not None and service.poll() is None:
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(timeout=15)
            except subprocess.TimeoutExpired:
                service.kill()
        nats.stop()
    try:
        load = os.getloadavg()
        report["machine"]["loadavg_after"] = [round(x, 2) for x in load]
    except OSError:
        pass
    return report


def goals(rates: list[dict[str, Any]]) -> dict[str, Any]:
    """Each goal rate: its median p99 next to the goal, and whether it kept up in every repeat."""
    out: dict[str, Any] = {}
    for rate, goal in GOALS.items():
        r = next((x for x in rates if x["offered_per_s"] == rate), None)
        if r is None:
            out[f"{rate}/s"] = {"goal_p99_ms": goal, "measured": False}
            continue
        median = r["p99_ms"]["median"]
        out[f"{rate}/s"] = {"goal_p99_ms": goal, "median_p99_ms": median, "kept_up_every_time": r["keeps_up_every_time"],
                            "met": bool(r["keeps_up_every_time"] and median is not None and median <= goal)}
    return out


def by_rate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per offered rate over the repeats: p99 min / median / max and whether every repeat kept up
    (one run's tail moves with whatever else the machine does; the median is the figure we judge)."""
    out = []
    for rate in sorted({r["offered_per_s"] for r in runs}):
        rs = [r for r in runs if r["offered_per_s"] == rate]
        p99 = sorted(r["latency_ms"]["p99"] for r in rs if r["latency_ms"]["p99"] is not None)
        p50 = sorted(r["latency_ms"]["p50"] for r in rs if r["latency_ms"]["p50"] is not None)
        out.append({"offered_per_s": rate, "repeats": len(rs),
                    "keeps_up_every_time": all(r["keeps_up"] for r in rs),
                    "p50_ms_median": float(np.median(p50)) if p50 else None,
                    "p99_ms": {"min": p99[0] if p99 else None, "median": float(np.median(p99)) if p99 else None,
                               "max": p99[-1] if p99 else None},
                    "placement_cpu_ms_per_decision_median": float(np.median(
                        [r["placement_cpu_ms_per_decision"] for r in rs]))})
    return out


BASELINE = "bc1ec29"
"""the commit before the throughput work: its placement CPU per decision is the one to halve"""


def source_path(tree: Path) -> str:
    """PYTHONPATH for a checkout's packages (every libs/*/src, services/*/src and schemas/src)."""
    dirs = [*sorted(tree.glob("libs/*/src")), *sorted(tree.glob("services/*/src")), tree / "schemas" / "src"]
    return os.pathsep.join(str(d) for d in dirs if d.is_dir())


def loop_cpu(tree: Path, rate: float, out: Path, extra: list[str]) -> float | None:
    """`tree`'s own bench/loop.py at one rate, one repeat, against `tree`'s code: placement CPU ms per
    decision (None when that run failed)."""
    env = {**os.environ, "PYTHONPATH": source_path(tree)}
    where = subprocess.run([sys.executable, "-c", "import gpuaware.services.placement.handlers as m; print(m.__file__)"],
                           env=env, capture_output=True, text=True, check=False).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):  # the installed copy would measure this tree twice
        raise RuntimeError(f"{tree}: the placement service would be imported from {where!r}, not from that tree")
    cmd = [sys.executable, str(tree / "bench" / "loop.py"), "--rates", f"{rate:g}", "--repeat", "1",
           "--out", str(out), *extra]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.is_file():
        print(f"  {tree.name}: failed (exit {done.returncode}): {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    runs = json.loads(out.read_text()).get("runs", [])
    return runs[0]["placement_cpu_ms_per_decision"] if runs else None


def cpu_vs_baseline(rev: str, rate: float, repeats: int) -> dict[str, Any]:
    """Placement CPU per decision here and at commit `rev`, alternately, in this sitting."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuaware-bench-baseline-"))
    base = tmp / rev
    base.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode != 0:
        return {"baseline": rev, "skipped": f"git archive {rev} failed: {archive.stderr.decode()[-200:].strip()}"}
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(repeats):
        for name, tree, extra, into in ((rev, base, [], theirs), ("this tree", ROOT, ["--baseline", ""], ours)):
            got = loop_cpu(tree, rate, tmp / f"{i}-{tree.name}.json", extra)
            print(f"  CPU at {rate:g}/s, {name}, round {i + 1}: "
                  + ("failed" if got is None else f"{got:.3f} ms per decision"), flush=True)
            if got is not None:
                into.append(got)
    report: dict[str, Any] = {"baseline": rev, "rate_per_s": rate, "rounds": repeats,
                              "how": "each tree's own bench/loop.py, one rate and one repeat, alternately",
                              "baseline_ms_per_decision": theirs, "ours_ms_per_decision": ours}
    if ours and theirs:
        b, o = float(np.median(theirs)), float(np.median(ours))
        report |= {"baseline_median_ms": b, "ours_median_ms": o, "ratio": round(o / b, 3), "halved": o <= b / 2}
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="250,500,1000,1500,2000", help="offered pods/s, comma-separated")
    ap.add_argument("--duration", type=float, default=10.0, help="timed seconds per rate")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds at each rate before timing")
    ap.add_argument("--drain", type=float, default=20.0, help="seconds to wait for the last decisions")
    ap.add_argument("--fill", type=float, default=0.7, help="GPU allocation the world keeps the cluster at")
    ap.add_argument("--batch", type=int, default=128, help="placement's pending pull batch")
    ap.add_argument("--policy", default="", help="placement policy (default: the service's)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--profile", default="", help="run placement under cProfile, writing this file, and its "
                    "summary to bench/results/loop_profile.txt (a profiled run is slower: not for the figures)")
    ap.add_argument("--repeat", type=int, default=3, help="run the whole rate series this many times")
    ap.add_argument("--baseline", default=BASELINE, help="commit whose placement CPU per decision to measure "
                    "alongside, in this sitting ('' skips it)")
    ap.add_argument("--baseline-rate", type=float, default=1000.0, help="offered pods/s for that comparison")
    ap.add_argument("--baseline-repeat", type=int, default=3, help="alternating rounds of that comparison")
    args = ap.parse_args()
    args.rates = [float(x) for x in args.rates.split(",") if x]
    report = asyncio.run(run(args))
    for r in report.get("by_rate", []):
        print(f"offered {r['offered_per_s']:>6.0f}/s over {r['repeats']} runs: p99 min {r['p99_ms']['min']:.2f} "
              f"median {r['p99_ms']['median']:.2f} max {r['p99_ms']['max']:.2f} ms; kept up every time: "
              f"{r['keeps_up_every_time']}")
    print(f"meets the bar ({BAR['pods_per_s']}/s, median p99 <= {BAR['p99_ms']} ms): {report.get('meets_bar')}")
    for rate, g in report.get("goals", {}).items():
        print(f"goal {rate}: median p99 <= {g['goal_p99_ms']:g} ms, kept up every time: "
              + ("not offered" if not g.get("measured", True) else
                 f"{g['median_p99_ms']:.2f} ms, {g['kept_up_every_time']} -> {'met' if g['met'] else 'NOT met'}"))
    if args.baseline:
        print(f"placement CPU per decision against {args.baseline}, alternately:", flush=True)
        cmp = report["cpu_vs_baseline"] = cpu_vs_baseline(args.baseline, args.baseline_rate, args.baseline_repeat)
        if "ratio" in cmp:
            print(f"CPU per decision at {cmp['rate_per_s']:g}/s: median {cmp['ours_median_ms']:.3f} ms here, "
                  f"{cmp['baseline_median_ms']:.3f} ms at {cmp['baseline']}: ratio {cmp['ratio']:.2f} "
                  f"(halved: {cmp['halved']})")
        else:
            print(f"CPU comparison: {cmp.get('skipped', 'no complete run on one side')}")
    report["command"] = " ".join(["bench/loop.py", *sys.argv[1:]])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    if args.profile:  # written by the service when it stopped
        rates = "/".join(f"{r:g}" for r in args.rates)
        PROFILE.write_text(summarise(Path(args.profile), per="decision", count=report.get("decisions", 0),
                                     title=f"placement service at {rates} pods/s offered ({report.get('decisions', 0):,} "
                                           "decisions, start-up included), one process, cProfile"))
        print(f"wrote {PROFILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
