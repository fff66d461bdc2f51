"""Forecast head-room benchmark: does keeping the latency-sensitive classes' forecast demand free lower
their queue delay, and what does it cost? The same workload replayed with placement's head-room on and
off, in virtual time, through the production decision path.

Why a replay and not the demo: in ``make demo`` the twin runs at hundreds of times real time, so every
wall-clock second the pipeline takes (NATS, the binder, the forecasting service) is minutes of virtual
queue delay, and that noise swamps the head-room's effect. Here nothing runs on the wall clock.

What it replays: the demo's generator workload (``gpuaware.sim.generate(spec_for_cluster(...))``, the
demo's default 16-node cluster of 104 GPUs, ``elastic=False``), 24 virtual hours, seeds 7, 8, 9, loads
1.0, 1.4 and 1.8 -- each with head-room on and off, everything else the same (and the first rule, below).

How it decides: the placement service's own ``PlacementState`` (``gpuaware.services.placement.state``),
built as the service builds it (``handlers.py``) from ``PlacementSettings`` as the demo's gpuaware run
sets them (``gpuaware.cli.demo_config.service_env``: the ``GpuAware`` profile, preemption on, the
``fair-share`` queue order with turn-taking at the service's default, reclaim after 600 s, the
workload's request mix as the typical pods), with ``ForecastHeadroom`` first among its Permit plugins
when on and ``AdmittedAndStored`` last. The replay is the world around it and nothing more:

* the world is the digital twin (``gpuaware.sim.Twin``) and its messages are the binder's own
  translation (``TwinWorld``): arrivals and departures become ``PodPending`` / ``PodFinished``;
* every decision is allowed as soon as it is made (the service allows it once the stream stored it);
  then the binder's steps, in virtual time: each planned victim still bound is asked to checkpoint
  first when the plan says so and the pod can (the twin answers after 2-20 s, the binder's default
  range), and evicted then (progress kept when it checkpointed), the victim's next attempt pending at
  once; a victim that needs no checkpoint is evicted at once; the pod is bound when every victim is
  gone (``PodBound``), or the world refuses (``PodBindFailed``, a transient refusal re-queued);
* every event that may free capacity (a departure, an eviction, a failed bind, a forecast that
  shrinks the room) is followed by the service's retry passes (``PlacementState.retry``) until none
  has pods left to try, as its retry loop does;
* parked pods get a predicted runtime from the forecasting service's duration predictor
  (``gpuaware.forecast.DurationPredictor``, fed with the runtimes of the pods that finished), as the
  service asks it -- in both arms, so the head-room is the only difference;
* head-room on: the forecasting service's demand path, on the replay's own pod events -- a
  ``DemandBook`` of running + pending GPUs per queue and for the latency-sensitive classes
  (``inference-critical``, ``interactive``), and at every closed virtual minute a
  ``forecast.serving.Server`` step (no registry model: persistence, its p90 calibrated on each series'
  recent errors) whose ``DemandPredicted`` goes to ``PlacementState.apply_demand_forecast``; a room
  that shrank wakes a retry pass. The minute closes when the next pod event arrives, as in the service.

A third arm, ``summed-thousandths``, is the plugin's first rule, kept for the record and not production:
the same room compared with every free GPU thousandth summed over the cluster (``SummedHeadroom``),
slivers on shared GPUs included - a room that was never enforced. Production keeps it in whole free GPUs. Both head-room arms note, at every placement of work
that could wait while a room was kept, the room, the free thousandths the production plugin compares it
with and the whole free GPUs (``permits_with_room``); the production plugin's decisions are its own
(``ObservedHeadroom`` only looks).

Not in it: the quota service (the demo's run has one; without one nobody reclaims by quota and every
decision is admitted), elastic jobs, faults and GPU telemetry (the utilisation forecasts' score has no
signal), and pipeline latency of any kind: a decision reaches the world at the virtual instant it is
made. The planner's clock is the virtual one (a real cluster's, at speed 1), so its cool-downs and
leases are the virtual seconds the settings say.

Reported per case and arm: the latency-sensitive classes' (``inference``, ``interactive``) queue delay
(first start - arrival, virtual s; a pod still waiting at the end counts end - arrival, as the demo
counts it) p50 / p99 / mean and how many waited at all, the other classes' p50 / p99, the allocation
(time-weighted share of the cluster's GPUs the bound pods asked for, the demo's ``allocation.mean``),
placements the head-room held back (refusals, retries counted again, and distinct pods), preemptions,
bind failures; per case and head-room arm the p99 ratio against off and the allocation difference in
percentage points, against the product's goal (ratio <= 0.8 with allocation within 2 pp); per load the
same over the three seeds' pods pooled.

Run: ``make bench-headroom`` or ``.venv/bin/python bench/headroom.py`` (``--seeds 7 --loads 1.8 --arms on off``
for a quick look). Writes bench/results/headroom.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_paths import RESULTS_DIR, finite, shown
from machine_info import load_average, machine
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware.forecast import LATENCY_SENSITIVE, DemandBook, DurationPredictor, Server, class_key, fingerprint
from gpuaware.placement import MILLI, ForecastHeadroom, PermitVerdict, PodRequest, TypicalPods
from gpuaware.schemas import (
    CheckpointStatus,
    PlacementDecided,
    PlannedPreemption,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
    WorldSnapshotRequest,
    percentile,
)
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.services.binder.world import WorldRefused
from gpuaware.services.placement.permit import AdmittedAndStored
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, PlacementState, Rejected, Unschedulable
from gpuaware.sim import (
    Arrived,
    CheckpointAnswered,
    Finished,
    GpuLedger,
    PodRecord,
    SimPod,
    Twin,
    Withdrawn,
    default_cluster,
    generate,
    queue_delays,
    spec_for_cluster,
    time_weighted_mean,
)

OUT = RESULTS_DIR / "headroom.json"
SEEDS = (7, 8, 9)
LOADS = (1.0, 1.4, 1.8)
NODES = 16
WINDOW_S = 86400.0
EPOCH = 1_767_225_600.0
"""the demo's virtual start (2026-01-01T00:00:00Z): both arms' twins start their day here"""
CLUSTER = "bench-headroom"
LATENCY_KLASSES = ("inference", "interactive")
"""the generator's pod classes whose priority classes are the latency-sensitive ones"""
CHECKPOINT_DELAY_S = (2.0, 20.0)
"""how long the twin's pods take to answer a checkpoint request (the binder's default range)"""
GOAL_P99_RATIO = 0.8
GOAL_ALLOCATION_PP = 2.0
HEADROOM_REASON = "forecast_headroom"
ALLOW = PermitVerdict(True)
ON, OFF, SUMMED = "on", "off", "summed-thousandths"
ARMS = (ON, OFF, SUMMED)
"""the production head-room on and off, and its first rule ``SummedHeadroom`` (not production)"""


