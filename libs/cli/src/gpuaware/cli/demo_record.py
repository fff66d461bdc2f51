"""What the demo records of a run: every event of its cluster (``RunLog``), the messages per subject
JetStream stored (``SubjectCounter``), and the figures a run hands to the report (``RunResult``).

The demo only follows the bus for its own report; ``placement_events`` is written by the recorder
service (``gpuaware.services.recorder``) the run starts like the other services, and the report
compares that table with what the demo saw."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaware import bus
from gpuaware.cli.demo_config import RunSpec
from gpuaware.schemas import (
    ALERT_RAISED,
    ALERT_RESOLVED,
    CHECKPOINT_ACKNOWLEDGED,
    CHECKPOINT_REQUESTED,
    DRAIN_RECOMMENDED,
    GPU_STATE_CHANGED,
    NODE_POWER_CHANGED,
    NODE_POWER_RECOMMENDED,
    PLACEMENT_DECIDED,
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PENDING,
    POD_PREEMPTED,
    POD_UNSCHEDULABLE,
    STREAMS,
    AlertRaised,
    AlertResolved,
    CheckpointAcknowledged,
    CheckpointRequested,
    DrainRecommended,
    GpuStateChanged,
    NodePowerChanged,
    NodePowerRecommended,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
)
from gpuaware.sim import GpuLedger

__all__ = ["BINDER_CHANNELS", "HEALTH_CHANNELS", "PLACEMENT_CHANNELS", "Progress", "RunLog", "RunResult",
           "SubjectCounter", "failover_figures", "subject_key"]

log = logging.getLogger(__name__)

# what the demo follows: the binder's pod events and checkpoint handshakes, placement's verdicts,
# health-scoring's changes
BINDER_CHANNELS: list[bus.Channel[Any]] = [
    bus.Channel(POD_PENDING, PodPending), bus.Channel(POD_BOUND, PodBound), bus.Channel(POD_BIND_FAILED, PodBindFailed),
    bus.Channel(POD_PREEMPTED, PodPreempted), bus.Channel(POD_FINISHED, PodFinished),
    bus.Channel(CHECKPOINT_REQUESTED, CheckpointRequested), bus.Channel(CHECKPOINT_ACKNOWLEDGED, CheckpointAcknowledged),
    bus.Channel(NODE_POWER_CHANGED, NodePowerChanged)]
PLACEMENT_CHANNELS: list[bus.Channel[Any]] = [
    bus.Channel(PLACEMENT_DECIDED, PlacementDecided), bus.Channel(POD_UNSCHEDULABLE, PodUnschedulable),
    bus.Channel(NODE_POWER_RECOMMENDED, NodePowerRecommended)]
HEALTH_CHANNELS: list[bus.Channel[Any]] = [
    bus.Channel(GPU_STATE_CHANGED, GpuStateChanged), bus.Channel(ALERT_RAISED, AlertRaised),
    bus.Channel(ALERT_RESOLVED, AlertResolved), bus.Channel(DRAIN_RECOMMENDED, DrainRecommended)]


def subject_key(subject: str) -> str:
    """A subject without its routing suffix: ``binder.pod.bound.v1.c.n`` -> ``binder.pod.bound.v1``."""
    parts = subject.split(".")
    for i, p in enumerate(parts):
        if i >= 2 and len(p) >= 2 and p[0] == "v" and p[1:].isdigit():
            return ".".join(parts[: i + 1])
    return subject


@dataclass
class RunLog:
    """Everything the demo saw of one run's cluster, in stream order."""

    cluster: str
    pending: dict[str, PodPending] = field(default_factory=dict)
    """first pending event of each pod (the request as submitted)"""
    attempt: dict[str, int] = field(default_factory=dict)
    decided: dict[str, PlacementDecided] = field(default_factory=dict)
    unschedulable: dict[str, PodUnschedulable] = field(default_factory=dict)
    binder_events: list[Any] = field(default_factory=list)
    """bound / bind_failed / preempted / finished, in BINDER stream order"""
    state: dict[str, str] = field(default_factory=dict)
    recorded: Counter[str] = field(default_factory=Counter)
    """messages per subject (routing suffix dropped): what the recorder must have stored"""
    policies: Counter[str] = field(default_factory=Counter)
    explained: dict[str, str] = field(default_factory=dict)
    bind_failed: dict[str, PodBindFailed] = field(default_factory=dict)
    """the last bind failure of each pod"""
    bind_failures: Counter[str] = field(default_factory=Counter)
    """bind failures by reason"""
    decision_times: list[tuple[float, str]] = field(default_factory=list)
    """(decided_at wall time, deciding instance) of every decision, for the fail-over figures"""
    double_bound: list[str] = field(default_factory=list)
    """pods the binder reported bound by a second decision while still bound by the first"""
    bound_by: dict[str, str] = field(default_factory=dict)
    planned_victims: int = 0
    """victims named in decisions' preemption plans"""
    placements: list[tuple[float, tuple[str, ...], str]] = field(default_factory=list)
    """(decided_at, GPU uuids, pod uid) of every decision: checked against the GPUs' health states"""
    health_changes: list[GpuStateChanged] = field(default_factory=list)
    alerts_raised: list[AlertRaised] = field(default_factory=list)
    alerts_resolved: list[AlertResolved] = field(default_factory=list)
    drains: list[DrainRecommended] = field(default_factory=list)
    resize_requests: list[CheckpointRequested] = field(default_factory=list)
    """the binder's checkpoint requests for an elastic job's resize (one per worker asked to save)"""
    power_recommended: list[NodePowerRecommended] = field(default_factory=list)
    power_changed: list[NodePowerChanged] = field(default_factory=list)
    """the node-power planner's recommendations and the binder's answers, in stream order"""
    awaiting_verdict: dict[tuple[str, int], float] = field(default_factory=dict)
    """(pod, attempt) -> wall time its pending was seen, until placement's first verdict on it"""
    verdict_lags: list[tuple[float, float]] = field(default_factory=list)
    """(wall time a pending was seen, wall seconds until placement's first verdict on it - decided or
    unschedulable): how far the services trail the twin (``demo_judge.lag_figures``)"""

    def on_health(self, ev: Any, _subject: str) -> None:
        """health-scoring's state changes and alerts of this run's cluster."""
        if getattr(ev, "cluster", None) != self.cluster:
            return
        if isinstance(ev, GpuStateChanged):
            self.health_changes.append(ev)
        elif isinstance(ev, AlertRaised):
            self.alerts_raised.append(ev)
        elif isinstance(ev, AlertResolved):
            self.alerts_resolved.append(ev)
        elif isinstance(ev, DrainRecommended):
            self.drains.append(ev)

    def quarantined_now(self) -> set[str]:
        last: dict[str, str] = {}
        for c in self.health_changes:
            last[c.gpu_uuid] = c.current.value
        return {g for g, st in last.items() if st == "quarantined"}

    def on_event(self, ev: Any, subject: str, wall: float | None = None) -> None:
        """One event of the run's cluster; ``wall``: when it was seen (now when not given)."""
        if getattr(ev, "cluster", None) != self.cluster:
            return
        if isinstance(ev, PodPending | PlacementDecided | PodUnschedulable):
            self._time_verdict(ev, time.time() if wall is None else wall)
        if isinstance(ev, NodePowerRecommended):  # not pod events: the recorder keeps no row of them
            self.power_recommended.append(ev)
            return
        if isinstance(ev, NodePowerChanged):
            self.power_changed.append(ev)
            return
        self.recorded[subject_key(subject)] += 1
        uid = ev.pod_uid
        if isinstance(ev, CheckpointRequested | CheckpointAcknowledged):
            if isinstance(ev, CheckpointRequested) and ev.reason == "resize":
                self.resize_requests.append(ev)
            return  # counted (the recorder stores them); the report reads preemptions from the binder's events
        if isinstance(ev, PodPending):
            self.pending.setdefault(uid, ev)
            self.attempt[uid] = max(self.attempt.get(uid, 0), ev.attempt)
            self.state[uid] = "pending"
        elif isinstance(ev, PlacementDecided):
            self.decided[uid] = ev
            self.policies[ev.policy] += 1
            self.decision_times.append((ev.decided_at, ev.source))
            self.placements.append((ev.decided_at, tuple(sl.gpu_uuid for sl in ev.slices), uid))
            self.planned_victims += len(ev.preemptions)
        elif isinstance(ev, PodUnschedulable):
            self.unschedulable[uid] = ev
        else:
            self.binder_events.append(ev)
            if isinstance(ev, PodBound):
                if self.state.get(uid) == "bound" and self.bound_by.get(uid) not in (None, ev.decision_id):
                    self.double_bound.append(uid)
                self.bound_by[uid] = ev.decision_id or ""
                self.state[uid] = "bound"
            elif isinstance(ev, PodFinished):
                self.state[uid] = "finished"
            elif isinstance(ev, PodPreempted):
                self.state[uid] = "pending"
            elif isinstance(ev, PodBindFailed):
                self.bind_failed[uid] = ev
                self.bind_failures[ev.reason] += 1

    def _time_verdict(self, ev: PodPending | PlacementDecided | PodUnschedulable, wall: float) -> None:
        key = (ev.pod_uid, ev.attempt)
        if isinstance(ev, PodPending):
            self.awaiting_verdict.setdefault(key, wall)
            return
        seen = self.awaiting_verdict.pop(key, None)
        if seen is not None:
            self.verdict_lags.append((seen, wall - seen))

    def counts(self) -> dict[str, int]:
        c = Counter(self.state.values())
        return {"arrived": len(self.pending), "pending": c["pending"], "bound": c["bound"],
                "finished": c["finished"], "decided": self.recorded[PLACEMENT_DECIDED],
                "unschedulable": self.recorded[POD_UNSCHEDULABLE]}

    # -- after the run ------------------------------------------------------------------------------

    def accounting(self) -> dict[str, tuple[str, str]]:
        """Every arrived pod: (state, reason). state is bound | finished | pending; a pending pod's
        reason is placement's verdict for its latest attempt, the decision in flight when the run
        stopped, its explanation, or the world's last refusal to bind it; "" when none (an
        accounting failure)."""
        out: dict[str, tuple[str, str]] = {}
        for uid in self.pending:
            st = self.state.get(uid, "pending")
            if st != "pending":
                out[uid] = (st, "")
                continue
            attempt = self.attempt.get(uid, 0)
            d = self.decided.get(uid)
            u = self.unschedulable.get(uid)
            if d is not None and d.attempt == attempt:
                reason = "decision_in_flight"
            elif u is not None and u.attempt == attempt:
                reason = u.reason
            elif uid in self.explained:
                reason = f"explained: {self.explained[uid]}"
            elif uid in self.bind_failed:
                reason = f"bind_failed: {self.bind_failed[uid].reason} (re-queued)"
            elif u is not None:
                reason = u.reason
            else:
                reason = ""
            out[uid] = ("pending", reason)
        return out

    def workload_fingerprint(self) -> tuple[str, dict[str, tuple[Any, ...]]]:
        """sha256 over every arrived pod's request as first submitted, and the requests by pod."""
        reqs = {uid: (p.pod_name, p.namespace, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_memory_mib,
                      tuple(p.gpu_types), p.gang_id, p.gang_min_members, p.queue, p.priority,
                      round(p.submitted_at, 3))
                for uid, p in self.pending.items()}
        h = hashlib.sha256(json.dumps(sorted(reqs.items()), default=str).encode()).hexdigest()
        return h, reqs

    def replay(self, gpus: dict[str, int]) -> tuple[GpuLedger, int, int]:
        """The GPU ledger replayed from the binder's events (over-allocation caught per event), and
        (fractional pods put on a GPU already in use, fractional pods bound).

        Replayed in the world's time order, releases before binds at the same instant: the binder
        applies decisions concurrently, so a pod bound on GPUs another decision's victim just gave
        back can reach the stream before that victim's ``preempted`` event does (the world evicted it
        first: it refuses a bind on a full GPU). Arrival order breaks the remaining ties."""
        ledger = GpuLedger(gpus)
        shared = fractional = 0
        for ev in sorted(self.binder_events, key=_world_order):
            if isinstance(ev, PodBound):
                asked = self.pending.get(ev.pod_uid)
                asked_milli = asked.gpu_milli if asked is not None else max((s.gpu_milli for s in ev.slices), default=0)
                if asked is not None and asked.num_gpu == 1 and asked.gpu_milli < 1000:
                    fractional += 1
                    shared += any(ledger.used.get(s.gpu_uuid, 0) > 0 for s in ev.slices)
                ledger.bind(ev.bound_at, ev.pod_uid, [(s.gpu_uuid, s.gpu_milli, s.memory_mib) for s in ev.slices],
                            asked_milli)
            elif isinstance(ev, PodFinished):
                ledger.release(ev.finished_at, ev.pod_uid)
            elif isinstance(ev, PodPreempted):
                ledger.release(ev.preempted_at, ev.pod_uid)
        return ledger, shared, fractional


