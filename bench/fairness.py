"""Fairness benchmark: stock Kubernetes' queue (FIFO, priority) and gpuaware's fair share side by side,
every decision made by the placement service's planner and admitted by quota's ledger.

What it replays, on one 64-GPU cluster (the Pollux artifact's: 16 nodes of 4 T4 GPUs, g4dn.12xlarge:
48 vCPUs, 192 GiB), at 0.5 / 1.0 / 1.5 / 2.0x load:
  * **philly**: real jobs of ``pollux/traces/philly.csv`` (loaded with ``gpuaware.sim.load_philly``:
    GPUs, recorded duration, virtual cluster = tenant). The trace is a cluster of thousands of GPUs,
    so ``160 x load`` jobs are drawn (seeded) from one week (2017-10-02 .. 09) and their submissions
    mapped, in order, into 8 hours -- the Pollux artifact's own recipe for its 64-GPU workloads (160
    jobs / 8 h at 1.0x). Jobs wider than the cluster are dropped (counted). Drawn by count, that week
    is mostly short one-GPU jobs: at 0.5x and 1.0x the 64 GPUs rarely fill, and the makespan is set
    by the trace's multi-day jobs (up to 600 h), not by scheduling. The contended Philly cases are
    1.5x/2.0x.
  * **pollux**: the artifact's workloads (``workloads-0.5``, ``workloads``, ``-1.5``, ``-2.0``; 8 each):
    submit time, GPUs (``num_replicas``) and global batch as given; tenant = application. A job's
    duration is its work under the throughput model, as the artifact's simulator derives it for a job
    of fixed GPUs and batch (Tiresias+TunedJobs): the iterations its application needs to reach its
    target at its batch size (``traces/<app>/validation-<batch>.csv``) at its iteration time on its
    GPUs packed (``gpuaware.sim.throughput``, fitted on ``placements.csv`` / ``scalability.csv``).
A job is one pod, or, wider than a node, a gang of whole-node pods and one pod for the rest (placed
all or none, as the placement service places gangs). Under the ``elastic`` policy a Pollux job is an
elastic job instead (torchrun-style, a gang with ``gang_max_members``): its GPUs as one-GPU worker
pods, running with 1 .. all of them (the placement service's grows and shrinks); its global batch stays
fixed, so its pace on a placement is Pollux's measured throughput there (``gpuaware.sim.throughput``,
fitted on ``traces/<app>/``) over its throughput at its full width packed (its duration's pace), and
every resize stands it still for the twin's restart delay (``RESIZE_RESTART_DELAY_S``; changes at one
instant are one resize). The planner grows it by the gain its agent would report: the pace one more
worker adds over the work it has left, where the seconds saved exceed ``GROW_WORTH_RESTARTS`` restarts
(a grow at an instant the job starts or resizes anyway joins that restart: then any added pace counts).
Classes: Philly and Pollux carry no priorities; a seeded 20 % of jobs are the high class (production,
priority 1), the rest low (research, priority 0). Every job is checkpointable with a checkpoint every
15 minutes and pays 60 s to restart after a preemption. What a preemption loses depends on who
preempts: stock preemption (``priority``) loses the work since the last periodic checkpoint; gpuaware
(``quota*``, ``elastic``) has the binder ask the victim for a checkpoint first (the checkpoint
handshake), so it loses only the 30 s the save takes.

How it decides: the production path, on a virtual clock. Each policy is a configuration of the
placement service (`PlacementSettings`, turned into a `gpuaware.placement.Planner` exactly as the
service's state builds it: the profile, the queue order, preemption, reservations, the Permit plugin
that holds every decision), and for ``quota*`` and ``elastic`` a quota service (quota's `QuotaLedger`, one leaf queue
per tenant under one root, equal weights, guaranteed floor(64 / tenants) GPUs). The replay is the
world around them and nothing more: it advances time, submits each pending pod (`Planner.submit`,
as the service's pending consumer does), asks quota about each decision held at Permit and about
each pod that found no room, as the service's quota permit does (quota's reclaim plans executed by
`Planner.reclaim`, refusals rejected, answers due later asked again then), binds what is allowed,
preempts what the decisions name (the victim's next attempt is pending again once it is gone, 30 s
later, as the binder re-queues it), finishes jobs, and runs the planner's retry pass (`Planner.retry`: gangs, then the
queue order's pass -- fair share, reclaim, turn-taking, backfill) whenever capacity was freed, as the
service's retry loop does. Parked pods get a predicted runtime (`Planner.predict`, what the
forecasting service's duration predictor answers the service): the median of the tenant's finished
jobs once it has three, 6 h before (no oracle).
  * ``fifo``: stock Kubernetes as the demo's baseline runs it -- the ``KubeDefault`` profile, the
    ``priority`` queue order, no preemption, and pods without a PriorityClass (submission order);
  * ``priority``: the same with the classes' priorities and kube-scheduler's preemption;
  * ``quota``: gpuaware -- the service's default profile (``GpuAware``) with the ``fair-share`` queue
    order (starved tenants first, most starved first, and they reclaim from tenants above their share;
    then shortest predicted runtime), without turn-taking, and quota admitting every decision (a
    tenant inside its guarantee gets a reclaim plan);
  * ``quota+backfill``: ``quota`` with the service's node reservations on (``reservations``: a node
    held for each starved tenant's first wide pod, others backfill it only if predicted to end first);
  * ``quota+turns``: the service's fair-share defaults, turn-taking included (a tenant kept below its
    share for a while takes a turn from tenants at or above theirs) -- what ``make demo`` runs.

Reported per source, load and policy (``gpuaware.sim.fair_share_over_windows`` for the tenants'
figures, what the demo reports too): Jain's index over the tenants with demand (the tenant count
given) in hourly windows (min(1, GPU-hours held / water-filled entitlement given the window's demand),
mean over windows with at least two tenants asking, and over the windows where demand exceeded the
cluster), and the worst tenant's time-averaged share of its fair share over the contended hours;
finish-time fairness (Themis' rho = JCT / run time alone on 1/N of the cluster: max, p95); p99 queue
delay of the high class (goal: >= 50 % below FIFO's, the no-preemption baseline); the victims' cost
as a distribution -- per job preempted (stopped) or shrunk, its slowdown = JCT / its JCT in a replay
of the same workload and policy without preemption (no PostFilter, no reclaim, no turns, no swaps),
p50 / p95 / max per class, pooled over the load's workloads (``victims_pooled``) --, the most
preemptions of one job and how many were preempted more than twice, GPU-hours lost to preemption
(work redone, saves, the restarts after stops and shrinks and those of grows onto GPUs a swap took, on
every GPU the job held) against GPU-hours delivered, and beside it the GPU-hours grows onto idle GPUs
cost (a job's own restart to run faster, not a preemption's); the JCT
increase of preempted low-class jobs two ways as before (against FIFO's, and what preemption itself
added); average JCT and makespan with the published Tiresias/Pollux figures beside
(``PUBLISHED_NUMBERS.md``). Every figure of Pollux is the mean over its 8 workloads except the
pooled victims. One CSV per source, policy and load (row per job: job, tenant, gpus -- its largest
width --, submit, start, end, preemptions, resizes, slowdown) and beside it a segments CSV (job,
tenant, gpus, start, end: one row per stretch a job ran at one width), next to
bench/results/fairness.json.
Also: the admission decision's latency (QuotaLedger.admit, what quota.admit runs) with 1,000 /
10,000 / 50,000 running pods.

Run: ``make bench-fairness`` or ``.venv/bin/python bench/fairness.py`` (data via GPUAWARE_SHARED_DATA);
``--loads 1.0 --workloads 1`` for a quick look.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from bench_paths import RESULTS_DIR, ROOT, finite, shown
from machine_info import load_average
from machine_info import machine as shared_machine
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware import bus
from gpuaware.placement import (
    GPU_CATALOG,
    KUBE_DEFAULT,
    Decided,
    NodeSpec,
    Parked,
    Phase,
    Planner,
    PlannerConfig,
    PodEntry,
    PodRequest,
)
from gpuaware.quota import Admission, Allocation, Demand, QuotaLedger, demand_of, validate
from gpuaware.schemas import percentile
from gpuaware.services.placement.convert import PRIOR
from gpuaware.services.placement.permit import AdmittedAndStored
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.sim import (
    RESIZE_RESTART_DELAY_S,
    TenantWindow,
    ThroughputModel,
    fair_share_over_windows,
    iterations_to_target,
    load_philly,
    load_throughput_models,
    packed_placement,
    shared_data_dir,
)

OUT = RESULTS_DIR
GPUS = 64
GPUS_PER_NODE = 4
GPU_MODEL = "T4"
"""the Pollux artifact's cluster: 16 g4dn.12xlarge nodes of 4 T4 GPUs (the model plays no part: every pod
asks whole GPUs of any model; the throughput curves were measured there)"""
CPU_PER_GPU_MILLI = 10_000
MEMORY_PER_GPU_MIB = 40 * 1024
"""what a pod asks per GPU (a quarter of the node, less the system's reserve)"""
NODE_CPU_MILLI = 48_000
NODE_MEMORY_MIB = 192 * 1024
"""a node's CPU and memory (a g4dn.12xlarge: 48 vCPUs, 192 GiB; its GPUs, not its CPU, run out first)"""
LOADS = (0.5, 1.0, 1.5, 2.0)
POLICIES = ("fifo", "priority", "quota", "quota+backfill", "quota+turns", "elastic")
OURS = ("quota+turns", "elastic")
ELASTIC = "elastic"
"""``quota+turns`` with every Pollux job elastic (1..its GPUs workers); on Philly (no throughput curves)
the same as ``quota+turns``"""
GROW_WORTH_RESTARTS = 4
"""a grow is worth it when the seconds it saves its job exceed this many restarts (its resize, the shrink
that may take the worker back, and the ones its neighbours pay)"""
RESIZE_S = RESIZE_RESTART_DELAY_S
"""what one resize costs an elastic job: it stands still while its workers restart at the new world
size (the twin's charge; its progress was checkpointed first)"""
"""the gpuaware policies the goals are judged on"""
PREDICT_DEFAULT_S = 6 * 3600.0
"""the conservative duration a job is predicted to run before its tenant has three finished jobs"""
CHECKPOINT_EVERY_S = 900.0
CHECKPOINT_SAVE_S = 30.0
"""a checkpoint asked for at preemption (the binder's handshake) takes this long: the run's last seconds are lost"""
RESTART_S = 60.0
REQUEUE_AFTER_S = 30.0
"""a victim is gone (and its next attempt pending) this long after the decision that preempts it: its
checkpoint save under gpuaware, Kubernetes' default termination grace period under stock preemption"""
MAX_PREEMPTIONS_PER_JOB = 50
"""more preemptions than this per job on average: the replay stops and says so (pods taking GPUs back
and forth)"""
RESERVATIONS = 2
"""``quota+backfill``: nodes the service holds at once for starved tenants' wide pods (its ``reservations``)"""
HIGH_SHARE = 0.2
HALF_LIFE_S = 3600.0
MAX_PASSES = 10_000
"""retry passes at one instant before the replay gives up (each freed capacity wakes one: they end)"""
PHILLY_WEEK = ("2017-10-02", "2017-10-09")
TIRESIAS = {0.5: (0.58, 13.0), 1.0: (1.12, 24.2), 1.5: (1.72, 31.6), 2.0: (2.79, 40.4)}  # avg JCT h, makespan h
POLLUX = {0.5: (0.43, 10.6), 1.0: (0.76, 16.8), 1.5: (1.02, 20.5), 2.0: (1.47, 25.7)}


@dataclass(slots=True)
class Job:
    name: str
    tenant: str
    gpus: int
    """its GPUs (fixed), or its most workers (elastic: one GPU each)"""
    submit: float
    duration: float
    """seconds of work at `gpus` GPUs, packed"""
    priority: int = 0
    app: str = ""
    """the Pollux application (its throughput curve); "" on Philly"""
    batch: int = 0
    """its global batch (fixed across resizes, torchrun-style)"""
    elastic: bool = False
    # replay state
    done_work: float = 0.0
    start: float | None = None
    run_start: float = 0.0
    end: float | None = None
    preemptions: int = 0
    lost_s: float = 0.0
    requeued_s: float = 0.0
    """time spent waiting again after preemptions"""
    preempted_at: float | None = None
    version: int = 0
    attempt: int = -1
    """the pods' attempt now (the binder's: a preempted job's pods are pending again as the next one)"""
    bound: set[str] = field(default_factory=set)
    """its pods bound in the current attempt"""
    decisions: list[str] = field(default_factory=list)
    """the planner's decision ids that started it, one per start (a gang's first member's)"""
    # elastic jobs
    workers: dict[str, str] = field(default_factory=dict)
    """its bound workers (pod uid -> node)"""
    attempts: dict[str, int] = field(default_factory=dict)
    """each worker's attempt"""
    rate: float = 1.0
    """work seconds per second at its width and placement now (1 at `gpus`, packed)"""
    progress_t: float = 0.0
    pause_until: float = 0.0
    """it restarts (at a new world size) until then: no progress"""
    changed_at: float = -1.0
    """when its width last changed (changes at one instant are one resize)"""
    grows: int = 0
    shrinks: int = 0
    lost_gpu_s: float = 0.0
    """GPU-seconds lost to its preemptions: work redone, saves, the restarts of stops, of shrinks and of
    grows onto a spare a swap took"""
    grow_gpu_s: float = 0.0
    """GPU-seconds its grows onto idle GPUs cost in restarts: a resize it made to run faster, not a
    preemption's cost"""
    pause_grows: bool = False
    """its restart under way is a grow's onto idle GPUs"""
    segments: list[tuple[int, float, float]] = field(default_factory=list)
    """(width, start, end) of each stretch it ran at one width"""
    seg: tuple[int, float] | None = None

    @property
    def width(self) -> int:
        """GPUs it holds now."""
        if self.elastic:
            return len(self.workers)
        return self.gpus if self.bound and len(self.bound) == len(self.pods()) else 0

    @property
    def resizes(self) -> int:
        return self.grows + self.shrinks

    @property
    def left(self) -> float:
        return self.duration - self.done_work

    def pods(self) -> list[str]:
        """Its pods' uids: an elastic job's workers; else the job's name, or, wider than a node, one per
        node-wide share."""
        if self.elastic:
            return [f"{self.name}#w{k}" for k in range(self.gpus)]
        n = math.ceil(self.gpus / GPUS_PER_NODE)
        return [self.name] if n == 1 else [f"{self.name}#{k}" for k in range(n)]

def load_philly_jobs(path: Path, load: float, seed: int) -> tuple[list[Job], int]:
    lo = datetime.fromisoformat(PHILLY_WEEK[0]).timestamp()
    first = datetime.fromisoformat(_first_submit(path)).timestamp()
    pods = load_philly(path, window_start=lo - first, window_s=7 * 86400.0, checkpointable=True)
    jobs: dict[str, Job] = {}
    for p in pods:  # gangs of whole-node pods are one job again
        key = p.gang_id or p.uid
        j = jobs.get(key)
        if j is None:
            jobs[key] = Job(key, p.queue, p.num_gpu, p.arrival_s, float(p.duration_s or 0.0))
        else:
            j.gpus += p.num_gpu
    pool = [j for j in jobs.values() if j.duration > 0]
    too_wide = sum(j.gpus > GPUS for j in pool)
    pool = [j for j in pool if j.gpus <= GPUS]
    rng = np.random.default_rng(seed)
    n = round(160 * load)
    pick = sorted(rng.choice(len(pool), size=min(n, len(pool)), replace=False))
    chosen = [pool[i] for i in pick]
    span = 7 * 86400.0
    for j in chosen:  # the week's submissions, in order, into 8 hours
        j.submit = j.submit / span * 8 * 3600.0
    return chosen, too_wide


def _first_submit(path: Path) -> str:
    with path.open() as f:
        rows = csv.DictReader(f)
        return min(r["timestamp"] for r in rows if r["timestamp"])


def load_pollux_jobs(folder: Path, results: Path, load: float,
                     models: Mapping[str, ThroughputModel] | None = None,
                     traces: Path | None = None) -> list[tuple[str, list[Job]]]:
    """The artifact's workloads of one load. With `models` (and their `traces`), a job's duration is its
    work under the throughput model: the iterations its application needs to reach the target at its
    batch size (``validation-<batch>.csv``) at its measured iteration time on its GPUs packed; without,
    the shortest published JCT (a proxy that holds the published runs' waiting too)."""
    key = f"{load:.1f}"
    jcts = {}
    for policy in ("pollux", "optimus", "tiresias"):
        data = json.loads((results / f"{policy}-{key}" / "summary.json").read_text())["jcts"]
        for w, jobs in data.items():
            for name, jct in jobs.items():
                jcts[(w, name)] = min(jcts.get((w, name), math.inf), float(jct))
    out = []
    for f in sorted(folder.glob("workload-*.csv")):
        w = f.stem
        with f.open() as h:
            jobs = [Job(f"{w}/{r['name']}", r["application"], int(r["num_replicas"]), float(r["time"]),
                        jcts[(w, r["name"])], app=r["application"], batch=int(r["batch_size"]))
                    for r in csv.DictReader(h)]
        if models is not None and traces is not None:
            for j in jobs:
                iters = iterations_to_target(traces / j.app, j.batch)
                j.duration = iters * models[j.app].iteration_s(packed_placement(j.gpus, GPUS_PER_NODE), j.batch)
        out.append((w, jobs))
    return out


def assign_classes(jobs: list[Job], seed: int) -> None:
    rng = np.random.default_rng(seed + 1)
    for j, u in zip(jobs, rng.random(len(jobs)), strict=True):
        j.priority = 1 if u < HIGH_SHARE else 0


def quota_tree(tenants: Sequence[str], half_life_s: float = HALF_LIFE_S):
    g = GPUS // len(tenants)
    queues = [{"name": "cluster", "guaranteed": {"*": {"gpus": GPUS}}}]
    queues += [{"name": t, "parent": "cluster", "guaranteed": {"*": {"gpus": g}}} for t in tenants]
    return validate({"capacity": {"*": {"gpus": GPUS}}, "half_life_s": half_life_s, "queues": queues})


def with_quota(policy: str) -> bool:
    """gpuaware's policies run with a quota service admitting every decision (and the binder's
    checkpoint handshake before a preemption); stock Kubernetes' without."""
    return policy.startswith("quota") or policy == ELASTIC


def service_settings(policy: str, preempt: bool = True) -> PlacementSettings:
    """The placement service's settings a policy runs with (see the module docstring); `preempt` False:
    the same without preemption and turns (the victims' reference replay)."""
    off: dict[str, Any] = {} if preempt else {"preemption": False, "turn_due": 0.0}
    if policy == "fifo":
        return PlacementSettings(policy=KUBE_DEFAULT, queue_order="priority", **{"preemption": False, **off})
    if policy == "priority":
        return PlacementSettings(policy=KUBE_DEFAULT, queue_order="priority", **off)
    if policy == "quota":
        return PlacementSettings(queue_order="fair-share", **{"turn_due": 0.0, **off})
    if policy == "quota+backfill":
        return PlacementSettings(queue_order="fair-share", reservations=RESERVATIONS, **{"turn_due": 0.0, **off})
    if policy in ("quota+turns", ELASTIC):
        return PlacementSettings(queue_order="fair-share", **off)
    raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")


def service_planner(settings: PlacementSettings, clock, reclaims: bool = True) -> Planner:
    """The planner as the placement service's state builds it from its settings (no learned request mix
    from a file; the Permit plugin that holds every decision until it is admitted and stored).
    `reclaims` False: the fair-share pass reclaims nothing (the reference replay without preemption)."""
    return Planner(PlannerConfig(
        policy_name=settings.policy_name, policy_config=settings.policy_config, prior=PRIOR,
        typical_min_pods=settings.typical_min_pods, typical_window=settings.typical_window,
        typical_drift=settings.typical_drift, seed=settings.seed, max_tombstones=settings.max_tombstones,
        preemption=settings.preemption, preemption_cooldown_s=settings.preemption_cooldown_s,
        max_victims=settings.max_victims, max_reservations=settings.reservations,
        victim_min_run_s=settings.victim_min_run_s, victim_max_requeues=settings.victim_max_requeues or None,
        resize_hold_s=settings.resize_hold_s,
        permits=(AdmittedAndStored(),), **({} if reclaims else {"max_reclaims": 0, "max_swaps": 0})), clock=clock)


def cluster_nodes() -> list[NodeSpec]:
    return [NodeSpec(f"node-{i:02d}", NODE_CPU_MILLI, NODE_MEMORY_MIB, GPUS_PER_NODE, GPU_MODEL)
            for i in range(GPUS // GPUS_PER_NODE)]


class QuotaService:
    """``quota.admit`` as the quota service answers it (its view's ``admit``), on the replay's clock: an
    admitted decision counts against its queue at once; a dry run (no node) reserves nothing; a pod
    already counted is admitted again. Pods leave it when the binder reports them gone."""

    NOT_FOR_RECLAIM = frozenset({"gang_incomplete", "quota_exceeded", "invalid_request", "refused_by_binder",
                                 "elastic_grow"})
    """verdicts more capacity would not change: the service asks quota for no reclaim plan for them"""

    def __init__(self, ledger: QuotaLedger) -> None:
        self.ledger = ledger

    def admit(self, pod: PodRequest, node: str | None, now: float) -> Admission:
        held = self.ledger.running.get(pod.name)
        if held is not None:
            return Admission(True, held.queue, "already admitted")
        d = demand_of(pod.num_gpu, pod.gpu_milli, pod.gpu_memory_mib, pod.cpu_milli, pod.memory_mib)
        a = self.ledger.admit(pod.queue, d, now, node=node, uid=pod.name)
        if a.admitted and node is not None:
            self.ledger.bind(Allocation(pod.name, a.queue, d, started_at=now, node=node, priority=pod.priority,
                                        checkpointable=pod.checkpointable), now=now)
        return a

    def gone(self, uid: str, now: float, why: str = "released") -> None:
        """The pod's GPUs are free again: ``preempted`` (pending again: quota counts it against its cap),
        ``finished`` (its count forgotten), or its reservation ``released``."""
        if why == "preempted":
            self.ledger.preempted(uid, now)
        elif why == "finished":
            self.ledger.finished(uid, now)
        else:
            self.ledger.release(uid, now)


FINISH, ARRIVE, WAKE, REQUEUE = 0, 1, 2, 3
"""event kinds, in the order simultaneous ones are applied: a job ending frees GPUs an arrival may take"""


class Replay:
    """One replay: the world around one placement instance (and a quota service) on a virtual clock.

    Events are arrivals, completions (versioned: a preempted run's completion is stale) and wake-ups
    (a quota question due again). The replay never chooses a pod, a node or a victim: the planner and
    quota do (see the module docstring)."""

    def __init__(self, jobs: list[Job], policy: str, half_life_s: float = HALF_LIFE_S, *,
                 preempt: bool = True, models: Mapping[str, ThroughputModel] | None = None) -> None:
        self.jobs = jobs
        self.policy = policy
        self.now = 0.0
        self.preempt = preempt
        """False: the reference replay -- nobody is preempted, reclaimed from or shrunk"""
        self.models = models or {}
        self.settings = service_settings(policy, preempt)
        self.planner = service_planner(self.settings, lambda: self.now, reclaims=preempt)
        if any(j.elastic for j in jobs):
            self.planner.grow_gain = self.gain
        self._rates: dict[tuple[str, int, tuple[int, ...]], float] = {}
        for spec in cluster_nodes():
            self.planner.view.set_node(spec, GPU_CATALOG[GPU_MODEL])
        self.planner.ensure_cluster()
        tenants = sorted({j.tenant for j in jobs})
        self.quota = QuotaService(QuotaLedger(quota_tree(tenants, half_life_s))) if with_quota(policy) else None
        self.by_name = {j.name: j for j in jobs}
        self.job_of = {uid: j for j in jobs for uid in j.pods()}
        self.running: dict[str, Job] = {}
        self.pending: dict[str, Job] = {}
        self.events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        for j in jobs:
            self._push(j.submit, ARRIVE, j.name)
        self.due: dict[str, float] = {}
        """pod uid -> when to ask quota for a reclaim plan again (the service's quota permit's ``due``)"""
        self._unplanned: dict[str, int] = {}
        self.freed = False
        self.finished_s: dict[str, list[float]] = {}
        self.windows = Windows(tenants)
        self.log: list[tuple[float, str, str]] = []
        """(time, pod uid, decision id) of every decision bound"""

    def _push(self, t: float, kind: int, name: str, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, name, version))

    # -- the replay -------------------------------------------------------------------------------------

    def run(self) -> list[Job]:
        while self.events:
            t = self.events[0][0]
            self.windows.advance(self.now, t, self.running.values(), self.pending.values())
            self.now = t
            while self.events and self.events[0][0] == t:
                _, kind, _, name, version = heapq.heappop(self.events)
                j = self.by_name.get(name)
                if kind == FINISH:
                    if j is not None and version == j.version and j.name in self.running:
                        self.finish(j)
                elif kind == ARRIVE:
                    assert j is not None
                    self.pending[j.name] = j
                    self.submit(j)
                    self._check_churn()
                elif kind == REQUEUE:  # an elastic job's evicted worker is pending again
                    job = self.job_of[name]
                    if job.end is None:
                        self.submit_worker(job, name)
                else:
                    self.freed = True
            passes = 0
            while self.freed:
                self.freed = False
                self.retry()
                passes += 1
                if passes > MAX_PASSES:
                    raise RuntimeError(f"{self.policy}: capacity freed {passes} times at t={t:.0f} s")
        unfinished = [j for j in self.jobs if j.end is None]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} jobs never finished under {self.policy}")
        return self.jobs

    def _check_churn(self) -> None:
        n = sum(j.preemptions for j in self.jobs)
        if n > MAX_PREEMPTIONS_PER_JOB * len(self.jobs):
            raise RuntimeError(f"{self.policy}: {n} preemptions of {len(self.jobs)} jobs by t={self.now:.0f} s: "
                               "pods are taking GPUs back and forth")

    def request(self, j: Job, uid: str) -> PodRequest:
        """The pod as the binder announces it (a gang's members share the job's name; an elastic job's
        workers take one GPU each and run 1..`gpus` of them)."""
        members = j.pods()
        if j.elastic:
            return PodRequest(uid, CPU_PER_GPU_MILLI, MEMORY_PER_GPU_MIB, 1, 1000, priority=j.priority,
                              queue=j.tenant, gang_id=j.name, gang_min_members=1, gang_max_members=j.gpus,
                              checkpointable=True)
        gpus = GPUS_PER_NODE if uid != members[-1] else j.gpus - GPUS_PER_NODE * (len(members) - 1)
        gang = len(members) > 1
        return PodRequest(uid, CPU_PER_GPU_MILLI * gpus, MEMORY_PER_GPU_MIB * gpus, gpus, 1000,
                          priority=0 if self.policy == "fifo" else j.priority, queue=j.tenant,
                          gang_id=j.name if gang else "", gang_min_members=len(members) if gang else 0,
                          checkpointable=True)

    def submit(self, j: Job) -> None:
        """The job's pods are pending (again): the service decides each as its consumer reads it."""
        if j.elastic:
            for uid in j.pods():
                self.submit_worker(j, uid)
            return
        j.attempt += 1
        j.bound.clear()
        for uid in j.pods():
            self.handle(self.planner.submit(uid, j.attempt, self.request(j, uid)))

    def submit_worker(self, j: Job, uid: str) -> None:
        """One worker of an elastic job is pending (at its arrival, or again after an eviction)."""
        j.attempts[uid] = j.attempts.get(uid, -1) + 1
        self.handle(self.planner.submit(uid, j.attempts[uid], self.request(j, uid)))

    def retry(self) -> None:
        """Capacity was freed: the service's retry loop, passes until none is left with pods untried."""
        more = True
        while more:
            outcomes, more = self.planner.retry(self.settings.retry_batch)
            self.handle(outcomes)

    # -- the service's permit, then the world -------------------------------------------------------------

    def handle(self, outcomes: list[Decided | Parked]) -> None:
        """What the service does with a pass's outcomes before publishing them (quota asked, decisions
        allowed), then what the binder does with the published decisions (victims preempted, pods bound)."""
        for o in outcomes:
            if isinstance(o, Parked) and o.entry.request is not None:
                self.planner.predict(o.entry.uid, self.predict(self.job_of[o.entry.uid]))
        decided = self.permit(outcomes)
        victims: dict[str, PodEntry] = {}
        for d in decided:
            held = self.planner.waiting.get(d.entry.uid)
            victims.update((v.uid, v) for v in (held or d).victims)
            self.planner.waiting.allow(d.entry.uid)
        fixed = {self.job_of[v].name: self.job_of[v] for v in victims if not self.job_of[v].elastic}
        stopped = [j for j in fixed.values() if j.name in self.running]
        for j in stopped:
            self.stop(j, finished=False)
        workers = [v for v in victims if self.job_of[v].elastic and v in self.job_of[v].workers]
        for uid in workers:
            self.drop_worker(self.job_of[uid], uid)
        for d in decided:
            self.bind(d)
        for j in stopped:  # the binder re-queues each victim as its next attempt once it is gone
            self._push(self.now + REQUEUE_AFTER_S, ARRIVE, j.name)
        for uid in workers:
            self._push(self.now + REQUEUE_AFTER_S, REQUEUE, uid)

    def permit(self, outcomes: list[Decided | Parked]) -> list[Decided]:
        """The decisions to publish, as the service's quota permit leaves them: pods that found no room
        asked about (a reclaim plan executed by the planner), every decision admitted or rejected."""
        decided = [o for o in outcomes if isinstance(o, Decided)]
        if self.quota is None:  # no quota service answers: every decision is admitted
            return decided
        decided += self.reclaim([o for o in outcomes if isinstance(o, Parked)])
        refused: set[str] = set()
        out: list[Decided] = []
        for d in decided:
            uid = d.entry.uid
            if uid in refused or d.entry.request is None:
                continue
            a = self.quota.admit(d.entry.request, d.node, self.now)
            if a.admitted and a.reclaim and not self.preempt:
                a = Admission(False, a.queue, "no preemption in the reference replay", a.retry_after_s)
            if not a.admitted:
                for p in self.planner.waiting.reject(uid, a.reason or "refused by quota", a.retry_after_s):
                    refused.add(p.entry.uid)
                    self.quota.gone(p.entry.uid, self.now)  # a member admitted before: its reservation lapses
                self._later(self.settings.quota_recheck_s if a.retry_after_s is None else a.retry_after_s)
                continue
            if a.reclaim:
                self.planner.waiting.evict_also(uid, [v.uid for v in a.reclaim])
            out.append(d)
        return [d for d in out if d.entry.uid not in refused]

    def reclaim(self, parked: list[Parked]) -> list[Decided]:
        """Fresh verdicts for lack of room (lone pods), and pods whose question is due: quota's dry run,
        and its reclaim plan placed by the planner. Not reclaimable yet: asked again when quota says."""
        assert self.quota is not None
        if not self.preempt:
            return []
        asking = [o.entry.uid for o in parked if self._wants(o)]
        asking += [uid for uid, at in self.due.items() if at <= self.now and uid not in asking]
        made: list[Decided] = []
        for uid in asking:
            self.due.pop(uid, None)
            entry = self.planner.ledger.pods.get(uid)
            if entry is None or entry.phase != Phase.PARKED or entry.request is None:
                self._unplanned.pop(uid, None)
                continue
            a = self.quota.admit(entry.request, None, self.now)
            if not a.admitted:
                if a.retry_after_s is not None and a.reason.startswith("no_capacity"):
                    self.due[uid] = self.now + a.retry_after_s
                    self._later(a.retry_after_s)
                continue
            if not a.reclaim:
                continue  # quota sees room: capacity, not quota, is short
            d = self.planner.reclaim(uid, [v.uid for v in a.reclaim])
            if d is None:
                tries = self._unplanned[uid] = self._unplanned.get(uid, 0) + 1
                delay = bus.RetryPolicy(base=1.0, cap=max(1.0, self.settings.quota_recheck_s)).delay(tries)
                self.due[uid] = self.now + delay
                self._later(delay)
                continue
            self._unplanned.pop(uid, None)
            made.append(d)
        return made

    def _wants(self, o: Parked) -> bool:
        req = o.entry.request
        return (req is not None and o.entry.phase == Phase.PARKED and o.reason not in QuotaService.NOT_FOR_RECLAIM
                and not (req.gang_id and req.gang_min_members > 1))

    def _later(self, delay: float) -> None:
        """The service's ``retry_later``: a retry pass (and the questions due by then) after ``delay``."""
        self._push(self.now + delay, WAKE, "")

    def bind(self, d: Decided) -> None:
        """The binder bound the decision's pod; its job starts once every pod of it is bound (an elastic
        job with its first worker, and each further one resizes it)."""
        e = d.entry
        self.planner.ledger.bound(e.uid, e.attempt, d.node, d.gpus, e.request, d.decision_id, now=self.now,
                                  gpu_mem=d.gpu_mem)
        self.planner.world.event(self.now)
        self.log.append((self.now, e.uid, d.decision_id))
        j = self.job_of[e.uid]
        if j.elastic:
            self.add_worker(j, e.uid, d.node, d.decision_id, onto_idle=not d.victims)
            return
        j.bound.add(e.uid)
        if len(j.bound) == len(j.pods()):
            self.start(j, d.decision_id)

    def _gone(self, j: Job, why: str = "finished") -> None:
        """The binder reports the job's pods gone (``finished`` or ``preempted``): placement and quota
        forget them."""
        for uid in j.pods():
            self._pod_gone(uid, why)

    def _pod_gone(self, uid: str, why: str = "finished") -> None:
        self.planner.forget(uid)
        if self.planner.ledger.release(uid):
            self.freed = True
        if self.quota is not None:
            self.quota.gone(uid, self.now, why)
        self.due.pop(uid, None)

    # -- elastic jobs: workers join and leave, the job progresses at its measured throughput ----------------

    def rate(self, j: Job, placement: Sequence[int]) -> float:
        """Work seconds per second on `placement` (GPUs per node): its throughput over the throughput at
        its full width, packed (its duration's pace); linear in the GPUs without a measured curve."""
        model = self.models.get(j.app)
        if model is None or not placement:
            return sum(placement) / j.gpus
        key = (j.app, j.batch, tuple(sorted(placement)))
        got = self._rates.get(key)
        if got is None:
            full = model.throughput(packed_placement(j.gpus, GPUS_PER_NODE), j.batch)
            got = self._rates[key] = model.throughput(key[2], j.batch) / full
        return got

    def gain(self, uid: str, width: int) -> float:
        """The placement planner's grow order, as a job's agent would report it from its measured curve:
        the pace one more worker adds, over the work the job has left (the share of what is left it
        finishes sooner: short jobs first, as shortest-remaining-first orders them), where the seconds
        it saves exceed `GROW_WORTH_RESTARTS` restarts; 0 otherwise (not worth growing)."""
        j = self.job_of[uid]
        if width <= 0:
            return math.inf
        now = self.rate(j, packed_placement(width, GPUS_PER_NODE))
        wider = self.rate(j, packed_placement(width + 1, GPUS_PER_NODE))
        left = max(j.left, 1e-9)
        if wider <= now:
            return 0.0
        joins_a_restart = j.changed_at == self.now  # it starts or resizes at this instant already: free
        if not joins_a_restart and left / now - left / wider <= GROW_WORTH_RESTARTS * RESIZE_S:
            return 0.0
        return (wider - now) / left

    def _advance(self, j: Job) -> None:
        """Credit the work done since the last change; the time it restarted is lost, on every GPU it held."""
        if j.workers:
            restarting = min(self.now, j.pause_until) - j.progress_t
            if restarting > 0:
                if j.pause_grows:
                    j.grow_gpu_s += restarting * len(j.workers)
                else:
                    j.lost_gpu_s += restarting * len(j.workers)
            t0 = max(j.progress_t, j.pause_until)
            if self.now > t0:
                j.done_work = min(j.duration, j.done_work + (self.now - t0) * j.rate)
        j.progress_t = self.now

    def _resized(self, j: Job, pause: float, grow: bool = False) -> None:
        """Its width changed: the stretch at the old width ends, it restarts for `pause` (a change at the
        same instant as the last joins the restart under way), and its completion is due anew at its new
        pace."""
        if j.seg is not None and j.seg[1] < self.now:
            j.segments.append((j.seg[0], j.seg[1], self.now))
        j.seg = (len(j.workers), self.now) if j.workers else None
        j.version += 1
        if j.changed_at != self.now:
            j.pause_until = self.now + pause
            j.pause_grows = grow
        j.changed_at = self.now
        if not j.workers:
            return
        counts: dict[str, int] = {}
        for node in j.workers.values():
            counts[node] = counts.get(node, 0) + 1
        j.rate = self.rate(j, list(counts.values()))
        self._push(j.pause_until + j.left / j.rate, FINISH, j.name, j.version)

    def add_worker(self, j: Job, uid: str, node: str, decision: str, onto_idle: bool = True) -> None:
        """A worker bound: the job starts, or grows (onto idle GPUs, or onto a spare a swap took from
        another job: then its restart is a cost of that preemption)."""
        self._advance(j)
        first = not j.workers
        j.workers[uid] = node
        if first:  # it starts (again): a restart after a stop, nothing the first time
            self._runs(j, decision)
            self._resized(j, RESTART_S if j.preemptions else 0.0)
        else:
            j.grows += j.changed_at != self.now
            self._resized(j, RESIZE_S, grow=onto_idle)

    def drop_worker(self, j: Job, uid: str) -> None:
        """A worker evicted: the job shrinks (checkpoint, restart at the new size) or, its last, stops
        (its save's seconds are lost)."""
        self._advance(j)
        del j.workers[uid]
        self._pod_gone(uid, "preempted")
        if j.workers:
            j.shrinks += j.changed_at != self.now
            self._resized(j, RESIZE_S)
            return
        lost = min(j.done_work, CHECKPOINT_SAVE_S * j.rate)
        j.done_work -= lost
        j.lost_s += CHECKPOINT_SAVE_S
        j.lost_gpu_s += CHECKPOINT_SAVE_S  # its last worker's save
        j.preemptions += 1
        j.preempted_at = self.now
        del self.running[j.name]
        self.pending[j.name] = j
        self._resized(j, 0.0)

    def finish_elastic(self, j: Job) -> None:
        """Its work is done: its workers finish, the pending ones are withdrawn."""
        self._advance(j)
        j.done_work = j.duration
        j.workers.clear()
        self._resized(j, 0.0)
        del self.running[j.name]
        j.end = self.now
        self.finished_s.setdefault(j.tenant, []).append(j.duration)
        for uid in j.pods():
            self._pod_gone(uid)

    # -- the jobs' books --------------------------------------------------------------------------------

    def _runs(self, j: Job, decision: str) -> None:
        """The job runs from now (its first start, or again after a stop)."""
        j.decisions.append(decision)
        if j.start is None:
            j.start = self.now
        if j.preempted_at is not None:
            j.requeued_s += self.now - j.preempted_at
            j.preempted_at = None
        self.pending.pop(j.name, None)
        self.running[j.name] = j

    def start(self, j: Job, decision: str) -> None:
        j.version += 1
        self._runs(j, decision)
        j.run_start = self.now
        restart = RESTART_S if j.preemptions else 0.0
        self._push(self.now + restart + j.left, FINISH, j.name, j.version)

    def finish(self, j: Job) -> None:
        if j.elastic:
            self.finish_elastic(j)
            return
        j.segments.append((j.gpus, j.run_start, self.now))
        self.stop(j, finished=True)
        self._gone(j)

    def stop(self, j: Job, finished: bool) -> None:
        del self.running[j.name]
        if finished:
            if j.preemptions:  # the last resume's restart: a preempted run's is counted below
                j.lost_s += RESTART_S
                j.lost_gpu_s += RESTART_S * j.gpus
            j.done_work = j.duration
            j.end = self.now
            self.finished_s.setdefault(j.tenant, []).append(j.duration)
            return
        restart = RESTART_S if j.preemptions else 0.0
        j.segments.append((j.gpus, j.run_start, self.now))
        ran = max(0.0, self.now - j.run_start - restart)
        if self.quota is not None:  # gpuaware: the binder asks for a checkpoint before it preempts
            kept = max(0.0, ran - CHECKPOINT_SAVE_S)
        else:  # stock preemption: the work since the last periodic checkpoint is lost
            kept = math.floor(ran / CHECKPOINT_EVERY_S) * CHECKPOINT_EVERY_S
        j.lost_s += ran - kept + min(restart, self.now - j.run_start)
        j.lost_gpu_s += (ran - kept + min(restart, self.now - j.run_start)) * j.gpus
        j.done_work += kept
        j.preemptions += 1
        j.version += 1
        j.preempted_at = self.now
        self.pending[j.name] = j
        self._gone(j, "preempted")

    def predict(self, j: Job) -> float:
        """The job's run time as an online predictor would say: the median of its tenant's finished
        jobs once there are three, the conservative default before (no oracle)."""
        done = self.finished_s.get(j.tenant, [])
        return float(np.median(done)) if len(done) >= 3 else PREDICT_DEFAULT_S


class Windows:
    """GPU-seconds held and asked per tenant per hour, integrated exactly between events."""

    def __init__(self, tenants: Sequence[str]) -> None:
        self.tenants = list(tenants)
        self.held: dict[int, np.ndarray] = {}
        self.asked: dict[int, np.ndarray] = {}
        self.index = {t: i for i, t in enumerate(self.tenants)}

    def advance(self, t0: float, t1: float, running, pending) -> None:
        if t1 <= t0:
            return
        held = np.zeros(len(self.tenants))
        asked = np.zeros(len(self.tenants))
        for j in running:
            held[self.index[j.tenant]] += j.width if j.elastic else j.gpus
            asked[self.index[j.tenant]] += j.gpus
        for j in pending:
            asked[self.index[j.tenant]] += j.gpus
        h = int(t0 // 3600)
        while t0 < t1:
            edge = min(t1, (h + 1) * 3600.0)
            self.held.setdefault(h, np.zeros(len(self.tenants)))[:] += held * (edge - t0)
            self.asked.setdefault(h, np.zeros(len(self.tenants)))[:] += asked * (edge - t0)
            t0, h = edge, h + 1

    def fair_share(self) -> dict[str, Any]:
        """Jain over tenants with demand (every hour with two or more, and the contended hours) and the
        worst tenant's time-averaged share of its fair share over contended hours
        (`gpuaware.sim.fair_share_over_windows`, what the demo reports too)."""
        windows = [TenantWindow(h * 3600.0, (h + 1) * 3600.0,
                                {t: float(self.held[h][i]) for i, t in enumerate(self.tenants)},
                                {t: float(a[i]) for i, t in enumerate(self.tenants)})
                   for h, a in sorted(self.asked.items())]
        f = fair_share_over_windows(windows, GPUS)
        return {"mean": None if f.jain_mean is None else _r(f.jain_mean), "windows": f.windows,
                "mean_contended": None if f.jain_contended_mean is None else _r(f.jain_contended_mean),
                "contended_windows": f.contended_windows, "tenants": f.tenants, "worst_tenant": f.worst_tenant,
                "worst_share_of_fair_share": None if f.worst_share is None else _r(f.worst_share)}


def _r(x: float, n: int = 4) -> float:
    return round(float(x), n)


def metrics(jobs: list[Job], windows: Windows, fifo_jct: dict[str, float] | None,
            ref_jct: dict[str, float] | None = None, models: Mapping[str, ThroughputModel] | None = None) -> dict:
    jct = np.array([j.end - j.submit for j in jobs])  # type: ignore[operator]  # finished jobs have start and end
    high = np.array([j.start - j.submit for j in jobs if j.priority > 0])  # type: ignore[operator]  # finished jobs have start and end
    preempted = [j for j in jobs if j.preemptions and j.priority == 0]
    delivered = sum(w * (b - a) for j in jobs for w, a, b in j.segments)
    out = {
        "jobs": len(jobs),
        "avg_jct_h": _r(jct.mean() / 3600, 3),
        "p99_jct_h": _r(percentile(jct, 99) / 3600, 3),
        "makespan_h": _r((max(j.end for j in jobs) - min(j.submit for j in jobs)) / 3600, 3),  # type: ignore[type-var]  # finished jobs have start and end
        "high_class_p99_queue_delay_s": _r(percentile(high, 99), 1) if high.size else None,
        "jain": windows.fair_share(),
        "finish_time_fairness": finish_time_fairness(jobs, len(windows.tenants), models or {}),
        "victims": victims(jobs, slowdowns(jobs, ref_jct)),
        "gpu_hours_delivered": _r(delivered / 3600, 2),
        "gpu_hours_lost_to_preemption": _r(sum(j.lost_gpu_s for j in jobs) / 3600, 2),
        "gpu_hours_lost_pct_of_delivered": _r(100 * sum(j.lost_gpu_s for j in jobs) / max(delivered, 1e-9), 3),
        "gpu_hours_growing": _r(sum(j.grow_gpu_s for j in jobs) / 3600, 2),
        "gpu_hours_growing_pct_of_delivered": _r(100 * sum(j.grow_gpu_s for j in jobs) / max(delivered, 1e-9), 3),
        "resizes": int(sum(j.resizes for j in jobs)),
        "preemptions": int(sum(j.preemptions for j in jobs)),
        "preempted_low_jobs": len(preempted),
        "lost_work_pct_of_preempted_duration": _r(100 * sum(j.lost_s for j in preempted)
                                                  / max(sum(j.duration for j in preempted), 1e-9), 2),
    }
    cost, ratio = increases(preempted, fifo_jct)
    if cost is not None:
        out["preempted_low_jct_increase_from_preemption_pct"] = {"median": _r(100 * np.median(cost), 1),
                                                                  "mean": _r(100 * cost.mean(), 1)}
    if ratio is not None:
        out["preempted_low_jct_increase_vs_fifo_pct"] = {"median": _r(100 * np.median(ratio), 1),
                                                         "mean": _r(100 * ratio.mean(), 1)}
    return out


def slowdowns(jobs: list[Job], ref_jct: dict[str, float] | None) -> dict[str, float]:
    """Per job preempted or shrunk: its JCT over its JCT in the reference replay (the same workload and
    policy, nobody preempted, reclaimed from or shrunk)."""
    if ref_jct is None:
        return {}
    return {j.name: (j.end - j.submit) / max(ref_jct[j.name], 1e-9) for j in jobs  # type: ignore[operator]  # finished jobs have start and end
            if j.preemptions or j.shrinks}


def victims(jobs: list[Job], slow: dict[str, float]) -> dict[str, Any]:
    """Victims' cost as a distribution: slowdown (`slowdowns`) p50 / p95 / max per class, preemptions
    (stops) per job, shrinks."""
    out: dict[str, Any] = {"most_preemptions_per_job": max((j.preemptions for j in jobs), default=0),
                           "jobs_preempted_more_than_twice": sum(j.preemptions > 2 for j in jobs),
                           "jobs_shrunk": sum(j.shrinks > 0 for j in jobs)}
    for name, klass in (("low", 0), ("high", 1)):
        xs = [v for j in jobs if j.priority == klass and (v := slow.get(j.name)) is not None]
        out[f"{name}_class"] = ({"jobs": len(xs), "slowdown_p50": _r(percentile(xs, 50), 3),
                                 "slowdown_p95": _r(percentile(xs, 95), 3), "slowdown_max": _r(max(xs), 3)}
                                if xs else {"jobs": 0})
    return out


def finish_time_fairness(jobs: list[Job], tenants: int, models: Mapping[str, ThroughputModel]) -> dict[str, Any]:
    """Themis' rho per job: its JCT over its run time alone on 1/N of the cluster (N tenants; at
    min(its GPUs, 64 / N) GPUs packed, at its measured throughput there; a fixed job wider than that
    slices time): max and p95."""
    share = max(1, GPUS // max(1, tenants))
    rho = []
    for j in jobs:
        width = min(j.gpus, share)
        model = models.get(j.app)
        if model is not None:
            pace = (model.throughput(packed_placement(width, GPUS_PER_NODE), j.batch)
                    / model.throughput(packed_placement(j.gpus, GPUS_PER_NODE), j.batch))
        else:
            pace = width / j.gpus
        rho.append((j.end - j.submit) / max(j.duration / pace, 1e-9))  # type: ignore[operator]  # finished jobs have start and end
    return {"tenants": tenants, "share_gpus": share, "rho_max": _r(max(rho), 3), "rho_p95": _r(percentile(rho, 95), 3)}


def increases(preempted: list[Job], fifo_jct: dict[str, float] | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per preempted job: what preemption itself added (work redone, restarts, waiting again, over the
    JCT without them), and its JCT against the same job's under FIFO - 1. None where there is nothing."""
    if not preempted:
        return None, None
    cost = np.array([(j.lost_s + j.requeued_s) / max(j.end - j.submit - j.lost_s - j.requeued_s, 1e-9)  # type: ignore[operator]  # finished jobs have start and end
                     for j in preempted])
    ratio = None if fifo_jct is None else np.array([(j.end - j.submit) / fifo_jct[j.name] - 1  # type: ignore[operator]  # finished jobs have start and end
                                                    for j in preempted])
    return cost, ratio


def replay(jobs: list[Job], policy: str, half_life_s: float = HALF_LIFE_S, *, preempt: bool = True,
           models: Mapping[str, ThroughputModel] | None = None) -> tuple[list[Job], Windows]:
    """Fresh copies of `jobs` replayed under `policy` (the ``elastic`` policy makes jobs with a
    throughput curve elastic): the jobs as they ran, and the hourly windows."""
    elastic = policy == ELASTIC and bool(models)
    fresh = [Job(j.name, j.tenant, j.gpus, j.submit, j.duration, j.priority, j.app, j.batch,
                 elastic and j.app in (models or {})) for j in jobs]
    world = Replay(fresh, policy, half_life_s, preempt=preempt, models=models)
    return world.run(), world.windows


def write_csv(path: Path, jobs: list[Job], slow: dict[str, float]) -> Path:
    """One row per job (``gpus``: its largest width) and beside it the segments CSV (one row per stretch
    a job ran at one width: the GPU-hours each tenant held can be recomputed from it). Returns the
    segments CSV's path."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "tenant", "gpus", "submit", "start", "end", "preemptions", "resizes", "slowdown"])
        for j in sorted(jobs, key=lambda j: (j.submit, j.name)):
            widest = max((seg[0] for seg in j.segments), default=j.gpus)
            w.writerow([j.name, j.tenant, widest, round(j.submit, 1), round(j.start, 1), round(j.end, 1),  # type: ignore[arg-type]  # finished jobs have start and end
                        j.preemptions, j.resizes, "" if j.name not in slow else round(slow[j.name], 4)])
    segments = path.with_name(path.stem + "-segments.csv")
    with segments.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "tenant", "gpus", "start", "end"])
        for j in sorted(jobs, key=lambda j: (j.submit, j.name)):
            for width, a, b in j.segments:
                if b > a:
                    w.writerow([j.name, j.tenant, width, round(a, 1), round(b, 1)])
    return segments


def run_source(source: str, workloads: list[tuple[str, list[Job]]], load: float, seed: int,
               half_life_s: float = HALF_LIFE_S, out_dir: Path = OUT, done: Callable[[], None] = lambda: None,
               models: Mapping[str, ThroughputModel] | None = None) -> dict:
    """Every policy over every workload of one load; metrics averaged over workloads. `done` is called
    after each replay (the progress bar)."""
    per_policy: dict[str, list[dict]] = {p: [] for p in POLICIES}
    rows: dict[str, list[Job]] = {p: [] for p in POLICIES}
    slow: dict[str, dict[str, float]] = {p: {} for p in POLICIES}
    every_fifo_jct: dict[str, float] = {}
    for k, (_, jobs) in enumerate(workloads):
        assign_classes(jobs, seed + k)
        fifo_jct = None
        for p in POLICIES:
            ref = None
            if p in OURS:  # the same workload and policy without preemption: the victims' reference
                unpreempted, _ = replay(jobs, p, half_life_s, preempt=False, models=models)
                ref = {j.name: j.end - j.submit for j in unpreempted}  # type: ignore[operator]  # finished jobs have start and end
            finished, windows = replay(jobs, p, half_life_s, models=models)
            m = metrics(finished, windows, fifo_jct, ref, models)
            if p == "fifo":
                fifo_jct = {j.name: j.end - j.submit for j in finished}  # type: ignore[operator]  # finished jobs have start and end
                every_fifo_jct.update(fifo_jct)
            per_policy[p].append(m)
            rows[p] += finished
            slow[p].update(slowdowns(finished, ref))
            done()
    out = {}
    for p in POLICIES:
        path = out_dir / f"fairness-{source}-{p}-{load:.1f}x.csv"
        segments = write_csv(path, rows[p], slow[p])
        out[p] = {**_mean_metrics(per_policy[p]), "csv": shown(path), "segments_csv": shown(segments)}
        # victims pooled over every workload of the load (a workload at 0.5x has a few)
        out[p]["victims_pooled"] = victims(rows[p], slow[p])
        # the same increases over every preempted job of every workload (a workload at 0.5x has a few)
        preempted = [j for j in rows[p] if j.preemptions and j.priority == 0]
        cost, ratio = increases(preempted, every_fifo_jct)
        if cost is not None and ratio is not None:
            out[p]["preempted_low_jct_increase_pooled"] = {
                "jobs": len(preempted), "from_preemption_median_pct": _r(100 * np.median(cost), 1),
                "vs_fifo_median_pct": _r(100 * np.median(ratio), 1)}
    return out


def _mean_metrics(ms: list[dict]) -> dict:
    """Mean over workloads of every number (nested dicts too); counts summed."""
    def merge(vals):
        first = vals[0]
        if isinstance(first, dict):
            return {k: merge([v[k] for v in vals if k in v]) for k in first}
        nums = [v for v in vals if isinstance(v, int | float) and v is not None]
        if not nums:
            return None
        return _r(float(np.mean(nums)), 4)
    merged = merge(ms)
    merged["workloads"] = len(ms)
    for k in ("jobs", "preemptions", "preempted_low_jobs"):
        merged[k] = int(sum(m[k] for m in ms))
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--half-life-s", type=float, default=HALF_LIFE_S, help="quota's usage half-life")
    ap.add_argument("--loads", type=float, nargs="+", default=list(LOADS), choices=LOADS, metavar="LOAD",
                    help=f"loads to replay (default: all of {', '.join(f'{x:g}' for x in LOADS)})")
    ap.add_argument("--workloads", type=int, default=8, metavar="N",
                    help="Pollux workloads per load (default: all 8; fewer for a quick look)")
    ap.add_argument("--out", type=Path, default=OUT / "fairness.json",
                    help="the JSON report; the per-job CSVs go beside it (default: bench/results/fairness.json)")
    args = ap.parse_args(argv)
    console = Console()
    if args.workloads < 1:
        console.print("[red]--workloads must be at least 1[/red]")
        return 2
    shared = shared_data_dir(ROOT)
    philly = shared / "pollux" / "traces" / "philly.csv"
    if not philly.is_file():
        console.print(f"[red]{philly} not found[/red]: set GPUAWARE_SHARED_DATA to the shared/data folder")
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    models = load_throughput_models(shared / "pollux" / "traces")
    loads = sorted(set(args.loads))
    t0 = time.perf_counter()
    report: dict = {"sources": {"philly": {}, "pollux": {}}}
    replays = len(loads) * (1 + args.workloads) * len(POLICIES)
    with Progress(TextColumn("fairness {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("replays"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=replays)
        step = lambda: bar.advance(task)  # noqa: E731  # one replay done
        for load in loads:
            bar.update(task, description=f"philly {load:.1f}x")
            jobs, too_wide = load_philly_jobs(philly, load, args.seed)
            r = run_source("philly", [("philly", jobs)], load, args.seed, args.half_life_s, args.out.parent, step)
            r["dropped_wider_than_cluster_in_week"] = too_wide
            report["sources"]["philly"][f"{load:.1f}x"] = r
            bar.update(task, description=f"pollux {load:.1f}x")
            folder = shared / "pollux" / ("workloads" if load == 1.0 else f"workloads-{load:.1f}")
            workloads = load_pollux_jobs(folder, shared / "pollux" / "results-jobload", load, models,
                                         shared / "pollux" / "traces")[:args.workloads]
            report["sources"]["pollux"][f"{load:.1f}x"] = run_source(
                "pollux", workloads, load, args.seed, args.half_life_s, args.out.parent, step, models)
            console.print(f"load {load:.1f}x done ({time.perf_counter() - t0:.0f} s)")
    report["published"] = {
        "tiresias_tj": {f"{k:.1f}x": {"avg_jct_h": v[0], "makespan_h": v[1]} for k, v in TIRESIAS.items()},
        "pollux": {f"{k:.1f}x": {"avg_jct_h": v[0], "makespan_h": v[1]} for k, v in POLLUX.items()},
        "source": "../shared/data/PUBLISHED_NUMBERS.md (Pollux OSDI'21 artifact, results-jobload, 64 T4 GPUs)",
        "caveat": "their JCTs come from Pollux's throughput simulator with its own job durations; ours replay "
                  "fixed-GPU jobs whose durations are a proxy (see method), so the comparison is indicative",
    }
    report["admission_latency"] = [admission_latency(n, args.seed) for n in (1_000, 10_000, 50_000)]
    report["goals"] = _goals(report)
    report["method"] = __doc__
    report["settings"] = {"gpus": GPUS, "gpus_per_node": GPUS_PER_NODE, "gpu_model": GPU_MODEL,
                          "checkpoint_every_s": CHECKPOINT_EVERY_S, "restart_s": RESTART_S,
                          "checkpoint_save_s": CHECKPOINT_SAVE_S, "high_class_share": HIGH_SHARE,
                          "half_life_s": args.half_life_s, "seed": args.seed, "philly_week": PHILLY_WEEK,
                          "loads": loads, "pollux_workloads_per_load": args.workloads,
                          "placement": {p: _placement_settings(p) for p in POLICIES}}
    report["machine"] = {**shared_machine("numpy", "msgspec", "numba"), "load_average": load_average()}
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["command"] = "make bench-fairness" + ("" if args.out == OUT / "fairness.json" and loads == list(LOADS)
                                                  and args.workloads == 8 else " (a subset: see settings)")
    args.out.write_text(json.dumps(finite(report), indent=2, allow_nan=False) + "\n")
    show(console, report)
    return 0


def _placement_settings(policy: str) -> dict:
    """What a policy sets of the placement service's settings (its ``GPUAWARE_PLACEMENT_*``), and the
    queue order's arguments the service derives from them."""
    s = service_settings(policy)
    return {"policy": s.policy_name, "queue_order": s.queue_order, "preemption": s.preemption,
            "reservations": s.reservations, "queue_sort": s.queue_sort, "quota": with_quota(policy)}


def admission_latency(running: int, seed: int) -> dict:
    """quota.admit's decision (QuotaLedger.admit) with ``running`` pods in a 3-level tree of 10 teams x
    5 projects: p50/p99 over 2,000 decisions for a node placement chose (the Permit step's question;
    pure: no NATS in it). A reclaim plan walks the running pods and costs more (not measured here)."""
    queues = [{"name": "org", "guaranteed": {"*": {"gpus": 8000}}}]
    for t in range(10):
        queues.append({"name": f"t{t}", "parent": "org", "guaranteed": {"*": {"gpus": 700}}})
        queues += [{"name": f"t{t}p{p}", "parent": f"t{t}", "limit": {"*": {"gpus": 2000}}} for p in range(5)]
    ledger = QuotaLedger(validate({"capacity": {"*": {"gpus": 8000}}, "queues": queues}))
    rng = np.random.default_rng(seed)
    leaves = [f"t{t}p{p}" for t in range(10) for p in range(5)]
    for i in range(running):
        milli = int(rng.choice([250, 500, 1000]))
        ledger.bind(Allocation(f"u{i}", leaves[i % len(leaves)], Demand.of(gpus=milli // 1000, gpu_milli=milli),
                               started_at=float(i)))
    times = []
    for i in range(2000):
        d = Demand.of(gpus=1, gpu_milli=1000)
        t = time.perf_counter_ns()
        ledger.admit(leaves[i % len(leaves)], d, now=float(running + i), node="node-1")
        times.append((time.perf_counter_ns() - t) / 1e6)
    return {"running_pods": running, "p50_ms": _r(percentile(times, 50), 4), "p99_ms": _r(percentile(times, 99), 4)}


def _goals(report: dict) -> dict:
    """Each goal per source, load and gpuaware policy; None: nothing to judge (no contended hour, no
    wait, no preemption)."""
    out = {}
    for src, loads in report["sources"].items():
        for load, r in loads.items():
            f = r["fifo"]
            fd = f["high_class_p99_queue_delay_s"]
            out[f"{src} {load}"] = by = {}
            for p in OURS:
                q = r[p]
                qd = q["high_class_p99_queue_delay_s"]
                inc = (q.get("preempted_low_jct_increase_vs_fifo_pct") or {}).get("median")
                own = (q.get("preempted_low_jct_increase_from_preemption_pct") or {}).get("median")
                jc = q["jain"]["mean_contended"]
                worst = q["jain"].get("worst_share_of_fair_share")
                low = q["victims_pooled"]["low_class"]
                pub = TIRESIAS.get(float(load.rstrip("x")))
                by[p] = {
                    "jain_contended_ge_0.95": None if jc is None else jc >= 0.95,
                    "worst_tenant_ge_0.8_of_fair_share": None if worst is None else worst >= 0.8,
                    "victims_low_p50_slowdown_le_1.10": None if not low["jobs"] else low["slowdown_p50"] <= 1.10,
                    "victims_low_p95_slowdown_le_1.50": None if not low["jobs"] else low["slowdown_p95"] <= 1.50,
                    "no_job_preempted_more_than_twice": q["victims_pooled"]["jobs_preempted_more_than_twice"] == 0,
                    "gpu_hours_lost_le_2pct": q["gpu_hours_lost_pct_of_delivered"] <= 2.0,
                    "avg_jct_below_tiresias": None if src != "pollux" or pub is None else q["avg_jct_h"] < pub[0],
                    "high_p99_delay_50pct_below_fifo": None if not fd else qd <= 0.5 * fd,
                    "preempted_low_jct_increase_vs_fifo_le_10pct": None if inc is None else inc <= 10.0,
                    "preempted_low_jct_increase_from_preemption_le_10pct": None if own is None else own <= 10.0,
                }
    return out


def show(console: Console, report: dict) -> None:
    for src, loads in report["sources"].items():
        t = Table(title=f"fairness: {src} on {GPUS} GPUs")
        for c in ("load", "policy", "Jain (contended)", "worst tenant", "high p99 delay s", "avg JCT h",
                  "makespan h", "stops", "resizes", "victims p50/p95", "lost GPU-h %", "growing GPU-h %"):
            t.add_column(c)
        for load, r in loads.items():
            for p in POLICIES:
                m = r[p]
                low = m["victims_pooled"]["low_class"]
                t.add_row(load, p, str(m["jain"]["mean_contended"]), str(m["jain"].get("worst_share_of_fair_share")),
                          str(m["high_class_p99_queue_delay_s"]), str(m["avg_jct_h"]), str(m["makespan_h"]),
                          str(m["preemptions"]), str(m["resizes"]),
                          f"{low['slowdown_p50']}/{low['slowdown_p95']}" if low["jobs"] else "-",
                          str(m["gpu_hours_lost_pct_of_delivered"]), str(m.get("gpu_hours_growing_pct_of_delivered")))
            for name in ("tiresias_tj", "pollux"):
                pub = report["published"][name][load]
                t.add_row(load, f"{name} (published)", "", "", "", str(pub["avg_jct_h"]), str(pub["makespan_h"]),
                          "", "", "", "", "")
        console.print(t)


if __name__ == "__main__":
    sys.exit(main())
