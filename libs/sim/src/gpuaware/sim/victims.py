"""What preemption and resizing cost the jobs they hit, as pure functions over what happened to each pod.

A *job* is a gang (its pods share a ``gang_id``) or a lone pod. It runs while at least its minimum of
workers is bound (``JobShape.min_members``; an elastic job may hold up to ``max_members``). From its
pods' bound intervals (``metrics.PodRecord``) ``job_lives`` reads, change by change (every pod event at
one instant is one change):

* a **preemption**: the job fell below its minimum and no member finished then (it stopped and waits
  again);
* a **shrink**: members were preempted and it kept running on fewer (at or above its minimum);
* a **grow**: members were bound while it was running.

A *victim* is a job preempted or shrunk at least once. Its **slowdown** is its JCT over its JCT without
the preemption: ``(end - arrival) / (alone finish - arrival)``, where *alone finish* is when the same
job would have finished had no worker of it been taken back - from its first start it keeps the most
workers it has reached, progressing at ``workers / max_members`` of full speed (the twin's elastic
progress; a fixed-width job: first start + work), ``work`` being the seconds of work it asks (its
pods' ``duration``: the job's work at full width). Everything beyond that - waiting again, work redone
since its last checkpoint, restarts and resizes, running on fewer workers after a shrink - is what the
preemptions cost it. A victim unfinished at the horizon counts with a lower bound, as queue delays do in
``metrics``: ``(horizon - arrival + work not yet done) / (alone finish - arrival)``, so a scheduler that
never lets a victim finish does not look better for it.

Finish-time fairness (Themis, NSDI'20) asks the same of every job: ``rho = JCT / JCT alone on 1/N of the
cluster``, N the tenants of the run; alone, a job as wide as its 1/N or narrower runs its work at full
width, a wider one time-shares its 1/N (``work x GPUs / (capacity / N)``). rho > 1: the job did worse
than on a private 1/N slice. Unfinished jobs count with the same lower bound as victims.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaware.schemas import percentile
from gpuaware.sim.metrics import PodRecord

__all__ = ["JobLife", "JobShape", "finish_time_fairness", "job_lives", "slowdown", "victim_costs"]


@dataclass(frozen=True, slots=True)
class JobShape:
    """Which job a pod works for, and how many workers that job runs on."""

    job: str
    min_members: int = 1
    max_members: int = 1
    """more than ``min_members``: elastic"""

    def __post_init__(self) -> None:
        if self.min_members < 1 or self.max_members < self.min_members:
            raise ValueError(f"job {self.job}: members {self.min_members}..{self.max_members}")

    @property
    def elastic(self) -> bool:
        return self.max_members > self.min_members


@dataclass(frozen=True, slots=True)
class JobLife:
    """One job's run, read from its pods' intervals (see the module docstring)."""

    job: str
    klass: str
    tenant: str
    elastic: bool
    gpus: float
    """GPUs it asks at its widest (all its workers)"""
    arrival: float
    work_s: float | None
    """seconds of work it asks (None: unknown)"""
    first_start: float | None
    """when it first ran (its minimum bound); None: never"""
    finished: float | None
    """when its last bound workers finished; None: not by the horizon"""
    ran_s: float
    """seconds it ran (at or above its minimum) before the horizon"""
    progress_s: float
    """work done before the horizon, at most (seconds at full width: its workers / ``max_members`` of each
    second it ran; less where work was lost to a restart)"""
    alone_finish: float | None
    """when it would have finished without preemption (``_alone_finish``); None: never ran, or unknown work"""
    preemptions: int
    grows: int
    shrinks: int

    @property
    def victim(self) -> bool:
        return self.preemptions > 0 or self.shrinks > 0


def job_lives(pods: Iterable[PodRecord], shapes: Mapping[str, JobShape], horizon: float) -> list[JobLife]:
    """Every job's life; a pod without an entry in ``shapes`` (keyed by pod uid) is a job of its own."""
    members: dict[str, list[PodRecord]] = {}
    shape_of: dict[str, JobShape] = {}
    for p in pods:
        shape = shapes.get(p.uid) or JobShape(p.uid)
        members.setdefault(shape.job, []).append(p)
        shape_of.setdefault(shape.job, shape)
    return [_life(job, shape_of[job], ps, horizon) for job, ps in members.items()]


def _life(job: str, shape: JobShape, pods: Sequence[PodRecord], horizon: float) -> JobLife:
    changes: dict[float, list[tuple[int, str]]] = {}
    for p in pods:
        for k, (start, end) in enumerate(p.intervals):
            changes.setdefault(start, []).append((1, "bound"))
            if end is not None:
                last = k == len(p.intervals) - 1
                kind = "finished" if last and p.finished is not None and end == p.finished else "preempted"
                changes.setdefault(end, []).append((-1, kind))
    bound = preemptions = grows = shrinks = 0
    first_start: float | None = None
    finished: float | None = None
    steps: list[tuple[float, int]] = []  # (instant, workers bound from then on)
    for t in sorted(changes):
        kinds = {kind for _, kind in changes[t]}
        after = bound + sum(d for d, _ in changes[t])
        was, now = bound >= shape.min_members, after >= shape.min_members
        if was and not now:
            preemptions += "preempted" in kinds and "finished" not in kinds
        elif was and now:
            shrinks += after < bound and "preempted" in kinds
            grows += after > bound
        elif now and first_start is None:
            first_start = t
        bound = after
        steps.append((t, after))
        # done when its last workers left by finishing (workers taken back before stay pending)
        finished = t if after == 0 and "finished" in kinds else None
    works = [p.duration for p in pods if p.duration is not None]
    work = max(works) if works else None
    ran = progress = 0.0
    for (t, n), (nxt, _) in itertools.pairwise([*steps, (horizon, 0)]):
        if n >= shape.min_members and t < horizon:
            span = min(nxt, horizon) - t
            ran += span
            progress += span * min(1.0, n / shape.max_members)
    return JobLife(
        job=job, klass=pods[0].klass, tenant=pods[0].tenant, elastic=shape.elastic,
        gpus=sum(p.gpu_milli_total for p in pods) / 1000, arrival=min(p.arrival for p in pods), work_s=work, first_start=first_start, finished=finished,
        ran_s=ran, progress_s=progress, alone_finish=_alone_finish(steps, first_start, work, shape.max_members),
        preemptions=preemptions, grows=grows, shrinks=shrinks)