Progress = Callable[[RunSpec, RunLog, float, float], None]
"""called with the run, its log, the virtual seconds replayed and the wall seconds spent"""


def _world_order(ev: object) -> tuple[float, int]:
    if isinstance(ev, PodBound):
        return ev.bound_at, 1
    if isinstance(ev, PodFinished):
        return ev.finished_at, 0
    if isinstance(ev, PodPreempted):
        return ev.preempted_at, 0
    return math.inf, 2


@dataclass
class RunResult:
    spec: RunSpec
    log: RunLog
    gpus: dict[str, int]
    """GPU uuid -> memory MiB, from the world's snapshot"""
    nodes: int
    started_at: float
    """the twin's virtual start (Unix seconds)"""
    virtual_end: float
    wall_s: float
    reached_end: bool
    messages: dict[str, int]
    """per subject, stored by JetStream while the run lasted"""
    db: dict[str, int]
    """per subject, rows in placement_events"""
    snapshot_violations: list[str]
    snapshot_pods: int
    exit_codes: dict[str, int | None]
    services: dict[str, str]
    failure: str = ""
    failover: dict[str, Any] | None = None
    """the fault drill's figures (``DemoConfig.kill_leader_at_s``), None without one"""
    node_names: list[str] = field(default_factory=list)
    clock: list[tuple[float, float]] = field(default_factory=list)
    """(wall Unix time, the twin's virtual time) pairs seen during the run: maps telemetry's wall
    timestamps onto the virtual day"""
    telemetry: dict[str, Any] = field(default_factory=dict)
    """the run's telemetry agent: status, exporter URL"""
    health: dict[str, Any] = field(default_factory=dict)
    """health-scoring in this run: status, the faults injected (with their GPUs' uuids), the operator's
    repair, the service's own counters at the end"""
    quota: dict[str, Any] = field(default_factory=dict)
    """the quota service in this run (gpuaware.cli.quota.demo_summary), empty when it did not run"""
    chaos: list[dict[str, Any]] = field(default_factory=list)
    """the planned faults done during the run (``ChaosRunner.finish``), empty without a plan"""
    forecast: dict[str, Any] = field(default_factory=dict)
    """the forecasting service in this run: the demand model, its counters, the demand forecasts scored
    (``demo_forecast.demand_accuracy``); empty when it did not run"""