class ObservedHeadroom(ForecastHeadroom):
    """The production plugin, unchanged, noting what it saw at each placement of work that could wait
    while a room was kept: the room, the free thousandths it compares with it (``snap.gpu_free.sum()``),
    and the thousandths on GPUs with nothing on them (whole free GPUs)."""

    def __init__(self, classes: frozenset[str], horizon_s: float = 1800.0) -> None:
        super().__init__(classes, horizon_s)
        self.seen: list[tuple[int, int, int]] = []

    def _note(self, pod: PodRequest, snap: Any) -> None:
        if self.room_milli > 0 and pod.num_gpu and self.may_wait(pod):
            self.seen.append((self.room_milli, int(snap.gpu_free.sum()), int((snap.gpu_free >= MILLI).sum()) * MILLI))

    def permit(self, cycle: Any, pod: PodRequest, decision: Any, snap: Any) -> PermitVerdict:
        self._note(pod, snap)
        return super().permit(cycle, pod, decision, snap)


class SummedHeadroom(ObservedHeadroom):
    """The plugin's first rule, not production: the same room compared with every free thousandth in the
    cluster (``snap.gpu_free.sum()``), slivers left on shared GPUs included, which a whole-GPU serving
    replica cannot use. Kept to show why production counts whole free GPUs."""

    def permit(self, cycle: Any, pod: PodRequest, decision: Any, snap: Any) -> PermitVerdict:
        self._note(pod, snap)
        if self.room_milli <= 0 or not pod.num_gpu or not self.may_wait(pod):
            return ALLOW
        if int(snap.gpu_free.sum()) >= self.room_milli:
            return ALLOW
        self.held_back += 1
        return PermitVerdict(False, HEADROOM_REASON + ": GPUs kept free for the latency-sensitive classes' "
                             "forecast demand (summed thousandths: the first rule)")