def _alone_finish(steps: Sequence[tuple[float, int]], first_start: float | None, work: float | None,
                  max_members: int) -> float | None:
    """When the job would have finished had none of its workers been taken back: from its first start
    it keeps the most workers it has reached (grows still happen when they did), progressing at
    workers / max_members of full speed."""
    if first_start is None or not work:
        return None
    left, width, t = work, 0, first_start
    for at, n in steps:
        if at < first_start:
            continue
        rate = min(1.0, width / max_members)
        if rate > 0 and t + left / rate <= at:
            return t + left / rate
        left -= rate * (at - t)
        t, width = at, max(width, n)
    return t + left / min(1.0, width / max_members)


def slowdown(life: JobLife, horizon: float) -> float | None:
    """JCT / JCT without preemption (a lower bound while unfinished); None when it never ran or its
    work is unknown."""
    if life.alone_finish is None or life.first_start is None or life.work_s is None:
        return None
    alone = life.alone_finish - life.arrival
    if alone <= 0:
        return None
    if life.finished is not None:
        return (life.finished - life.arrival) / alone
    return (max(horizon, life.first_start) - life.arrival + max(0.0, life.work_s - life.progress_s)) / alone


def _jct_at_least(life: JobLife, horizon: float) -> float | None:
    """Its JCT, or while unfinished the least it can be (the horizon - arrival + the work not yet done)."""
    if life.finished is not None:
        return life.finished - life.arrival
    if life.work_s is None or life.arrival > horizon:
        return None
    return horizon - life.arrival + max(0.0, life.work_s - life.progress_s)


def finish_time_fairness(lives: Iterable[JobLife], capacity_gpus: float, horizon: float) -> dict[str, Any]:
    """Themis' rho over the jobs with known work (see the module docstring): p50, p95, max, and N (every
    tenant with a job arrived by the horizon)."""
    arrived = [j for j in lives if j.arrival <= horizon]
    n = len({j.tenant for j in arrived})
    lives = [j for j in arrived if j.work_s]
    if not lives or capacity_gpus <= 0:
        return {"tenants": n, "jobs": 0, "unfinished": 0, "p50": None, "p95": None, "max": None}
    slice_gpus = capacity_gpus / n
    rhos = []
    for j in lives:
        alone = (j.work_s or 0.0) * max(1.0, j.gpus / slice_gpus)
        jct = _jct_at_least(j, horizon)
        if jct is not None and alone > 0:
            rhos.append(jct / alone)
    return {"tenants": n, "jobs": len(rhos), "unfinished": sum(1 for j in lives if j.finished is None),
            **_stats(rhos)}


def _stats(xs: Sequence[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p95": None, "max": None}
    return {"p50": percentile(xs, 50), "p95": percentile(xs, 95), "max": max(xs)}


def victim_costs(lives: Iterable[JobLife], horizon: float) -> dict[str, Any]:
    """The victims' slowdown distribution (all and per class: victims, finished, p50 / p95 / max),
    preemptions per job (most, jobs preempted more than twice) and the elastic jobs' resizes."""
    lives = list(lives)
    victims = [j for j in lives if j.victim]
    by_class: dict[str, list[JobLife]] = {}
    for j in victims:
        by_class.setdefault(j.klass, []).append(j)

    def figures(js: Sequence[JobLife]) -> dict[str, Any]:
        xs = [x for j in js if (x := slowdown(j, horizon)) is not None and math.isfinite(x)]
        return {"victims": len(js), "finished": sum(1 for j in js if j.finished is not None), **_stats(xs)}

    elastic = [j for j in lives if j.elastic]
    return {
        "all": figures(victims),
        "by_class": {k: figures(js) for k, js in sorted(by_class.items())},
        "preempted_jobs": sum(1 for j in lives if j.preemptions),
        "shrunk_jobs": sum(1 for j in lives if j.shrinks),
        "preemptions": sum(j.preemptions for j in lives),
        "preemptions_per_job_max": max((j.preemptions for j in lives), default=0),
        "jobs_preempted_more_than_twice": sum(1 for j in lives if j.preemptions > 2),
        "resizes": {"grows": sum(j.grows for j in lives), "shrinks": sum(j.shrinks for j in lives),
                    "elastic_jobs": len(elastic), "elastic_jobs_resized": sum(1 for j in elastic
                                                                                if j.grows or j.shrinks)},
    }
