"""Trace-driven placement evaluation, reproducing the FGD paper's method (ATC'23, Fig. 7 and 9).

One run = one policy, one seed: an empty cluster; the seed's arrival sequence (see workload.py);
each pod gets one scheduling attempt, never retried, and never departs. Each arrival is one
scheduling session (gpuaware.placement.session, the allocate action only), the same code that
decides in the placement service. After every arrival we record
what the simulator logs: GPU milli allocated, GPU milli arrived so far (failed pods included), and the
cluster's fragmentation against the trace's typical pods (FGD's definition, for every policy).

The curves are then put on the paper's x-axis exactly as its analysis scripts do: arrived load in
whole percent of GPU capacity (rounded), the mean of the events at each percent (or of the events
within +-1 % when none fall on it), allocation rounded to 2 decimals per event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuaware.placement import (
    Cluster,
    Code,
    FragModel,
    FragState,
    Framework,
    NodeSpec,
    Placed,
    PodRequest,
    Session,
    TypicalPods,
    policy,
)
from gpuaware.sim.traces import load_nodes, load_pods
from gpuaware.sim.workload import build_workload

ARRIVED = np.arange(131)
"""The paper's x-axis: arrived GPU request as % of cluster GPU capacity, 0..130."""

REPORT_AT = (90, 95, 100, 110, 120, 130)
FRAG_AT = (80, 90)


@dataclass(slots=True)
class RunResult:
    policy: str
    seed: int
    alloc_pct: np.ndarray  # [131] mean allocation ratio at each arrived %, NaN where no event
    frag_ratio_pct: np.ndarray  # [131] fragmented share of idle GPU milli (%)
    decision_ms: np.ndarray  # [pods] time of each scheduling decision
    pods: int
    failed: int
    final_alloc_pct: float
    wall_s: float
    total_gpus: int
    assignments: list[tuple] | None = field(default=None)
    extra: dict[str, float] = field(default_factory=dict)
    """what a ``measure`` hook of ``run_one`` read off the final cluster"""

    @property
    def unallocated_gpus(self) -> np.ndarray:
        return (100.0 - self.alloc_pct) / 100.0 * self.total_gpus


def discretize(arrived_milli: np.ndarray, values: np.ndarray, total_gpus: int) -> np.ndarray:
    """Mean of `values` per whole arrived percent (0..130), +-1 % window where a percent has no event."""
    pct = np.round(arrived_milli / total_gpus / 10).astype(np.int64)
    top = max(int(pct.max(initial=0)), 131) + 2
    ok = ~np.isnan(values)
    sums = np.bincount(pct[ok], weights=values[ok], minlength=top)
    cnts = np.bincount(pct[ok], minlength=top).astype(np.float64)
    out = np.full(ARRIVED.size, np.nan)
    for x in ARRIVED:
        if cnts[x] > 0:
            out[x] = sums[x] / cnts[x]
        else:
            lo = max(x - 1, 0)
            c = cnts[lo : x + 2].sum()
            if c > 0:
                out[x] = sums[lo : x + 2].sum() / c
    return np.round(out, 2)