def service_settings(seed: int, headroom: bool) -> PlacementSettings:
    """The placement service's settings as the demo's gpuaware run sets them (``service_env``'s placement
    block); ``headroom`` is its ``GPUAWARE_PLACEMENT_FORECAST_HEADROOM``."""
    return PlacementSettings(cluster=CLUSTER, seed=seed, preemption=True, queue_order="fair-share",
                             reclaim_min_runtime_s=600.0, forecast_headroom=headroom)


def typical_pods(pods: Sequence[SimPod]) -> TypicalPods:
    """The workload's request mix, as the demo writes it for placement (``write_typical_pods``) and the
    service reads it (``convert.typical_from_file``)."""
    counts: Counter[tuple[int, int, int, str]] = Counter()
    for p in pods:
        counts[(p.cpu_milli if p.cpu_milli > 0 else 100, p.num_gpu, p.gpu_milli if p.num_gpu else 0, "")] += 1
    return TypicalPods.from_counts(dict(counts))


def _done(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run one of ``TwinWorld``'s coroutines to its end: with the twin's clock as the world's clock they
    never wait on anything (the binder awaits them; nothing here needs a loop)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the twin's world waited on something")


class _TwinClock:
    """The world's clock for ``TwinWorld``: the twin's own time (the replay advances it), so the world
    never catches up on its own."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin

    def __call__(self) -> float:
        return self.twin.now

    def to_wall(self, world_s: float) -> float:
        return world_s

    def wall_delay(self, at: float) -> float:
        return max(0.0, at - self.twin.now)

    def skip_to(self, at: float) -> None:
        pass


@dataclass(order=True, slots=True)
class _Due:
    at: float
    seq: int
    kind: str = field(compare=False)
    """``evict`` (a planned victim, once its checkpoint is answered) or ``bind`` (the decided pod)"""
    decision: PlacementDecided = field(compare=False)
    victim: PlannedPreemption | None = field(compare=False, default=None)


@dataclass
class Arm:
    """What one replay measured."""

    seed: int
    load: float
    variant: str
    """``on``, ``off`` or ``summed-thousandths`` (the first rule)"""
    pods: int = 0
    arrived: dict[str, float] = field(default_factory=dict)
    """pod uid -> arrival (virtual s after the start)"""
    started: dict[str, float] = field(default_factory=dict)
    """pod uid -> first bind (virtual s after the start)"""
    klass: dict[str, str] = field(default_factory=dict)
    held_back: int = 0
    held_back_pods: set[str] = field(default_factory=set)
    preemptions: int = 0
    checkpointed: int = 0
    bind_failures: int = 0
    decisions: int = 0
    forecasts: int = 0
    room_times: list[float] = field(default_factory=list)
    room_gpus: list[float] = field(default_factory=list)
    allocation: float = math.nan
    wall_s: float = 0.0
    seen: list[tuple[int, int, int]] = field(default_factory=list)
    """(room, free thousandths, whole free GPUs' thousandths) at each placement of work that could wait
    while a room was kept"""

    def delays(self, latency: bool) -> list[float]:
        records = [PodRecord(uid=uid, klass=self.klass[uid], tenant="", gpu_milli_total=0, arrival=at,
                             intervals=((self.started[uid], None),) if uid in self.started else ())
                   for uid, at in self.arrived.items() if (self.klass[uid] in LATENCY_KLASSES) == latency]
        return queue_delays(records, WINDOW_S)


class Replay:
    """One arm of one case: the twin, the placement service's state, the binder's steps and (head-room
    on) the forecasting service's demand path, on one virtual clock (see the module docstring)."""

    def __init__(self, pods: Sequence[SimPod], seed: int, load: float, variant: str) -> None:
        headroom = variant != OFF
        nodes = default_cluster(NODES)
        self.twin = Twin(nodes, pods, start=EPOCH, seed=seed, cluster=CLUSTER, checkpoint_delay_s=CHECKPOINT_DELAY_S,
                         fleet=False)
        self.world = TwinWorld(self.twin, _TwinClock(self.twin), source="binder/bench")  # type: ignore[arg-type]  # the twin's own clock, not an accelerated one
        s = service_settings(seed, headroom)
        plugin = SummedHeadroom if variant == SUMMED else ObservedHeadroom
        self.headroom = plugin(s.latency_class_set, s.headroom_horizon_s) if s.forecast_headroom else None
        self.state = PlacementState(
            cluster_name=CLUSTER, source="placement/bench", policy_name=s.policy_name, policy_config=s.policy_config,
            clock=self.twin.clock, typical=typical_pods(pods), learn_typical=False,
            typical_min_pods=s.typical_min_pods, typical_window=s.typical_window, typical_drift=s.typical_drift,
            seed=s.seed, max_tombstones=s.max_tombstones, preemption=s.preemption,
            preemption_cooldown_s=s.preemption_cooldown_s, max_victims=s.max_victims,
            victim_min_run_s=s.victim_min_run_s, victim_max_requeues=s.victim_max_requeues or None,
            resize_hold_s=s.resize_hold_s, checkpoint_grace_s=s.checkpoint_grace_s,
            max_reservations=s.reservations,
            permits=(*((self.headroom,) if self.headroom is not None else ()), AdmittedAndStored()))
        self.retry_batch = s.retry_batch
        self.latency_classes = s.latency_class_set
        page = _done(self.world.snapshot(WorldSnapshotRequest(source="placement/bench", emitted_at=EPOCH,
                                                              cluster=CLUSTER, limit=5000)))
        self.state.apply_world(page)
        self.state.ensure_cluster()
        self.gpus = {g.uuid: g.memory_mib for g in self.twin.gpus.values()}
        self.ledger = GpuLedger(self.gpus)
        self.durations = DurationPredictor()
        self.jobs: dict[str, Any] = {}
        """pod uid -> its fingerprint (the forecasting service's ``jobs``)"""
        self.book = DemandBook(step_s=60.0) if headroom else None
        self.server = (Server(None, "", unusable="no demand model in this replay", quantiles=(0.5, 0.9))
                       if headroom else None)
        self.asked: set[tuple[str, int]] = set()
        self.answers: dict[str, CheckpointStatus] = {}
        self.due: list[_Due] = []
        self._seq = 0
        self.freed = False
        self.arm = Arm(seed, load, variant, pods=len(pods))
        self.asked_milli = {p.uid: p.gpu_milli for p in pods}

    @property
    def now(self) -> float:
        return self.twin.now

    def _push(self, at: float, kind: str, decision: PlacementDecided, victim: PlannedPreemption | None = None) -> None:
        self._seq += 1
        heapq.heappush(self.due, _Due(at, self._seq, kind, decision, victim))

    # -- the loop ----------------------------------------------------------------------------------------

    def run(self) -> Arm:
        t0 = time.perf_counter()
        end = EPOCH + WINDOW_S
        while True:
            nxt = self.twin.next_event_at()
            if self.due and (nxt is None or self.due[0].at < nxt):
                nxt = max(self.due[0].at, self.now)
            if nxt is None or nxt > end:
                break
            for ev in self.twin.advance(nxt):
                self.world_event(ev)
            while self.due and self.due[0].at <= self.now:
                d = heapq.heappop(self.due)
                if d.kind == "evict":
                    assert d.victim is not None
                    self.evict(d.decision, d.victim)
                else:
                    self.bind(d.decision)
            while self.freed:  # the service's retry loop: passes until none has pods left to try
                self.freed = False
                more = True
                while more:
                    outcomes, more = self.state.retry(self.retry_batch)
                    self.handle(outcomes)
        self.twin.advance(end)
        arm = self.arm
        samples = self.ledger.samples
        arm.allocation = time_weighted_mean([x.t - EPOCH for x in samples], [x.allocated for x in samples],
                                            0.0, WINDOW_S)
        if self.headroom is not None:
            arm.held_back = self.headroom.held_back
            arm.seen = list(self.headroom.seen)
        arm.wall_s = time.perf_counter() - t0
        self.state.ledger.check()
        self.twin.check()
        return arm

    # -- the world's events (the binder publishes them; placement and forecasting follow) ---------------

    def world_event(self, ev: Any) -> None:
        if isinstance(ev, CheckpointAnswered):
            self.answers[ev.request_id] = CheckpointStatus(ev.status)
            return
        msg, _ = self.world._message(ev)  # the binder's translation of the twin's event
        if isinstance(ev, Arrived):
            assert isinstance(msg, PodPending)
            self.arm.arrived[msg.pod_uid] = ev.at - EPOCH
            self.arm.klass[msg.pod_uid] = ev.pod.klass.value
            self.pending(msg)
        elif isinstance(ev, Finished | Withdrawn):
            assert isinstance(msg, PodFinished)
            self.ledger.release(msg.finished_at, msg.pod_uid)
            self.forecast_pod(msg)
            if self.state.apply_finished(msg):
                self.freed = True

    def pending(self, msg: PodPending) -> None:
        self.forecast_pod(msg)
        self.handle(self.state.on_pending(msg))

    # -- the forecasting service (its demand path, and its duration predictor) ---------------------------

    def forecast_pod(self, ev: PodPending | PodFinished | PodPreempted | PodBindFailed) -> None:
        """What the forecasting service's ``_on_pod`` does with a pod event, and (head-room on) each closed
        minute's ``_demand_step`` with its forecast applied by placement."""
        rows = []
        book = self.book
        if isinstance(ev, PodPending):
            self.jobs[ev.pod_uid] = fingerprint(ev.pod_name, ev.queue, "", ev.num_gpu)
            if book is not None:
                groups = (class_key(LATENCY_SENSITIVE),) if ev.priority_class in self.latency_classes else ()
                rows = book.pending(ev.pod_uid, ev.queue, ev.gpu_milli_total / 1000.0, ev.submitted_at, groups)
        elif isinstance(ev, PodFinished):
            fp = self.jobs.pop(ev.pod_uid, None)
            if fp is not None and ev.outcome == PodOutcome.SUCCEEDED and ev.started_at is not None:
                self.durations.observe(fp, ev.finished_at - ev.started_at)
            if book is not None:
                rows = book.left(ev.pod_uid, ev.finished_at)
        elif isinstance(ev, PodPreempted):
            if book is not None:
                rows = book.left(ev.pod_uid, ev.preempted_at, requeued=ev.requeued)
        elif book is not None:
            rows = book.left(ev.pod_uid, ev.failed_at, requeued=ev.transient)
        for row in rows:
            self.demand_step(row.start, row.demand)

    def demand_step(self, start: float, demand: dict[str, float]) -> None:
        assert self.server is not None and self.headroom is not None
        result = self.server.step_demand(start, CLUSTER, demand)
        issued = start + self.server.step_s
        for ev in self.server.demand_events(result, CLUSTER, issued, self.now, "forecasting/bench"):
            self.arm.forecasts += 1
            if self.state.apply_demand_forecast(ev, self.headroom):
                self.freed = True
        self.arm.room_times.append(self.now - EPOCH)
        self.arm.room_gpus.append(self.headroom.room_milli / 1000.0)

    # -- placement's outcomes, and the binder's steps ------------------------------------------------------

    def handle(self, outcomes: list[Any]) -> None:
        for o in outcomes:
            if isinstance(o, Decided):
                self.arm.decisions += 1
                self.state.allow(o.msg.pod_uid)  # stored: allowed (no quota service in this replay)
                self.dispatch(o.msg)
            elif isinstance(o, Unschedulable):
                m = o.msg
                if m.reason.startswith(HEADROOM_REASON):
                    self.arm.held_back_pods.add(m.pod_uid)
                self.predict(m.pod_uid, m.attempt)
            elif isinstance(o, Rejected):
                raise RuntimeError(f"placement rejected {o.msg.pod_uid}: {o.reason}")

    def predict(self, uid: str, attempt: int) -> None:
        """The service asks the duration predictor about each newly parked pod (``DurationAsker``)."""
        if (uid, attempt) in self.asked:
            return
        self.asked.add((uid, attempt))
        entry = self.state.ledger.pods.get(uid)
        if entry is None or not isinstance(entry.payload, PodPending):
            return
        p = entry.payload
        seconds, _ = self.durations.predict(fingerprint(p.pod_name, p.queue, "", p.num_gpu))
        self.state.planner.predict(uid, seconds)

    def dispatch(self, d: PlacementDecided) -> None:
        """The binder takes a decision: each planned victim still bound is asked to checkpoint when the
        plan says so and it can (evicted once it answered), or evicted at once; the pod binds after."""
        bind_at = self.now
        if self.twin.state(d.pod_uid) == "pending":
            for v in d.preemptions:
                if self.twin.state(v.pod_uid) != "bound":
                    continue
                at = self.now
                pod = self.twin.pod(v.pod_uid)
                if v.checkpoint_first and pod is not None and pod.checkpointable:
                    answer = self.twin.request_checkpoint(v.pod_uid, f"{d.decision_id}/{v.pod_uid}")
                    grace = v.grace_period_s if v.grace_period_s > 0 else 60.0
                    at = min(answer, self.now + grace)
                self._push(at, "evict", d, v)
                bind_at = max(bind_at, at)
        self._push(bind_at, "bind", d)

    def evict(self, d: PlacementDecided, v: PlannedPreemption) -> None:
        checkpointed = self.answers.pop(f"{d.decision_id}/{v.pod_uid}", None) == CheckpointStatus.COMPLETED
        try:
            preempted, pending = _done(self.world.evict(v, checkpointed=checkpointed, decision=d))
        except WorldRefused:
            return  # gone or moved meanwhile: skipped, as the binder skips it
        self.arm.preemptions += 1
        self.arm.checkpointed += preempted.checkpointed
        self.ledger.release(preempted.preempted_at, preempted.pod_uid)
        self.forecast_pod(preempted)
        if self.state.apply_preempted(preempted):
            self.freed = True
        if pending is not None:
            self.pending(pending)

    def bind(self, d: PlacementDecided) -> None:
        current = self.twin.binding(d.pod_uid)
        if current is not None and current.decision_id == d.decision_id:
            return
        try:
            bound: PodBound = _done(self.world.bind(d))
        except WorldRefused as refused:
            self.arm.bind_failures += 1
            failed = PodBindFailed(source="binder/bench", emitted_at=self.now, cluster=CLUSTER, pod_uid=d.pod_uid,
                                   pod_name=d.pod_name, namespace=d.namespace, node=d.node,
                                   decision_id=d.decision_id, reason=refused.reason, transient=refused.transient,
                                   failed_at=self.now, attempt=d.attempt)
            self.forecast_pod(failed)
            if self.state.apply_bind_failed(failed):
                self.freed = True
            if refused.transient:
                pending = _done(self.world.requeue(d.pod_uid))
                if pending is not None:
                    self.pending(pending)
            return
        self.arm.started.setdefault(bound.pod_uid, bound.bound_at - EPOCH)
        self.ledger.bind(bound.bound_at, bound.pod_uid, [(s.gpu_uuid, s.gpu_milli, s.memory_mib) for s in bound.slices],
                         self.asked_milli.get(bound.pod_uid, 1000))
        self.state.apply_bound(bound)


# -- figures -------------------------------------------------------------------------------------------


def _r(x: float | None, n: int = 1) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), n)


