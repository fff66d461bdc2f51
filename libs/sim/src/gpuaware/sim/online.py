"""Beyond the paper's setting: pods depart, and pods that do not fit wait in a pending queue.

Arrivals follow the trace's creation times and each started pod runs for its recorded duration
(deletion - creation). openb spreads its pods over a month at well under 1 % of the cluster,
so the workload is inflated as in the paper's method (pods drawn from the trace, with their times,
until `inflation` x GPU capacity is asked) and arrival times are divided by `time_scale` (durations
kept), so that demand peaks above capacity. The mean allocation is taken over the arrival window
(the long-lived pods' tail afterwards is not averaged in).

The pending queue is ordered by QoS class (Guaranteed, LS, Burstable, BE) then arrival. When a pod
departs only its node gained capacity, so only queued pods that now fit *that node* are retried, in
queue order (kube-scheduler's "move pods on node change" without the unconditional re-scan).
Reported: queueing delay (start - arrival, compressed seconds) p50/p99 per QoS class, pods that
never started, and GPU allocation over time (time-weighted mean and a series for plotting).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuaware.placement import MILLI, Cluster, Framework, NodeSpec, Placed, Session, TypicalPods, policy
from gpuaware.schemas import percentile
from gpuaware.sim.traces import TracePod

QOS_RANK = {"Guaranteed": 0, "LS": 1, "Burstable": 2, "BE": 3}


def inflate_trace(pods: Sequence[TracePod], capacity_gpu_milli: int, inflation: float, seed: int) -> list[TracePod]:
    """The trace plus pods drawn from it (with their times) until `inflation` x capacity is asked."""
    rng = np.random.default_rng(seed)
    out = list(pods)
    total = sum(p.request.total_gpu_milli for p in pods)
    target = inflation * capacity_gpu_milli
    i = 0
    while any(p.request.gpu_milli for p in pods):
        pick = pods[int(rng.integers(len(pods)))]
        if total + pick.request.total_gpu_milli > target:
            break
        out.append(dataclasses.replace(pick, request=dataclasses.replace(pick.request, name=f"{pick.request.name}-copy-{i}")))
        total += pick.request.total_gpu_milli
        i += 1
    return out


def peak_demand(pods: Sequence[TracePod], capacity_gpu_milli: int, time_scale: float) -> float:
    """Peak concurrent GPU demand (fraction of capacity) if every pod started on arrival."""
    c = np.array([p.creation_time for p in pods], dtype=np.float64)
    d = np.array([p.deletion_time for p in pods], dtype=np.float64)
    g = np.array([p.request.total_gpu_milli for p in pods], dtype=np.float64)
    a = (c - c.min()) / time_scale
    ev = np.concatenate([np.stack([a, g], 1), np.stack([a + np.maximum(d - c, 0), -g], 1)])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]
    return float(np.cumsum(ev[:, 1]).max() / capacity_gpu_milli)


@dataclass(slots=True)
class OnlineResult:
    policy: str
    load: float  # peak concurrent GPU demand / capacity, had every pod started on arrival
    time_scale: float
    pods: int
    started: int
    never_started: int
    mean_alloc_pct: float
    delays_s: dict[str, np.ndarray]
    series_t: np.ndarray
    series_alloc_pct: np.ndarray
    series_pending: np.ndarray
    decision_ms: np.ndarray
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    def delay_stats(self) -> dict[str, dict[str, float]]:
        out = {}
        for qos, d in sorted(self.delays_s.items(), key=lambda kv: QOS_RANK.get(kv[0], 9)):
            out[qos or "-"] = {
                "started": int(d.size),
                "p50_s": round(percentile(d, 50), 1) if d.size else float("nan"),
                "p99_s": round(percentile(d, 99), 1) if d.size else float("nan"),
                "waited_pct": round(float((d > 0).mean() * 100), 2) if d.size else float("nan"),
            }
        return out

    def summary(self) -> dict:
        return {"peak_demand": round(self.load, 3), "time_scale": round(self.time_scale, 2), "pods": self.pods,
                "started": self.started, "never_started": self.never_started,
                "mean_alloc_pct": round(self.mean_alloc_pct, 3),
                "peak_alloc_pct": round(float(self.series_alloc_pct.max(initial=0.0)), 3),
                "max_pending": int(self.series_pending.max(initial=0)), "queueing_delay_by_qos": self.delay_stats(),
                "p99_decision_ms": round(percentile(self.decision_ms, 99), 4)}


def run_online(
    nodes: Sequence[NodeSpec],
    trace: Sequence[TracePod],
    policy_name: str,
    time_scale: float = 30_000.0,
    inflation: float = 1.3,
    seed: int = 42,
    typical: TypicalPods | None = None,
) -> OnlineResult:
    """Replay `trace` with departures: arrivals at creation_time / time_scale, recorded durations."""
    started_at = time.perf_counter()
    base = [p for p in trace if p.creation_time is not None and p.deletion_time is not None]
    if not base:
        raise ValueError("the trace has no creation/deletion times")
    typical = TypicalPods.from_requests([p.request for p in base]) if typical is None else typical
    cluster = Cluster(nodes)
    pods = inflate_trace(base, cluster.total_gpu_milli, inflation, seed)
    requests = [p.request for p in pods]
    scale = float(time_scale)
    t0 = min(p.creation_time for p in pods)  # type: ignore[type-var]  # trace pods carry both times
    rng = np.random.default_rng(seed)
    profile = Framework.of(policy(policy_name, typical=typical, seed=seed, tie_rank=rng.permutation(cluster.num_nodes)))

    events: list[tuple[float, int, int]] = []  # (time, kind 0 = departure / 1 = arrival, pod index)
    for i, p in enumerate(pods):
        events.append(((p.creation_time - t0) / scale, 1, i))  # type: ignore[operator]  # trace pods carry both times
    heapq.heapify(events)
    duration = [p.deletion_time - p.creation_time for p in pods]  # type: ignore[operator]  # trace pods carry both times
    arrival = [0.0] * len(pods)
    start: list[float | None] = [None] * len(pods)
    pending: list[tuple[int, float, int]] = []  # sorted (qos rank, arrival, index)
    series_t, series_alloc, series_pending, decisions = [], [], [], []
    area, last_t = 0.0, 0.0

    def attempt(i: int, now: float) -> bool:
        t = time.perf_counter_ns()
        (result,) = Session(cluster, profile, actions=("allocate",)).run([requests[i]])
        decisions.append((time.perf_counter_ns() - t) / 1e6)
        if not isinstance(result, Placed):
            return False
        start[i] = now
        heapq.heappush(events, (now + duration[i], 0, i))
        return True

    def fits_node(i: int, n: int) -> bool:
        r = requests[i]
        if cluster.cpu_free[n] < r.cpu_milli or cluster.mem_free[n] < r.memory_mib:
            return False
        if r.num_gpu == 0:
            return True
        free = cluster.gpu_free[n]
        if r.is_gpu_share:
            return bool((free >= r.gpu_milli).any())
        return int((free >= MILLI).sum()) >= r.num_gpu

    window = max(e[0] for e in events)
    while events:
        now, kind, i = heapq.heappop(events)
        if last_t < window:
            area += cluster.used_gpu_milli * (min(now, window) - last_t)
        last_t = now
        if kind == 1:
            arrival[i] = now
            if not attempt(i, now):
                bisect.insort(pending, (QOS_RANK.get(requests[i].qos, 9), now, i))
        else:
            node = cluster.unreserve(requests[i].name)
            if node is not None and pending:
                for entry in list(pending):
                    j = entry[2]
                    if fits_node(j, node.node) and attempt(j, now):
                        pending.remove(entry)
        series_t.append(now)
        series_alloc.append(100.0 * cluster.used_gpu_milli / cluster.total_gpu_milli)
        series_pending.append(len(pending))

    delays: dict[str, list[float]] = {}
    for i, s in enumerate(start):
        if s is not None:
            delays.setdefault(requests[i].qos, []).append(s - arrival[i])
    span = max(window, 1e-9)
    return OnlineResult(
        policy=profile.name,
        load=peak_demand(pods, cluster.total_gpu_milli, scale),
        time_scale=scale,
        pods=len(pods),
        started=sum(s is not None for s in start),
        never_started=sum(s is None for s in start),
        mean_alloc_pct=100.0 * area / (cluster.total_gpu_milli * span),
        delays_s={q: np.array(v) for q, v in delays.items()},
        series_t=np.array(series_t),
        series_alloc_pct=np.array(series_alloc),
        series_pending=np.array(series_pending),
        decision_ms=np.array(decisions),
        wall_s=time.perf_counter() - started_at,
    )


def plot_online(path, results: Sequence[OnlineResult], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 6), dpi=110, sharex=True)
    for r in results:
        hours = r.series_t / 3600
        ax.plot(hours, r.series_alloc_pct, lw=0.8, label=f"{r.policy} (mean {r.mean_alloc_pct:.1f}%)")
        bx.plot(hours, r.series_pending, lw=0.8, label=r.policy)
    ax.set_ylabel("GPU allocation (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    bx.set_ylabel("pending pods")
    bx.set_xlabel("time (compressed hours)")
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