def run_one(
    nodes: Sequence[NodeSpec],
    requests: Sequence[PodRequest],
    policy_name: str,
    seed: int,
    inflation: float = 1.3,
    typical: TypicalPods | None = None,
    record_assignments: bool = False,
    max_pods: int | None = None,
    prepare: Callable[[Cluster], None] | None = None,
    measure: Callable[[Cluster], dict[str, float]] | None = None,
    tie_rank: np.ndarray | None = None,
) -> RunResult:
    """Evaluate one policy on one seed. `typical` defaults to the trace's own typical pods.

    `prepare` may change the empty cluster first (GPU health, telemetry signals: what-if scenarios);
    `measure` reads the final cluster into `RunResult.extra`. `tie_rank` replaces the seed's node
    tie-break order (the placement service's own order, to compare the two decision by decision)."""
    started = time.perf_counter()
    typical = TypicalPods.from_requests(requests) if typical is None else typical
    cluster = Cluster(nodes)
    if prepare is not None:
        prepare(cluster)
    total_gpus = int(cluster.gpu_count.sum())
    wl = build_workload(requests, cluster.num_nodes, cluster.total_gpu_milli, inflation, seed)
    pods = wl.pods if max_pods is None else wl.pods[:max_pods]
    sched = policy(policy_name, typical=typical, seed=seed, tie_rank=wl.tie_rank if tie_rank is None else tie_rank)
    profile = Framework.of(sched)
    metric = FragState.build(FragModel(typical, cluster.models), cluster.snapshot())
    p_sum = float(metric.model.p.sum())

    n = len(pods)
    arrived = np.empty(n, dtype=np.int64)
    used = np.empty(n, dtype=np.int64)
    frag = np.empty(n, dtype=np.float64)
    idle = np.empty(n, dtype=np.float64)
    decision_ns = np.empty(n, dtype=np.int64)
    assignments: list[tuple] | None = [] if record_assignments else None
    arrived_total = 0
    failed = 0
    row = np.zeros(1, dtype=np.int64)
    for i, pod in enumerate(pods):
        arrived_total += pod.total_gpu_milli
        t0 = time.perf_counter_ns()
        # each arrival is one scheduling cycle: one attempt, no preemption (the paper's setting)
        (result,) = Session(cluster, profile, actions=("allocate",)).run([pod])
        decision_ns[i] = time.perf_counter_ns() - t0
        if isinstance(result, Placed):
            d = result.decision
            row[0] = d.node
            metric.refresh(cluster.snapshot(), row)
            if assignments is not None:
                assignments.append((pod, d.node_name, d.gpus))
        else:
            if result.status.code == Code.ERROR:
                raise RuntimeError(f"{policy_name} seed {seed}: plugin {result.status.plugin} failed: "
                                   f"{result.status.reason}")
            failed += 1
            if assignments is not None:
                assignments.append((pod, "", ()))
        arrived[i] = arrived_total
        used[i] = cluster.used_gpu_milli
        frag[i] = metric.F.sum()
        idle[i] = (cluster.total_gpu_milli - cluster.used_gpu_milli) * p_sum

    alloc = np.round(used / total_gpus / 10, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.round(np.where(idle > 0, 100.0 * frag / idle, np.nan), 2)
    return RunResult(
        policy=sched.name,
        seed=seed,
        alloc_pct=discretize(arrived, alloc, total_gpus),
        frag_ratio_pct=discretize(arrived, ratio, total_gpus),
        decision_ms=decision_ns / 1e6,
        pods=n,
        failed=failed,
        final_alloc_pct=float(alloc[-1]) if n else 0.0,
        wall_s=time.perf_counter() - started,
        total_gpus=total_gpus,
        assignments=assignments,
        extra=measure(cluster) if measure is not None else {},
    )


# -- many runs, in parallel processes ---------------------------------------------------------------

_WORKER: dict[str, object] = {}


def _init_worker(nodes_path: str, trace_path: str) -> None:
    nodes = load_nodes(nodes_path)
    requests = [p.request for p in load_pods(trace_path)]
    _WORKER.update(nodes=nodes, requests=requests, typical=TypicalPods.from_requests(requests))


_WARMED: set[str] = set()
"""policies this process has already warmed up"""


def _warm_up(policy_name: str) -> None:
    """Decide a few of the trace's pods on a throwaway cluster, untimed, once per policy and process,
    so the first run's decision times do not include compiling the kernels."""
    if policy_name in _WARMED:
        return
    requests: Sequence[PodRequest] = _WORKER["requests"]  # type: ignore[assignment]  # _init_worker filled it
    cluster = Cluster(_WORKER["nodes"])  # type: ignore[arg-type]  # _init_worker filled _WORKER in this process
    profile = Framework.of(policy(policy_name, typical=_WORKER["typical"], seed=0))  # type: ignore[arg-type]  # as above
    for pod in requests[:16]:
        Session(cluster, profile, actions=("allocate",)).run([pod])
    _WARMED.add(policy_name)


def _run_task(policy_name: str, seed: int, inflation: float, record: bool, max_pods: int | None) -> RunResult:
    _warm_up(policy_name)
    return run_one(
        _WORKER["nodes"],  # type: ignore[arg-type]  # _init_worker filled _WORKER in this process
        _WORKER["requests"],  # type: ignore[arg-type]  # _init_worker filled _WORKER in this process
        policy_name,
        seed,
        inflation,
        typical=_WORKER["typical"],  # type: ignore[arg-type]  # _init_worker filled _WORKER in this process
        record_assignments=record,
        max_pods=max_pods,
    )


def default_jobs() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def evaluate(
    nodes_path: Path | str,
    trace_path: Path | str,
    policies: Sequence[str],
    seeds: Sequence[int],
    inflation: float = 1.3,
    jobs: int = 1,
    record_assignments: bool = False,
    max_pods: int | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every (policy, seed); results in (policy, seed) order. Loads and validates inputs first."""
    _init_worker(str(nodes_path), str(trace_path))  # fail fast, in this process, on bad input
    tasks = [(p, s) for p in policies for s in seeds]
    results: dict[tuple[str, int], RunResult] = {}
    if jobs <= 1 or len(tasks) == 1:
        for p, s in tasks:
            r = _run_task(p, s, inflation, record_assignments, max_pods)
            results[(p, s)] = r
            if on_result:
                on_result(r)
    else:
        with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(str(nodes_path), str(trace_path))) as ex:
            futures = {ex.submit(_run_task, p, s, inflation, record_assignments, max_pods): (p, s) for p, s in tasks}
            for fut in as_completed(futures):
                r = fut.result()
                results[futures[fut]] = r
                if on_result:
                    on_result(r)
    return [results[t] for t in tasks]