class SubjectCounter:
    """Messages per subject, from JetStream's own accounting (``stream_info`` with a subject filter):
    every event subject of the platform is captured by exactly one stream, so the streams' per-subject
    counts are what crossed NATS and was stored. ``mark()`` at a run's start, ``since()`` gives the
    run's share. (A core ``>`` subscription would count too, but it also answers every request subject,
    which hides "no responders" from requesters such as placement asking ``quota.admit``.)"""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._base: Counter[str] = Counter()

    async def read(self, js: bus.JetStream) -> Counter[str]:
        out: Counter[str] = Counter()
        for spec in STREAMS:
            try:
                info = await js.stream_info(spec.name, subjects_filter=">")
            except Exception:
                continue
            for subject, n in (info.state.subjects or {}).items():
                out[subject_key(subject)] += int(n)
        return out

    async def mark(self, js: bus.JetStream) -> None:
        self._base = await self.read(js)
        self.counts = {}

    async def since(self, js: bus.JetStream) -> dict[str, int]:
        now = await self.read(js)
        self.counts = {s: n - self._base.get(s, 0) for s, n in sorted(now.items()) if n - self._base.get(s, 0) > 0}
        return self.counts


def failover_figures(drill: dict[str, Any], run_log: RunLog, exit_codes: dict[str, int | None]) -> dict[str, Any]:
    """What the fault drill showed: how long after the SIGKILL another instance decided, and how
    many decisions each side made. The killed process's exit code (-9) is the drill's, not a fault:
    it moves from ``exit_codes`` into the figures."""
    killed, at = drill["killed"], drill["killed_at"]
    after = [t for t, src in run_log.decision_times if t >= at and src.rsplit("/", 1)[-1] != killed]
    return {**drill, "killed_exit_code": exit_codes.pop(drill["process"], None),
            "takeover_s": round(min(after) - at, 3) if after else None,
            "decisions_after": len(after),
            "decisions_by_killed_after_kill": sum(1 for t, src in run_log.decision_times
                                                  if t > at + 0.5 and src.rsplit("/", 1)[-1] == killed)}
