"""Fairness benchmark: FIFO, priority only, and quota's fair share side by side.

What it replays, on one 64-GPU cluster (the Pollux artifact's size), at 0.5 / 1.0 / 1.5 / 2.0x load:
  * **philly**: real jobs of ``pollux/traces/philly.csv`` (loaded with ``gpuaware.sim.workload_gen.
    load_philly``: GPUs, recorded duration, virtual cluster = tenant). The trace is a cluster of
    thousands of GPUs, so ``160 x load`` jobs are drawn (seeded) from one week (2017-10-02 .. 09) and
    their submissions mapped, in order, into 8 hours -- the Pollux artifact's own recipe for its
    64-GPU workloads (160 jobs / 8 h at 1.0x). Jobs wider than the cluster are dropped (counted).
    Drawn by count, that week is mostly short one-GPU jobs: at 0.5x and 1.0x the 64 GPUs never fill
    (no contended hour; every policy gives the same schedule), and the makespan is set by the
    trace's multi-day jobs (up to 600 h), not by scheduling. The contended Philly cases are 1.5x/2.0x.
  * **pollux**: the artifact's workloads (``workloads-0.5``, ``workloads``, ``-1.5``, ``-2.0``; 8 each):
    submit time and GPUs (``num_replicas``) as given; tenant = application. The artifact has no
    fixed-GPU durations (its simulator derives progress from throughput curves), so a job's duration
    is the *shortest* JCT any of the three published policies got for it at that load
    (``results-jobload``) -- a proxy, an upper bound on its isolated run time.
Classes: Philly and Pollux carry no priorities; a seeded 20 % of jobs are the high class (production,
priority 1), the rest low (research, priority 0). Every job is checkpointable with a checkpoint every
15 minutes and pays 60 s to restart after a preemption. What a preemption loses depends on who
preempts: stock preemption (``priority``) loses the work since the last periodic checkpoint; gpuaware
(``quota*``) has the binder ask the victim for a checkpoint first (the checkpoint handshake), so it
loses only the 30 s the save takes.

Policies (one scheduling pass after every arrival, completion and preemption; first fit in the
policy's order over a GPU pool -- GPU counts only, no node packing: the ordering of waiting jobs is the
subject here, and placement's packing is measured by bench-placement):
  * ``fifo``: submission order, no preemption;
  * ``priority``: high class first, then submission; a high-class job that does not fit preempts
    low-class jobs (newest first), as kube-scheduler's priority preemption does;
  * ``quota``: gpuaware.quota -- every tenant a leaf queue under one root, equal weights, guaranteed
    floor(64 / tenants) GPUs; high class first, then tenants by decayed weighted dominant share
    (``QuotaLedger.order_key``, half-life 1 h), FIFO within a tenant; a high-class job that does not fit
    reclaims low-class work, a tenant inside its guarantee reclaims from borrowers
    (``gpuaware.quota.reclaim_plan``: lower priority first, checkpointable first, least progress at risk --
    the work since the job's last 15-minute checkpoint, told to the ledger as the binder tells quota).
    Within its class, a preempted job resumes before every job that never started.
  * ``quota+backfill``: the same, but waiting jobs start by EASY backfilling (gpuaware.quota.backfill)
    instead of first fit: the head job gets a reservation at its shadow time, later jobs start only if
    they end before it or fit in the extra GPUs; durations are predicted online (the median of the
    tenant's finished jobs once it has three, 6 h before: no oracle), and only the head job reclaims.
  * ``quota+turns``: ``quota`` plus turn-taking (gpuaware.quota.turns): a tenant short of its
    water-filled share for a while (decayed mean shortfall >= 0.1 of its share, half-life 1 h) starts
    its narrowest waiting job by stopping pods of tenants at or above their share that are not owed a
    turn, of any class (the low class first), each having run at least 15 minutes since it last
    started; checked after every event and every 5 minutes. This is what lets a tenant whose jobs are
    all wider than its share (Pollux's imagenet: 24-48 GPUs against about 11) be served on average;
    the cost is more, cheap preemptions. The two settings (due 0.1, a 15-minute lease) are
    gpuaware.quota.turns' defaults; bench/results/fairness.md has the sweep that chose them and the
    variants measured before.
Why not ``gpuaware.sim.online.run_online``: its pending order is fixed (QoS, arrival) and it has no
preemption, which are exactly what is compared here; the loop below is the smallest one that has both.

Reported per source, load and policy: Jain's index over tenants (equal weights) in hourly windows
(min(1, GPU-hours held / water-filled entitlement given the window's demand), mean over windows with
at least two tenants asking, and over the windows where demand exceeded the cluster), p99 queue
delay of the high class (goal: >= 50 % below FIFO's, the no-preemption baseline), the JCT increase
of preempted low-class jobs two ways -- against the same job under FIFO (reordering included), and
what preemption itself added (work redone, restarts, waiting again; over the JCT without them) --,
average JCT and makespan, with the published Tiresias/Pollux figures beside
(``PUBLISHED_NUMBERS.md``). Every figure of Pollux is the mean over its 8 workloads; the goals are
judged on those means (for the JCT increases, the mean of each workload's median). The increases are
also given as one median over every preempted job of the 8 workloads
(``preempted_low_jct_increase_pooled``): at 0.5x a workload has a few preempted jobs, so its own
median is noisy. One CSV per source, policy and load (row per job: job, tenant, gpus, submit, start,
end, preemptions) beside bench/results/fairness.json.
Also: the admission decision's latency (QuotaLedger.admit, what quota.admit runs) with 1,000 /
10,000 / 50,000 running pods.

Run: ``make bench-fairness`` or ``.venv/bin/python bench/fairness.py`` (data via GPUAWARE_SHARED_DATA).
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average
from machine_info import machine as shared_machine
from rich.console import Console
from rich.table import Table

from gpuaware.quota import (
    Allocation,
    Demand,
    QuotaLedger,
    Running,
    TurnTaking,
    Waiting,
    easy_backfill,
    fair_reclaim_plan,
    reclaim_plan,
    validate,
    water_fill,
)
from gpuaware.schemas import percentile
from gpuaware.sim import load_philly, shared_data_dir

OUT = RESULTS_DIR
GPUS = 64
LOADS = (0.5, 1.0, 1.5, 2.0)
POLICIES = ("fifo", "priority", "quota", "quota+backfill", "quota+turns")
OURS = ("quota", "quota+turns")
"""the gpuaware policies the goals are judged on"""
PREDICT_DEFAULT_S = 6 * 3600.0
"""the conservative duration a job is predicted to run before its tenant has three finished jobs"""
CHECKPOINT_EVERY_S = 900.0
CHECKPOINT_SAVE_S = 30.0
"""a checkpoint asked for at preemption (the binder's handshake) takes this long: the run's last seconds are lost"""
RESTART_S = 60.0
TURN_DUE = 0.1
TURN_LEASE_S = 900.0
TURN_TICK_S = 300.0
HIGH_SHARE = 0.2
HALF_LIFE_S = 3600.0
PHILLY_WEEK = ("2017-10-02", "2017-10-09")
TIRESIAS = {0.5: (0.58, 13.0), 1.0: (1.12, 24.2), 1.5: (1.72, 31.6), 2.0: (2.79, 40.4)}  # avg JCT h, makespan h
POLLUX = {0.5: (0.43, 10.6), 1.0: (0.76, 16.8), 1.5: (1.02, 20.5), 2.0: (1.47, 25.7)}


@dataclass(slots=True)
class Job:
    name: str
    tenant: str
    gpus: int
    submit: float
    duration: float
    priority: int = 0
    # simulation state
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

    @property
    def left(self) -> float:
        return self.duration - self.done_work


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


def load_pollux_jobs(folder: Path, results: Path, load: float) -> list[tuple[str, list[Job]]]:
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
                        jcts[(w, r["name"])]) for r in csv.DictReader(h)]
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


class Sim:
    """One replay: events are arrivals, completions (versioned: a preempted run's completion is stale)."""

    def __init__(self, jobs: list[Job], policy: str, half_life_s: float = HALF_LIFE_S) -> None:
        self.jobs = jobs
        self.policy = policy
        self.free = GPUS
        self.running: dict[str, Job] = {}
        self.pending: list[Job] = []
        self.events: list[tuple[float, int, int, str]] = []
        self.by_name = {j.name: j for j in jobs}
        for i, j in enumerate(jobs):
            heapq.heappush(self.events, (j.submit, 1, i, j.name))
        tenants = sorted({j.tenant for j in jobs})
        self.ledger = QuotaLedger(quota_tree(tenants, half_life_s)) if policy.startswith("quota") else None
        self.turns = TurnTaking(half_life_s, TURN_DUE, TURN_LEASE_S) if policy == "quota+turns" else None
        self.finished_s: dict[str, list[float]] = {}
        self.windows = Windows(tenants)
        self.now = 0.0

    def start(self, j: Job) -> None:
        j.version += 1
        if j.start is None:
            j.start = self.now
        if j.preempted_at is not None:
            j.requeued_s += self.now - j.preempted_at
            j.preempted_at = None
        j.run_start = self.now
        self.free -= j.gpus
        self.running[j.name] = j
        if self.ledger is not None:
            self.ledger.bind(Allocation(j.name, j.tenant, Demand.of(gpus=j.gpus, gpu_milli=1000 * j.gpus),
                                        started_at=self.now, priority=j.priority, checkpointable=True,
                                        last_checkpoint_at=None), now=self.now)
        restart = RESTART_S if j.preemptions else 0.0
        heapq.heappush(self.events, (self.now + restart + j.left, 0, j.version, j.name))

    def stop(self, j: Job, finished: bool) -> None:
        del self.running[j.name]
        self.free += j.gpus
        if self.ledger is not None:
            self.ledger.release(j.name, self.now)
        if finished:
            if j.preemptions:  # the last resume's restart: a preempted run's is counted below
                j.lost_s += RESTART_S
            j.done_work = j.duration
            j.end = self.now
            self.finished_s.setdefault(j.tenant, []).append(j.duration)
            return
        restart = RESTART_S if j.preemptions else 0.0
        ran = max(0.0, self.now - j.run_start - restart)
        if self.ledger is not None:  # gpuaware: the binder asks for a checkpoint before it preempts
            kept = max(0.0, ran - CHECKPOINT_SAVE_S)
        else:  # stock preemption: the work since the last periodic checkpoint is lost
            kept = math.floor(ran / CHECKPOINT_EVERY_S) * CHECKPOINT_EVERY_S
        j.lost_s += ran - kept + min(restart, self.now - j.run_start)
        j.done_work += kept
        j.preemptions += 1
        j.version += 1
        j.preempted_at = self.now
        self.pending.append(j)

    def order(self) -> list[Job]:
        if self.policy == "fifo":
            return sorted(self.pending, key=lambda j: (j.submit, j.name))
        if self.policy == "priority":
            return sorted(self.pending, key=lambda j: (-j.priority, j.submit, j.name))
        keys = {t: self.ledger.order_key(t, self.now) for t in {j.tenant for j in self.pending}}  # type: ignore[union-attr]  # fair-share policies always have a ledger
        # within its class, a preempted job resumes before every job that never started
        return sorted(self.pending, key=lambda j: (-j.priority, not j.preemptions, keys[j.tenant], j.submit, j.name))

    def victims(self, j: Job) -> list[Job] | None:
        """Whom to stop so that ``j`` starts, or None."""
        need = j.gpus - self.free
        if self.policy == "fifo" or need <= 0:
            return None
        if self.policy == "priority":
            if j.priority == 0:
                return None
            low = sorted((r for r in self.running.values() if r.priority < j.priority),
                         key=lambda r: (-r.run_start, r.name))
            return _enough(low, need)
        # quota: inside the guarantee -> reclaim from borrowers; below the fair share -> fair reclaim;
        # priority preempts only inside the tenant (a high class does not take another tenant's share)
        ledger = self.ledger
        assert ledger is not None
        for r in self.running.values():  # the periodic checkpoints so far, as the binder reports them
            began = r.run_start + (RESTART_S if r.preemptions else 0.0)
            if self.now - began >= CHECKPOINT_EVERY_S:
                ledger.checkpointed(r.name, began + (self.now - began) // CHECKPOINT_EVERY_S * CHECKPOINT_EVERY_S)
        d = Demand.of(gpus=j.gpus, gpu_milli=1000 * j.gpus)
        if ledger.within_guarantee(j.tenant, d, self.now):
            plan, _ = reclaim_plan(ledger, j.tenant, d, self.now)
        else:
            plan = fair_reclaim_plan(ledger, j.tenant, d, self.asked(), self.now)
        if plan is not None:
            vs = [self.by_name[a.uid] for a in plan]
            if all(v.priority <= j.priority for v in vs):
                return vs
        if j.priority > 0:
            own = sorted((r for r in self.running.values() if r.tenant == j.tenant and r.priority < j.priority),
                         key=lambda r: ((self.now - r.run_start) % CHECKPOINT_EVERY_S, -r.run_start))
            return _enough(own, need)
        return None

    def predict(self, j: Job) -> float:
        """The job's run time as an online predictor would say: the median of its tenant's finished
        jobs once there are three, the conservative default before (no oracle)."""
        done = self.finished_s.get(j.tenant, [])
        return float(np.median(done)) if len(done) >= 3 else PREDICT_DEFAULT_S

    def schedule_backfill(self) -> None:
        """EASY backfilling in the policy's order (gpuaware.quota.backfill); the head job may reclaim."""
        for _ in range(len(self.pending) + 1):
            order = self.order()
            running = [Running(r.gpus, r.run_start + max(self.predict(r) - r.done_work, 1.1 * (self.now - r.run_start)))
                       for r in self.running.values()]
            keys = easy_backfill(self.free, running, [Waiting(j.name, j.gpus) for j in order], self.now,
                                 lambda k: self.predict(self.by_name[k]))
            started = set(keys)
            for k in keys:
                j = self.by_name[k]
                self.pending.remove(j)
                self.start(j)
            head = next((j for j in order if j.name not in started), None)
            if head is None:
                return
            vs = self.victims(head)
            if vs is None or sum(v.gpus for v in vs) + self.free < head.gpus:
                return
            for v in vs:
                self.stop(v, finished=False)
            self.pending.remove(head)
            self.start(head)

    def asked(self) -> dict[str, float]:
        """GPU milli each tenant runs and waits for."""
        out: dict[str, float] = {}
        for r in [*self.running.values(), *self.pending]:
            out[r.tenant] = out.get(r.tenant, 0.0) + 1000.0 * r.gpus
        return out

    def take_turns(self) -> bool:
        """One turn (gpuaware.quota.turns): the most owed tenant's narrowest waiting job starts, taking
        GPUs from tenants at or above their share not owed a turn. False when no tenant is due or none
        can take one."""
        turns, ledger = self.turns, self.ledger
        assert turns is not None and ledger is not None
        shares = turns.update(ledger, self.asked(), self.now)
        for t in turns.due_queues(ledger, shares):
            head = min((j for j in self.pending if j.tenant == t), key=lambda j: (j.gpus, j.submit, j.name),
                       default=None)
            if head is None or head.gpus <= self.free:
                continue
            plan = turns.plan(ledger, t, Demand.of(gpus=head.gpus, gpu_milli=1000 * head.gpus), shares, self.now)
            if plan is None:
                continue
            for a in plan:
                self.stop(self.by_name[a.uid], finished=False)
            self.pending.remove(head)
            self.start(head)
            return True
        return False

    def schedule(self) -> None:
        if self.policy == "quota+backfill":
            self.schedule_backfill()
            return
        self.schedule_first_fit()
        if self.turns is not None:
            while self.take_turns():
                self.schedule_first_fit()
            self.turns.update(self.ledger, self.asked(), self.now)  # type: ignore[arg-type]  # turns are on only with a ledger

    def schedule_first_fit(self) -> None:
        for j in self.order():
            if j.gpus <= self.free:
                self.pending.remove(j)
                self.start(j)
                continue
            vs = self.victims(j)
            if vs is not None and sum(v.gpus for v in vs) + self.free >= j.gpus:
                for v in vs:
                    self.stop(v, finished=False)
                self.pending.remove(j)
                self.start(j)
            if self.free == 0:
                break

    def run(self) -> list[Job]:
        if self.turns is not None:
            heapq.heappush(self.events, (TURN_TICK_S, 2, 0, ""))
        while self.events:
            t, kind, version, name = heapq.heappop(self.events)
            if kind == 2:  # turns are also taken between arrivals and completions
                self.windows.advance(self.now, t, self.running.values(), self.pending)
                self.now = t
                self.schedule()
                if self.pending or self.running or self.events:
                    heapq.heappush(self.events, (t + TURN_TICK_S, 2, 0, ""))
                continue
            j = self.by_name[name]
            if kind == 0 and (version != j.version or name not in self.running):
                continue  # the completion of a run that was preempted
            self.windows.advance(self.now, t, self.running.values(), self.pending)
            self.now = t
            if kind == 1:
                self.pending.append(j)
            else:
                self.stop(j, finished=True)
            if self.events and self.events[0][0] == t:
                continue  # simultaneous events: one scheduling pass after all of them
            self.schedule()
        unfinished = [j for j in self.jobs if j.end is None]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} jobs never finished under {self.policy}")
        return self.jobs


def _enough(cands: list[Job], need: int) -> list[Job] | None:
    out, freed = [], 0
    for r in cands:
        if freed >= need:
            break
        out.append(r)
        freed += r.gpus
    return out if freed >= need else None


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
            held[self.index[j.tenant]] += j.gpus
            asked[self.index[j.tenant]] += j.gpus
        for j in pending:
            asked[self.index[j.tenant]] += j.gpus
        h = int(t0 // 3600)
        while t0 < t1:
            edge = min(t1, (h + 1) * 3600.0)
            self.held.setdefault(h, np.zeros(len(self.tenants)))[:] += held * (edge - t0)
            self.asked.setdefault(h, np.zeros(len(self.tenants)))[:] += asked * (edge - t0)
            t0, h = edge, h + 1

    def jain(self) -> dict[str, float | int | None]:
        from gpuaware.quota import jain_index, normalised_shares
        every, contended = [], []
        for h, asked in sorted(self.asked.items()):
            demand = {t: asked[i] / 3600 for i, t in enumerate(self.tenants) if asked[i] > 0}
            if len(demand) < 2:
                continue
            ent = water_fill(GPUS, demand, {})
            got = {t: self.held[h][self.index[t]] / 3600 for t in demand}
            v = jain_index(normalised_shares(got, ent))
            every.append(v)
            if sum(demand.values()) > GPUS:
                contended.append(v)
        return {"mean": _r(np.mean(every)) if every else None, "windows": len(every),
                "mean_contended": _r(np.mean(contended)) if contended else None, "contended_windows": len(contended),
                "min": _r(np.min(every)) if every else None}


def _r(x: float, n: int = 4) -> float:
    return round(float(x), n)


def metrics(jobs: list[Job], windows: Windows, fifo_jct: dict[str, float] | None) -> dict:
    jct = np.array([j.end - j.submit for j in jobs])  # type: ignore[operator]  # finished jobs have start and end
    high = np.array([j.start - j.submit for j in jobs if j.priority > 0])  # type: ignore[operator]  # finished jobs have start and end
    preempted = [j for j in jobs if j.preemptions and j.priority == 0]
    out = {
        "jobs": len(jobs),
        "avg_jct_h": _r(jct.mean() / 3600, 3),
        "p99_jct_h": _r(percentile(jct, 99) / 3600, 3),
        "makespan_h": _r((max(j.end for j in jobs) - min(j.submit for j in jobs)) / 3600, 3),  # type: ignore[type-var]  # finished jobs have start and end
        "high_class_p99_queue_delay_s": _r(percentile(high, 99), 1) if high.size else None,
        "jain": windows.jain(),
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


def replay(jobs: list[Job], policy: str, half_life_s: float = HALF_LIFE_S) -> tuple[list[Job], Windows]:
    fresh = [Job(j.name, j.tenant, j.gpus, j.submit, j.duration, j.priority) for j in jobs]
    sim = Sim(fresh, policy, half_life_s)
    return sim.run(), sim.windows


def write_csv(path: Path, jobs: list[Job]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "tenant", "gpus", "submit", "start", "end", "preemptions"])
        for j in sorted(jobs, key=lambda j: (j.submit, j.name)):
            w.writerow([j.name, j.tenant, j.gpus, round(j.submit, 1), round(j.start, 1), round(j.end, 1),  # type: ignore[arg-type]  # turns are on only with a ledger
                        j.preemptions])


def run_source(source: str, workloads: list[tuple[str, list[Job]]], load: float, seed: int,
               half_life_s: float = HALF_LIFE_S, out_dir: Path = OUT) -> dict:
    """Every policy over every workload of one load; metrics averaged over workloads."""
    per_policy: dict[str, list[dict]] = {p: [] for p in POLICIES}
    rows: dict[str, list[Job]] = {p: [] for p in POLICIES}
    every_fifo_jct: dict[str, float] = {}
    for k, (_, jobs) in enumerate(workloads):
        assign_classes(jobs, seed + k)
        fifo_jct = None
        for p in POLICIES:
            done, windows = replay(jobs, p, half_life_s)
            m = metrics(done, windows, fifo_jct)
            if p == "fifo":
                fifo_jct = {j.name: j.end - j.submit for j in done}  # type: ignore[operator]  # finished jobs have start and end
                every_fifo_jct.update(fifo_jct)
            per_policy[p].append(m)
            rows[p] += done
    out = {}
    for p in POLICIES:
        path = out_dir / f"fairness-{source}-{p}-{load:.1f}x.csv"
        write_csv(path, rows[p])
        out[p] = {**_mean_metrics(per_policy[p]), "csv": _shown(path)}
        # the same increases over every preempted job of every workload (a workload at 0.5x has a few)
        preempted = [j for j in rows[p] if j.preemptions and j.priority == 0]
        cost, ratio = increases(preempted, every_fifo_jct)
        if cost is not None and ratio is not None:
            out[p]["preempted_low_jct_increase_pooled"] = {
                "jobs": len(preempted), "from_preemption_median_pct": _r(100 * np.median(cost), 1),
                "vs_fifo_median_pct": _r(100 * np.median(ratio), 1)}
    return out


def _shown(path: Path) -> str:
    """Repository-relative when inside the repository (results files hold no machine paths)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


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
    ap.add_argument("--out", type=Path, default=OUT / "fairness.json")
    args = ap.parse_args(argv)
    console = Console()
    shared = shared_data_dir(ROOT)
    philly = shared / "pollux" / "traces" / "philly.csv"
    if not philly.is_file():
        console.print(f"[red]{philly} not found[/red]: set GPUAWARE_SHARED_DATA to the shared/data folder")
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report: dict = {"sources": {"philly": {}, "pollux": {}}}
    for load in LOADS:
        jobs, too_wide = load_philly_jobs(philly, load, args.seed)
        r = run_source("philly", [("philly", jobs)], load, args.seed, args.half_life_s, args.out.parent)
        r["dropped_wider_than_cluster_in_week"] = too_wide
        report["sources"]["philly"][f"{load:.1f}x"] = r
        folder = shared / "pollux" / ("workloads" if load == 1.0 else f"workloads-{load:.1f}")
        report["sources"]["pollux"][f"{load:.1f}x"] = run_source(
            "pollux", load_pollux_jobs(folder, shared / "pollux" / "results-jobload", load), load, args.seed, args.half_life_s,
            args.out.parent)
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
    report["settings"] = {"gpus": GPUS, "checkpoint_every_s": CHECKPOINT_EVERY_S, "restart_s": RESTART_S,
                          "checkpoint_save_s": CHECKPOINT_SAVE_S, "turn_due": TURN_DUE, "turn_lease_s": TURN_LEASE_S,
                          "turn_tick_s": TURN_TICK_S,
                          "high_class_share": HIGH_SHARE, "half_life_s": args.half_life_s, "seed": args.seed,
                          "philly_week": PHILLY_WEEK}
    report["machine"] = {**shared_machine("numpy", "msgspec"), "load_average": load_average()}
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["command"] = "make bench-fairness"
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    show(console, report)
    return 0


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
                by[p] = {
                    "jain_contended_ge_0.95": None if jc is None else jc >= 0.95,
                    "high_p99_delay_50pct_below_fifo": None if not fd else qd <= 0.5 * fd,
                    "preempted_low_jct_increase_vs_fifo_le_10pct": None if inc is None else inc <= 10.0,
                    "preempted_low_jct_increase_from_preemption_le_10pct": None if own is None else own <= 10.0,
                }
    return out


def show(console: Console, report: dict) -> None:
    for src, loads in report["sources"].items():
        t = Table(title=f"fairness: {src} on {GPUS} GPUs")
        for c in ("load", "policy", "Jain (contended)", "Jain (all)", "high p99 delay s", "avg JCT h",
                  "makespan h", "preemptions", "preempted low JCT +% (median)"):
            t.add_column(c)
        for load, r in loads.items():
            for p in POLICIES:
                m = r[p]
                inc = (m.get("preempted_low_jct_increase_vs_fifo_pct") or {}).get("median")
                t.add_row(load, p, str(m["jain"]["mean_contended"]), str(m["jain"]["mean"]),
                          str(m["high_class_p99_queue_delay_s"]), str(m["avg_jct_h"]), str(m["makespan_h"]),
                          str(m["preemptions"]), "-" if inc is None else str(inc))
            pub = report["published"]["tiresias_tj"][load]
            t.add_row(load, "Tiresias+TJ (published)", "", "", "", str(pub["avg_jct_h"]), str(pub["makespan_h"]), "", "")
        console.print(t)


if __name__ == "__main__":
    sys.exit(main())