def delay_figures(delays: Sequence[float]) -> dict[str, Any]:
    return {"pods": len(delays), "p50_s": _r(percentile(delays, 50)), "p99_s": _r(percentile(delays, 99)),
            "mean_s": _r(sum(delays) / len(delays)) if delays else None,
            "waited": sum(d > 0 for d in delays), "waited_over_60s": sum(d > 60 for d in delays)}


def permit_figures(seen: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """What the head-room saw when work that could wait was placed while a room was kept."""
    rooms, free, whole = ([x[i] / MILLI for x in seen] for i in range(3))
    return {"placements": len(seen), "room_gpus_p50": _r(percentile(rooms, 50), 2),
            "free_gpus_min": _r(min(free), 2) if free else None, "free_gpus_p50": _r(percentile(free, 50), 2),
            "whole_free_gpus_min": _r(min(whole), 2) if whole else None,
            "whole_free_gpus_p50": _r(percentile(whole, 50), 2),
            "free_below_room": sum(f < r for r, f in zip(rooms, free, strict=True)),
            "whole_free_below_room": sum(w < r for r, w in zip(rooms, whole, strict=True))}


def arm_figures(arm: Arm) -> dict[str, Any]:
    room = (time_weighted_mean(arm.room_times, arm.room_gpus, 0.0, WINDOW_S) if arm.room_times else None)
    return {
        "latency_sensitive_delay": delay_figures(arm.delays(True)),
        "other_delay": delay_figures(arm.delays(False)),
        "allocation": _r(arm.allocation, 4),
        "held_back": arm.held_back, "held_back_pods": len(arm.held_back_pods),
        "room_gpus_mean": _r(room, 2),
        "permits_with_room": permit_figures(arm.seen) if arm.variant != OFF else None,
        "decisions": arm.decisions, "preemptions": arm.preemptions, "preemptions_checkpointed": arm.checkpointed,
        "bind_failures": arm.bind_failures, "demand_forecasts_applied": arm.forecasts,
        "pods": arm.pods, "arrived": len(arm.arrived), "started": len(arm.started),
        "wall_s": round(arm.wall_s, 1),
    }


def compare(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    p_on, p_off = on["latency_sensitive_delay"]["p99_s"], off["latency_sensitive_delay"]["p99_s"]
    ratio = p_on / p_off if p_on is not None and p_off else None
    a_on, a_off = on["allocation"], off["allocation"]
    pp = (a_on - a_off) * 100.0 if a_on is not None and a_off is not None else None
    return {"p99_ratio": _r(ratio, 3), "allocation_pp": _r(pp, 2),
            "p99_ratio_meets": None if ratio is None else ratio <= GOAL_P99_RATIO,
            "allocation_meets": None if pp is None else abs(pp) <= GOAL_ALLOCATION_PP,
            "met": None if ratio is None or pp is None else ratio <= GOAL_P99_RATIO and abs(pp) <= GOAL_ALLOCATION_PP}


def pooled(arms: Sequence[Arm]) -> dict[str, Any]:
    """The arms of several seeds as one: their pods' delays pooled, the allocation averaged."""
    ls = [d for a in arms for d in a.delays(True)]
    other = [d for a in arms for d in a.delays(False)]
    allocs = [a.allocation for a in arms if math.isfinite(a.allocation)]
    return {"latency_sensitive_delay": delay_figures(ls), "other_delay": delay_figures(other),
            "allocation": _r(sum(allocs) / len(allocs), 4) if allocs else None,
            "held_back": sum(a.held_back for a in arms), "held_back_pods": sum(len(a.held_back_pods) for a in arms),
            "preemptions": sum(a.preemptions for a in arms), "seeds": [a.seed for a in arms]}


def workload(seed: int, load: float) -> tuple[SimPod, ...]:
    """The demo's generator workload (``rebuild_workload`` with the generator and the default cluster)."""
    nodes = default_cluster(NODES)
    gpus = sum(n.num_gpu for n in nodes)
    spec = spec_for_cluster(gpus, load=load, duration_s=WINDOW_S,
                            available_models=tuple(sorted({n.gpu_model for n in nodes})), elastic=False)
    return generate(spec, seed)


def show(console: Console, report: dict[str, Any]) -> None:
    t = Table(title="forecast head-room: queue delay (virtual s), head-room on vs off; the first rule: summed thousandths")
    for c in ("load", "seed", "arm", "LS p50", "LS p99", "LS waited", "p99 ratio vs off", "other p50", "other p99",
              "alloc", "pp vs off", "held back (pods)", "goal met"):
        t.add_column(c)

    def rows(load: str, seed: str, by: dict[str, Any]) -> None:
        for variant in (v for v in ARMS if v in by["arms"]):
            a = by["arms"][variant]
            ls, other = a["latency_sensitive_delay"], a["other_delay"]
            cmp = by["compare"].get(variant, {})
            t.add_row(load, seed, variant, str(ls["p50_s"]), str(ls["p99_s"]), f"{ls['waited']}/{ls['pods']}",
                      str(cmp.get("p99_ratio", "")), str(other["p50_s"]), str(other["p99_s"]), str(a["allocation"]),
                      str(cmp.get("allocation_pp", "")), f"{a['held_back']} ({a['held_back_pods']})",
                      str(cmp.get("met", "")))

    for case in report["cases"]:
        rows(f"{case['load']:.1f}", str(case["seed"]), case)
    for load, agg in report["aggregate"].items():
        rows(load, "pooled", agg)
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), metavar="SEED")
    ap.add_argument("--loads", type=float, nargs="+", default=list(LOADS), metavar="LOAD")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS,
                    help="which arms to replay (default: all; off is always replayed: the others compare with it)")
    ap.add_argument("--out", type=Path, default=OUT, help="the JSON report (default: bench/results/headroom.json)")
    args = ap.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 200)
    seeds, loads = list(dict.fromkeys(args.seeds)), sorted(set(args.loads))
    variants = [v for v in ARMS if v in args.arms or v == OFF]
    t0 = time.perf_counter()
    cases: list[dict[str, Any]] = []
    arms: dict[tuple[float, str], list[Arm]] = {}
    with Progress(TextColumn("head-room {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("replays"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=len(variants) * len(seeds) * len(loads))
        for load in loads:
            for seed in seeds:
                pods = workload(seed, load)
                got: dict[str, dict[str, Any]] = {}
                for variant in variants:
                    bar.update(task, description=f"load {load:.1f} seed {seed} {variant}")
                    arm = Replay(pods, seed, load, variant).run()
                    arms.setdefault((load, variant), []).append(arm)
                    got[variant] = arm_figures(arm)
                    bar.advance(task)
                cases.append({"load": load, "seed": seed, "arms": got,
                              "compare": {v: compare(got[v], got[OFF]) for v in variants if v != OFF}})
                console.print(f"load {load:.1f} seed {seed}: latency-sensitive p99 "
                              + ", ".join(f"{v} {got[v]['latency_sensitive_delay']['p99_s']} s" for v in variants)
                              + f" ({time.perf_counter() - t0:.0f} s)")
    aggregate = {}
    for load in loads:
        pool = {v: pooled(arms[(load, v)]) for v in variants}
        here = [c for c in cases if c["load"] == load]
        aggregate[f"{load:.1f}x"] = {
            "arms": pool, "compare": {v: compare(pool[v], pool[OFF]) for v in variants if v != OFF},
            "per_seed": {v: {"p99_ratio": [c["compare"][v]["p99_ratio"] for c in here],
                             "allocation_pp": [c["compare"][v]["allocation_pp"] for c in here],
                             "met": [c["compare"][v]["met"] for c in here]} for v in variants if v != OFF}}
    s = service_settings(seeds[0], True)
    report = {
        "what": __doc__.split("\n\n")[0],
        "method": __doc__,
        "goal": {"p99_ratio_at_most": GOAL_P99_RATIO, "allocation_pp_within": GOAL_ALLOCATION_PP},
        "cases": cases,
        "aggregate": aggregate,
        "settings": {
            "seeds": seeds, "loads": loads, "nodes": NODES, "gpus": sum(n.num_gpu for n in default_cluster(NODES)),
            "window_s": WINDOW_S, "elastic": False, "checkpoint_delay_s": list(CHECKPOINT_DELAY_S),
            "latency_sensitive_pod_classes": list(LATENCY_KLASSES),
            "placement": {"policy": s.policy_name, "queue_order": s.queue_order, "preemption": s.preemption,
                          "reclaim_min_runtime_s": s.reclaim_min_runtime_s, "turn_due": s.turn_due,
                          "headroom_horizon_s": s.headroom_horizon_s, "latency_classes": sorted(s.latency_class_set),
                          "quota_service": False},
            "demand_forecast": {"model": "persistence (no registry model)", "quantiles": [0.5, 0.9],
                                "p90": "calibrated on each series' recent errors (forecast.calibration.Bands)"},
        },
        "machine": {**machine("numpy", "onnxruntime"), "load_average": load_average()},
        "wall_s": round(time.perf_counter() - t0, 1),
        "arms": {ON: "the production ForecastHeadroom (GPUAWARE_PLACEMENT_FORECAST_HEADROOM=true)",
                 OFF: "the same without it (=false)",
                 SUMMED: "the first rule, not production: SummedHeadroom, the room against every free thousandth"},
        "command": "make bench-headroom" if seeds == list(SEEDS) and loads == list(LOADS) and variants == list(ARMS)
        else (f".venv/bin/python bench/headroom.py --seeds {' '.join(map(str, seeds))} "
              f"--loads {' '.join(f'{x:g}' for x in loads)} --arms {' '.join(variants)}"),
        "out": shown(args.out),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(finite(report), indent=2, allow_nan=False) + "\n")
    show(console, report)
    console.print(f"wrote {shown(args.out)} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
