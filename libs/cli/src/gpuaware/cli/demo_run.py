"""One run of the demo: the real services on one digital twin, every event recorded.

A run is one cluster name (``<run id>-gpuaware`` or ``<run id>-baseline``) and one placement policy.
It starts the placement service and the binder (whose twin replays the workload on an accelerated
clock) as processes, records what crosses NATS, and ends when the twin's clock has replayed the
window (or the wall-clock budget ran out). Everything measured comes from the events the services
published, never from inside them:

    in-process recorder (the demo)                    the services (child processes)
    follow BINDER   binder.pod.{pending,bound,        binder: twin + clock; publishes pending,
                    bind_failed,preempted,finished}           bound, finished ...; answers world.snapshot
    follow PLACEMENT placement.pod.{decided,          placement: consumes pending, publishes
                    unschedulable}                            decided / unschedulable; answers explain
    messages per subject (JetStream's own counts)     telemetry agent + collector (when built)
    write each event to placement_events (PostgreSQL)
    follow ALERTS   health.gpu.state_changed,         health-scoring (gpuaware run): scores the
                    alerts.gpu.{raised,resolved}              agent's samples of the twin's GPUs

Faults (the gpuaware run, when health-scoring is built): ``plan_faults`` picks three GPUs of busy
nodes and the binder's fleet develops, at planned virtual times, an uncorrectable-ECC storm, an
XID 79 (fallen off the bus) and a thermal runaway; some wall seconds after the XID the demo acts as
the operator who rebooted that node (the catalogue's REBOOT_NODE) and uncordons the GPU with
``clear`` through ``health.cordon``. Health-scoring judges the twin's GPUs in their own (virtual)
time: ``TIME_SCALE`` is the twin's speed.

Runs are isolated: before each run the BINDER and PLACEMENT streams are deleted (their services
recreate them on start), so a decision id of the previous run (``<pod>/<attempt>``, the same pods
replayed) can neither be redelivered to the new binder nor be swallowed by the stream's duplicate
window.

At the end: one last world snapshot (checked for over-allocated GPUs), ``placement.explain`` for
pending pods that have no verdict yet, then placement stops first (no new decisions) and the binder
after it, and the recorder reads the streams to their end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from gpuaware import bus
from gpuaware.cli.chaos import ChaosRunner
from gpuaware.cli.processes import ProcessGroup, ServiceProcess, service_built, service_command
from gpuaware.devstack.ports import free_port
from gpuaware.schemas import (
    ALERT_RAISED,
    ALERT_RESOLVED,
    DRAIN_RECOMMENDED,
    GPU_STATE_CHANGED,
    HEALTH_CORDON,
    PLACEMENT_DECIDED,
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PENDING,
    POD_PREEMPTED,
    POD_UNSCHEDULABLE,
    WORLD_SNAPSHOT,
    AlertRaised,
    AlertResolved,
    CordonAction,
    CordonReply,
    CordonRequest,
    DrainRecommended,
    GpuStateChanged,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.schemas.permissions import (
    ADMIN,
    BINDER_ID,
    FORECASTING,
    HEALTH_SCORING,
    OPERATIONAL_ENDPOINTS,
    PLACEMENT_ID,
    QUOTA_ID,
    TELEMETRY_AGENT,
)
from gpuaware.schemas.placement import PLACEMENT_EXPLAIN, ExplainReply, ExplainRequest
from gpuaware.schemas.streams import ALERTS, BINDER, PLACEMENT, STREAMS
from gpuaware.sim.metrics import GpuLedger
from gpuaware.sim.twin import EccSpec, FaultSpec, ThermalSpec, XidSpec, encode_faults
from gpuaware.tsdb.events import PlacementEvent, count_placement_events_async, write_placement_events_async

__all__ = ["DemoConfig", "FaultPlan", "Interrupted", "RunLog", "RunResult", "RunSpec", "delete_loop_streams",
           "plan_faults", "run_once", "subject_key"]

log = logging.getLogger(__name__)

SOURCE = "gpuaware-demo"
WRITER_DRAIN_S = 60.0
"""how long the event writer keeps retrying after a run when the database is away"""
VIRTUAL_EPOCH = 1_767_225_600.0
"""2026-01-01T00:00:00Z: both runs' twins start their virtual day here, so their times compare"""


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP arrived: stop the services and the stack, report nothing."""


@dataclass(frozen=True)
class DemoConfig:
    """What both runs share (the workload and the world)."""

    out: Path
    run_id: str
    duration_s: float
    """wall seconds each run replays"""
    window_s: float
    """virtual seconds replayed"""
    speed: float
    trace: str
    nodes: str
    """``default`` (the built-in mixed cluster), ``openb``, or a node count for the built-in cluster"""
    default_nodes: int
    load: float
    seed: int
    max_pods: int
    slo_s: float
    shared_data: str = ""
    explain_limit: int = 5_000
    typical_pods_file: str = ""
    window_start_s: float = -1.0
    """traces: where the replayed window starts, seconds after the trace's first pod (-1: there)"""
    telemetry: bool = True
    """run a telemetry agent per run on the twin's GPUs (served by the binder as dcgm-exporter text)"""
    kill_leader_at_s: float = 0.0
    """fault drill: run a standby placement beside the leader and SIGKILL the leader this many wall
    seconds into the gpuaware run (0: no drill)"""
    health: bool = True
    """gpuaware run: health-scoring scores the twin's GPUs, and faults are injected into three of them"""
    nats_credentials: Mapping[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)
    """identity -> (user, password) when the demo's NATS requires per-service users (``--auth``): each
    service gets its own through its environment, the demo itself connects as admin. Never printed."""
    demand_model: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """the demand model the forecasting service serves (``demo_forecast.ensure_demand_model``'s answer)"""
    own_nats: bool = True
    """the NATS server is the demo's embedded one (False: ``NATS_URL`` names somebody else's, whose
    streams are never deleted)"""
    """the workload's request mix (openb pod-list format) for placement's fragmentation-aware scores"""

    @property
    def twin_nodes(self) -> str:
        return "openb" if self.nodes == "openb" else "default"

    @property
    def node_count(self) -> int:
        return int(self.nodes) if self.nodes.isdigit() else self.default_nodes


@dataclass(frozen=True)
class RunSpec:
    label: str
    """``gpuaware`` or ``baseline``"""
    policy: str
    cluster: str


@dataclass(frozen=True)
class FaultPlan:
    """What the gpuaware run's twin GPUs go through, planned before the binder starts."""

    specs: tuple[FaultSpec, ...]
    labels: tuple[str, ...]
    repair: int | None = None
    """index of the fault whose GPU the operator repairs (reboots the node, then uncordons with clear)"""
    repair_at_s: float = 0.0
    """virtual seconds after the start from which the operator acts (once the GPU is quarantined)"""

    def json(self) -> str:
        return encode_faults(self.specs)


def demo_nodes(cfg: DemoConfig) -> tuple[Any, ...]:
    """The twin's nodes, built as the binder builds them."""
    from gpuaware.sim.twin import default_cluster, openb_cluster, openb_node_list

    if cfg.twin_nodes == "openb":
        return openb_cluster(openb_node_list(Path(cfg.shared_data) if cfg.shared_data else None))
    return default_cluster(cfg.node_count)


def plan_faults(cfg: DemoConfig, nodes: Any) -> FaultPlan:
    """Three faults on GPUs of the three most common GPU models (busy nodes), at a quarter, 40 % and
    55 % of the window, sized in wall seconds so that each lasts long enough to be seen at any speed:

    * an uncorrectable-ECC storm: one uncorrectable error every ~2 wall seconds (1,800 / speed per
      virtual hour: 3 an hour at 576x) and 40x as many corrected ones, for the rest of the run;
    * XID 79 three times (the GPU fell off the bus); the operator reboots the node and uncordons the
      GPU with ``clear`` ``max(10 % of the window, 8 wall s)`` later;
    * a thermal runaway (a cooling failure): +50 degC over 6 wall seconds, recovering after 10.
    """
    w, speed = cfg.window_s, cfg.speed
    big = sorted((n for n in nodes if n.num_gpu >= 4), key=lambda n: n.name) or sorted(nodes, key=lambda n: n.name)
    by_model: dict[str, list[Any]] = {}
    for n in big:
        by_model.setdefault(n.gpu_model, []).append(n)
    models = sorted(by_model, key=lambda m: (-sum(x.num_gpu for x in by_model[m]), m))
    picks = [by_model[m][0] for m in models[:3]]
    picks += [n for n in big if n not in picks][: 3 - len(picks)]
    while len(picks) < 3:
        picks.append(big[0])
    ecc, xid, heat = picks
    ue_per_h = 1800.0 / speed
    specs = (
        EccSpec(node=ecc.name, gpu=2 % ecc.num_gpu, at_s=round(0.25 * w, 3), uncorrected_per_hour=ue_per_h,
                corrected_per_hour=40 * ue_per_h),
        XidSpec(node=xid.name, gpu=5 % xid.num_gpu, at_s=round(0.40 * w, 3), xid=79, count=3, interval_s=1.0),
        ThermalSpec(node=heat.name, gpu=1 % heat.num_gpu, at_s=round(0.55 * w, 3),
                    degrees_per_minute=50.0 / (6.0 * speed / 60.0), duration_s=10.0 * speed),
    )
    labels = ("uncorrectable ECC storm", "XID 79 (fallen off the bus)", "thermal runaway (cooling failure)")
    return FaultPlan(specs, labels, repair=1, repair_at_s=0.40 * w + max(0.10 * w, 8.0 * speed))


def subject_key(subject: str) -> str:
    """A subject without its routing suffix: ``binder.pod.bound.v1.c.n`` -> ``binder.pod.bound.v1``."""
    parts = subject.split(".")
    for i, p in enumerate(parts):
        if i >= 2 and len(p) >= 2 and p[0] == "v" and p[1:].isdigit():
            return ".".join(parts[: i + 1])
    return subject


@dataclass
class RunLog:
    """Everything the recorder saw of one run's cluster, in stream order."""

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
    policies: Counter[str] = field(default_factory=Counter)
    explained: dict[str, str] = field(default_factory=dict)
    bind_failed: dict[str, PodBindFailed] = field(default_factory=dict)
    """the last bind failure of each pod"""
    bind_failures: Counter[str] = field(default_factory=Counter)
    """bind failures by reason"""
    rows: list[PlacementEvent] = field(default_factory=list)
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

    def on_event(self, ev: Any, subject: str) -> None:
        if getattr(ev, "cluster", None) != self.cluster:
            return
        key = subject_key(subject)
        self.recorded[key] += 1
        uid = ev.pod_uid
        if isinstance(ev, PodPending):
            self.pending.setdefault(uid, ev)
            self.attempt[uid] = max(self.attempt.get(uid, 0), ev.attempt)
            self.state[uid] = "pending"
            row = (f"{uid}/{ev.attempt}", ev.emitted_at, None, None, ev.gpu_milli_total if ev.num_gpu else 0, "")
        elif isinstance(ev, PlacementDecided):
            self.decided[uid] = ev
            self.policies[ev.policy] += 1
            self.decision_times.append((ev.decided_at, ev.source))
            self.placements.append((ev.decided_at, tuple(sl.gpu_uuid for sl in ev.slices), uid))
            self.planned_victims += len(ev.preemptions)
            row = (ev.decision_id, ev.decided_at, ev.decision_id, ev.node, sum(s.gpu_milli for s in ev.slices),
                   ev.policy)
        elif isinstance(ev, PodUnschedulable):
            self.unschedulable[uid] = ev
            row = (f"{uid}/{ev.attempt}/{ev.reason}", ev.emitted_at, None, None, 0, ev.reason)
        else:
            self.binder_events.append(ev)
            if isinstance(ev, PodBound):
                if self.state.get(uid) == "bound" and self.bound_by.get(uid) not in (None, ev.decision_id):
                    self.double_bound.append(uid)
                self.bound_by[uid] = ev.decision_id or ""
                self.state[uid] = "bound"
                row = (ev.decision_id or uid, ev.bound_at, ev.decision_id, ev.node,
                       sum(s.gpu_milli for s in ev.slices), "")
            elif isinstance(ev, PodFinished):
                self.state[uid] = "finished"
                row = (uid, ev.finished_at, None, ev.node, sum(s.gpu_milli for s in ev.slices), ev.outcome.value)
            elif isinstance(ev, PodPreempted):
                self.state[uid] = "pending"
                row = (f"{uid}/{ev.decision_id}", ev.preempted_at, ev.decision_id, ev.node,
                       sum(s.gpu_milli for s in ev.slices), ev.reason)
            elif isinstance(ev, PodBindFailed):
                self.bind_failed[uid] = ev
                self.bind_failures[ev.reason] += 1
                row = (ev.decision_id, ev.failed_at, ev.decision_id, ev.node, 0, ev.reason)
            else:
                return
        msg_key, at, decision, node, milli, detail = row
        self.rows.append(PlacementEvent(
            cluster=self.cluster, subject=key, msg_key=msg_key, pod_uid=uid,
            event_at=datetime.fromtimestamp(at, UTC), decision_id=decision, node=node, gpu_milli=int(milli),
            detail=detail, payload=msgspec.to_builtins(ev)))

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


# --- messages per subject ------------------------------------------------------------------------------


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


# --- helpers over the bus ----------------------------------------------------------------------------

BINDER_CHANNELS = [bus.Channel(POD_PENDING, PodPending), bus.Channel(POD_BOUND, PodBound),
                   bus.Channel(POD_BIND_FAILED, PodBindFailed), bus.Channel(POD_PREEMPTED, PodPreempted),
                   bus.Channel(POD_FINISHED, PodFinished)]
PLACEMENT_CHANNELS = [bus.Channel(PLACEMENT_DECIDED, PlacementDecided),
                      bus.Channel(POD_UNSCHEDULABLE, PodUnschedulable)]
HEALTH_CHANNELS = [bus.Channel(GPU_STATE_CHANGED, GpuStateChanged), bus.Channel(ALERT_RAISED, AlertRaised),
                   bus.Channel(ALERT_RESOLVED, AlertResolved), bus.Channel(DRAIN_RECOMMENDED, DrainRecommended)]
HEALTH_STATS = OPERATIONAL_ENDPOINTS[HEALTH_SCORING][0]
FORECASTING_STATS = OPERATIONAL_ENDPOINTS[FORECASTING][0]
"""health-scoring's counters (an operational endpoint, outside the contract's registry)"""


async def delete_loop_streams(js: bus.JetStream, *, ours: bool = True) -> None:
    """Drop the BINDER and PLACEMENT streams (the previous run's events and duplicate windows) when
    the server is the demo's own; on somebody else's (``NATS_URL``) they are only ensured: each run
    has its own cluster name, so another run's events are never read as this one's."""
    for spec in (BINDER, PLACEMENT):
        if ours:
            with contextlib.suppress(Exception):
                await js.delete_stream(spec.name)
        await bus.ensure_stream(js, spec)


async def delete_run_consumers(js: bus.JetStream, cluster: str) -> list[str]:
    """The durable consumers the run's services made (their names carry its cluster): deleted after
    the run, so no consumer with pending messages is left on the server. Returns ``stream/name``."""
    gone = []
    for spec in STREAMS:
        try:
            infos = await js.consumers_info(spec.name)
        except Exception:
            continue
        for info in infos:
            name = info.name or ""
            if cluster in name and info.config.durable_name:
                with contextlib.suppress(Exception):
                    await js.delete_consumer(spec.name, name)
                    gone.append(f"{spec.name}/{name}")
    return gone


async def world_snapshot(nc: bus.Client, cluster: str, *, nodes: bool, pods: bool,
                         timeout: float = 5.0) -> list[WorldSnapshotReply]:
    """Every page of the binder's world (empty list when nobody answers)."""
    pages: list[WorldSnapshotReply] = []
    node_off: int | None = 0 if nodes else None
    pod_off: int | None = 0 if pods else None
    first = True
    while first or node_off is not None or pod_off is not None:
        first = False
        req = WorldSnapshotRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster,
                                   include_nodes=node_off is not None, include_pods=pod_off is not None,
                                   node_offset=node_off or 0, pod_offset=pod_off or 0, limit=1000 if nodes or pods else 1)
        page = await bus.request(nc, WORLD_SNAPSHOT, req, WorldSnapshotReply, timeout=timeout)
        pages.append(page)
        node_off = page.next_node_offset if req.include_nodes else None
        pod_off = page.next_pod_offset if req.include_pods else None
    return pages


def snapshot_violations(pages: list[WorldSnapshotReply], gpus: dict[str, int]) -> tuple[list[str], int]:
    """GPUs whose bound slices, summed, exceed the GPU (compute or memory) in the world's own view."""
    milli: Counter[str] = Counter()
    mem: Counter[str] = Counter()
    pods = 0
    for page in pages:
        for p in page.pods:
            pods += 1
            for s in p.slices:
                milli[s.gpu_uuid] += s.gpu_milli
                mem[s.gpu_uuid] += s.memory_mib
    bad = [f"{g}: {milli[g]} milli, {mem[g]} MiB" for g in milli
           if milli[g] > 1000 or (gpus.get(g, 0) and mem[g] > gpus[g])]
    return bad, pods


async def explain_pending(nc: bus.Client, cluster: str, log_: RunLog, limit: int, *, at_once: int = 16) -> None:
    """Ask placement why each pending pod without a verdict for its latest attempt still waits (up to
    ``limit`` pods, ``at_once`` questions in flight: a busy trace leaves thousands waiting)."""
    uids = [uid for uid, (state, reason) in log_.accounting().items() if state == "pending" and not reason][:limit]
    gone = asyncio.Event()  # placement stopped answering: stop asking
    slots = asyncio.Semaphore(at_once)

    async def ask(uid: str) -> None:
        if gone.is_set():
            return
        req = ExplainRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster, pod_uid=uid, ask_quota=False,
                             max_node_classes=5)
        async with slots:
            try:
                reply = await bus.request(nc, PLACEMENT_EXPLAIN, req, ExplainReply, timeout=2.0)
                log_.explained[uid] = reply.explanation.summary
            except bus.ServiceError as exc:
                log_.explained[uid] = f"placement: {exc}"
            except (bus.RequestTimeout, bus.NoResponders):
                gone.set()

    await asyncio.gather(*(ask(uid) for uid in uids))


async def wait_for(check: Callable[[], Any], *, timeout: float, what: str, procs: list[ServiceProcess],
                   interval: float = 0.2, stop: asyncio.Event | None = None) -> Any:
    """Poll ``check`` (async, returns a value or None/raises) until it answers; fail fast when a
    process died."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Exception | None = None
    while loop.time() < deadline:
        if stop is not None and stop.is_set():
            raise Interrupted(what)
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited ({p.proc.returncode if p.proc else '?'}) while waiting for "
                                   f"{what}; its log ({p.log_path}):\n{p.log_tail()}")
        try:
            value = await check()
            if value is not None:
                return value
        except Exception as exc:
            last = exc
        await asyncio.sleep(interval)
    raise TimeoutError(f"{what}: no answer within {timeout:.0f}s ({last})")


# --- one run ------------------------------------------------------------------------------------------


def nats_login(cfg: DemoConfig, identity: str) -> dict[str, str]:
    """The environment a service of ``identity`` logs in to the demo's NATS with (empty without --auth)."""
    if not cfg.nats_credentials:
        return {}
    user, password = cfg.nats_credentials[identity]
    return {"NATS_USER": user, "NATS_PASSWORD": password}


def nats_admin(cfg: DemoConfig) -> dict[str, str]:
    """Connection options for the demo's own connections (it deletes streams, follows every stream)."""
    if not cfg.nats_credentials:
        return {}
    user, password = cfg.nats_credentials[ADMIN]
    return {"user": user, "password": password}


def service_env(cfg: DemoConfig, spec: RunSpec, nats_url: str, database_url: str,
                exporter_port: int = 0, faults: str = "") -> dict[str, dict[str, str]]:
    """Each service's environment for one run (the prefixed settings they read once at start).
    With ``exporter_port`` the binder serves the twin's GPUs as dcgm-exporter text there, and the
    ``agent`` entry is the telemetry agent scraping it (its node list is added once known)."""
    common = {"NATS_URL": nats_url, "DATABASE_URL": database_url}
    binder = {
        **common, **nats_login(cfg, BINDER_ID), "GPUAWARE_BINDER_CLUSTER": spec.cluster, "GPUAWARE_BINDER_DURABLE": f"binder-{spec.cluster}",
        "GPUAWARE_BINDER_TWIN_NODES": cfg.twin_nodes, "GPUAWARE_BINDER_TWIN_DEFAULT_NODES": str(cfg.node_count),
        "GPUAWARE_BINDER_WORKLOAD": cfg.trace, "GPUAWARE_BINDER_WINDOW_S": str(cfg.window_s),
        "GPUAWARE_BINDER_LOAD": str(cfg.load), "GPUAWARE_BINDER_MAX_PODS": str(cfg.max_pods),
        "GPUAWARE_BINDER_SEED": str(cfg.seed), "GPUAWARE_BINDER_SPEED": str(cfg.speed),
        "GPUAWARE_BINDER_START": str(VIRTUAL_EPOCH),
        "GPUAWARE_BINDER_FLEET": "true" if exporter_port else "false",
        "GPUAWARE_BINDER_EXPORTER_PORT": str(exporter_port),
        "GPUAWARE_BINDER_WINDOW_START_S": str(cfg.window_start_s),
    }
    if cfg.shared_data:
        binder["GPUAWARE_BINDER_SHARED_DATA"] = cfg.shared_data
    if faults:
        binder["GPUAWARE_BINDER_FAULTS"] = faults
    health = {
        **common, **nats_login(cfg, HEALTH_SCORING), "GPUAWARE_HEALTH_SCORING_CLUSTER": spec.cluster,
        "GPUAWARE_HEALTH_SCORING_INSTANCE_ID": f"health-{spec.label}",
        # the twin's GPUs are judged in their own (virtual) time; clean periods of two virtual hours
        # (a day in production) so that recoveries fit in the replayed day
        "GPUAWARE_HEALTH_SCORING_TIME_SCALE": f"{cfg.speed:g}",
        "GPUAWARE_HEALTH_SCORING_QUARANTINE_CLEAN_S": "7200", "GPUAWARE_HEALTH_SCORING_DEGRADED_CLEAN_S": "7200",
        "GPUAWARE_HEALTH_SCORING_SCORE_WINDOW_S": "10", "GPUAWARE_HEALTH_SCORING_TICK_S": "2",
        "GPUAWARE_HEALTH_SCORING_INVENTORY_WAIT_S": "3",
    }
    placement = {
        **common, **nats_login(cfg, PLACEMENT_ID), "GPUAWARE_PLACEMENT_CLUSTER": spec.cluster, "GPUAWARE_PLACEMENT_POLICY": spec.policy,
        "GPUAWARE_PLACEMENT_SEED": str(cfg.seed), "GPUAWARE_PLACEMENT_WORLD_RETRY_S": "0.25",
        "GPUAWARE_PLACEMENT_LEASE_POLL_S": "0.1",
        # stock Kubernetes as the baseline runs it: no preemption (gpuaware preempts by priority)
        "GPUAWARE_PLACEMENT_PREEMPTION": "false" if spec.label == "baseline" else "true",
        # stock Kubernetes retries by priority then arrival; gpuaware by fair share, then shortest
        # predicted runtime (the forecasting service's predictor), a starved tenant reclaiming what
        # others run above their share once it ran 10 minutes (the world's, here the twin's, time),
        # and a tenant kept below its share taking turns (the service's default, `gpuaware.quota.turns`)
        "GPUAWARE_PLACEMENT_QUEUE_ORDER": "priority" if spec.label == "baseline" else "fair-share",
        "GPUAWARE_PLACEMENT_RECLAIM_MIN_RUNTIME_S": "600",
    }
    if cfg.typical_pods_file:
        placement["GPUAWARE_PLACEMENT_TYPICAL_PODS_FILE"] = cfg.typical_pods_file
    agent = {
        **common, **nats_login(cfg, TELEMETRY_AGENT), "GPUAWARE_TELEMETRY_AGENT_CLUSTER": spec.cluster, "GPUAWARE_TELEMETRY_AGENT_BACKEND": "dcgm",
        "GPUAWARE_TELEMETRY_AGENT_DCGM_URL": f"http://127.0.0.1:{exporter_port}/metrics/{{node}}",
        "GPUAWARE_TELEMETRY_AGENT_INSTANCE_ID": f"agent-{spec.label}",
    }
    quota = {**common, **nats_login(cfg, QUOTA_ID), "GPUAWARE_QUOTA_CLUSTER": spec.cluster, "GPUAWARE_QUOTA_INSTANCE_ID": f"quota-{spec.label}",
             "GPUAWARE_QUOTA_TREE": str(cfg.out / f"quota-queues-{spec.label}.yaml"),
             "GPUAWARE_QUOTA_REPORT_INTERVAL_S": "2"}
    forecasting = {**common, **nats_login(cfg, FORECASTING), "GPUAWARE_FORECASTING_CLUSTER": spec.cluster,
                   "GPUAWARE_FORECASTING_INSTANCE_ID": f"forecasting-{spec.label}",
                   # the twin's GPUs live a day in the run: per-GPU series from the agent's samples, one
                   # step per minute of their time (placement's forecast-headroom gets forecasts in the run)
                   "GPUAWARE_FORECASTING_TIME_SCALE": f"{cfg.speed:g}"}
    return {"binder": binder, "placement": placement, "agent": agent, "health": health, "quota": quota,
            "forecasting": forecasting}


class EventWriter:
    """Every half second, a run's recorded events into ``placement_events`` (first writer wins). A
    batch that cannot be written (PostgreSQL stopped) is kept and written again, as the collector
    does; after ``stop`` it is retried for up to ``drain_s`` before the invariant reports the rest."""

    def __init__(self, pool: Any, run_log: RunLog, *, every_s: float = 0.5, drain_s: float = WRITER_DRAIN_S) -> None:
        self.pool = pool
        self.run_log = run_log
        self.every_s = every_s
        self.drain_s = drain_s
        self.stop = asyncio.Event()
        self.written = 0
        self.failures = 0

    async def run(self) -> None:
        failing_since: float | None = None
        deadline: float | None = None
        while True:
            stopping = self.stop.is_set()
            if stopping and deadline is None:
                deadline = time.monotonic() + self.drain_s
            batch, self.run_log.rows = self.run_log.rows, []
            if batch:
                try:
                    async with self.pool.connection() as conn:
                        await write_placement_events_async(conn, batch)
                    self.written += len(batch)
                    if failing_since is not None:
                        log.warning("placement_events: written again after %.1f s without the database",
                                    time.monotonic() - failing_since)
                        failing_since = None
                except Exception as exc:
                    self.failures += 1
                    self.run_log.rows = batch + self.run_log.rows  # kept, in order, for the next pass
                    if failing_since is None:
                        failing_since = time.monotonic()
                        log.warning("placement_events: %d rows kept for later (%s)", len(batch), exc)
                    if stopping and deadline is not None and time.monotonic() < deadline:
                        await asyncio.sleep(self.every_s)
                        continue
            if stopping:
                if self.run_log.rows:
                    log.error("placement_events: %d rows not written within %.0f s after the run",
                              len(self.run_log.rows), self.drain_s)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.every_s)


async def run_once(cfg: DemoConfig, spec: RunSpec, *, nc: bus.Client, nats_url: str, database_url: str,
                   pool: Any, counter: SubjectCounter, procs: ProcessGroup,
                   progress: Callable[[RunSpec, RunLog, float, float], None],
                   stop: asyncio.Event | None = None, chaos: ChaosRunner | None = None) -> RunResult:
    """Start placement + binder for ``spec``, replay the window, stop them, return what was recorded.
    Raises ``Interrupted`` soon after ``stop`` is set (the services are stopped first). ``chaos``: planned
    faults done during the replay (its processes found in ``procs``)."""
    stop = stop or asyncio.Event()
    js = nc.jetstream()
    await delete_loop_streams(js, ours=cfg.own_nats)
    run_log = RunLog(spec.cluster)
    followers: list[bus.Follower] = []
    event_writer = EventWriter(pool, run_log)

    def on_event(ev: Any, d: bus.FollowDelivery) -> None:
        run_log.on_event(ev, d.subject)

    followers.append(await bus.follow(js, BINDER_CHANNELS, on_event, stream=BINDER.name, with_suffixes=True,
                                      name=f"demo-{spec.label}-binder"))
    followers.append(await bus.follow(js, PLACEMENT_CHANNELS, on_event, stream=PLACEMENT.name, with_suffixes=True,
                                      name=f"demo-{spec.label}-placement"))
    health_on = cfg.health and spec.label == "gpuaware" and service_built("gpuaware.services.health_scoring")
    plan = plan_faults(cfg, demo_nodes(cfg)) if health_on and cfg.telemetry else None
    health: dict[str, Any] = {"status": "not in this run" if not health_on else "not started"}
    if health_on:
        followers.append(await bus.follow(js, HEALTH_CHANNELS, lambda ev, d: run_log.on_health(ev, d.subject),
                                          stream=ALERTS.name, deliver="new", with_suffixes=True,
                                          name=f"demo-{spec.label}-health"))
    writer_task = asyncio.create_task(event_writer.run(), name="demo placement_events writer")
    await counter.mark(js)
    exporter_port = free_port() if cfg.telemetry else 0
    env = service_env(cfg, spec, nats_url, database_url, exporter_port, plan.json() if plan else "")
    clock: list[tuple[float, float]] = []
    node_names: list[str] = []
    telemetry: dict[str, Any] = {"status": "off" if not cfg.telemetry else "not started"}
    logs = cfg.out / "logs"
    wall0 = time.monotonic()
    failure = ""
    exit_codes: dict[str, int | None] = {}
    gpus: dict[str, int] = {}
    n_nodes = 0
    virtual_now = VIRTUAL_EPOCH
    reached = False
    snap_bad: list[str] = []
    snap_pods = 0
    failover: dict[str, Any] | None = None
    chaos_done: list[dict[str, Any]] = []
    forecast: dict[str, Any] = {}
    try:
        drill = cfg.kill_leader_at_s > 0 and spec.label == "gpuaware"
        instances = ("p1", "p2") if drill else ("p1",)
        forecast_on = spec.label == "gpuaware" and service_built("gpuaware.services.forecasting")
        forecaster = (procs.start("forecasting", service_command("gpuaware.services.forecasting"), env["forecasting"],
                                  logs / f"forecasting-{spec.label}.log") if forecast_on else None)
        placements = {}
        # forecast_on: placement's metrics are read at the end (how often forecasts changed a decision)
        metrics_ports = {inst: free_port() if forecast_on else 0 for inst in instances}
        for i, inst in enumerate(instances):
            name = "placement" if i == 0 else f"placement-{inst}"
            placements[inst] = procs.start(
                name, service_command("gpuaware.services.placement"),
                {**env["placement"], "GPUAWARE_PLACEMENT_INSTANCE_ID": inst,
                 "GPUAWARE_PLACEMENT_METRICS_PORT": str(metrics_ports[inst])},
                logs / f"{name}-{spec.label}.log")
        if forecast_on:
            # live before the binder's first pod: minutes it sees only while catching up are replayed
            # (stepped, not published), as after a restart
            async def forecasting_up() -> bool:
                await bus.request(nc, FORECASTING_STATS, {}, dict, timeout=1.0)
                return True

            await wait_for(forecasting_up, timeout=90.0, what="the forecasting service",
                           procs=[*placements.values(), forecaster], stop=stop)
        binder = procs.start("binder", service_command("gpuaware.services.binder"), env["binder"],
                             logs / f"binder-{spec.label}.log")
        ours = [*placements.values(), binder, *([forecaster] if forecaster else [])]
        if health_on:
            ours.append(procs.start("health-scoring", service_command("gpuaware.services.health_scoring"),
                                    env["health"], logs / f"health-scoring-{spec.label}.log"))
            health["status"] = "running"

        async def world() -> list[WorldSnapshotReply]:
            return await world_snapshot(nc, spec.cluster, nodes=True, pods=False, timeout=1.0)

        pages = await wait_for(world, timeout=90.0, what="the binder's world.snapshot", procs=ours, stop=stop)
        uuid_of: dict[tuple[str, int], str] = {}
        for page in pages:
            for node in page.nodes:
                n_nodes += 1
                node_names.append(node.name)
                for g in node.gpus:
                    gpus[g.uuid] = g.memory_mib
                    uuid_of[(node.name, g.index)] = g.uuid
        quota_on = spec.label == "gpuaware" and service_built("gpuaware.services.quota")
        if quota_on:  # quota (gpuaware run): its tree sized to the cluster the binder announced
            from gpuaware.cli.quota import demo_tree
            Path(env["quota"]["GPUAWARE_QUOTA_TREE"]).write_text(demo_tree(len(gpus)))
            ours.append(procs.start("quota", service_command("gpuaware.services.quota"), env["quota"],
                                    logs / f"quota-{spec.label}.log"))
        if plan is not None:
            health["faults"] = [
                {"kind": f.__struct_config__.tag, "label": label, "node": f.node, "gpu_index": f.gpu,
                 "gpu_uuid": uuid_of.get((f.node, f.gpu), ""), "at_s": f.at_s,
                 "until_s": f.at_s + f.duration_s if isinstance(f, ThermalSpec) and f.duration_s else None}
                for f, label in zip(plan.specs, plan.labels, strict=True)]

        if exporter_port and node_names:
            # the telemetry agent reads the twin's GPUs the way it reads a real node's: a dcgm-exporter
            # scrape (the binder serves one per twin node), one agent process for all of them
            agent = procs.start(f"telemetry-agent-{spec.label}",
                                service_command("gpuaware.services.telemetry", "agent"),
                                {**env["agent"], "GPUAWARE_TELEMETRY_AGENT_DCGM_NODES": ",".join(node_names),
                                 # one process scrapes every node: about 100 scrapes a second at most,
                                 # so a 1,213-node twin is read every 12 s instead of saturating the cores
                                 "GPUAWARE_TELEMETRY_AGENT_FAST_S": f"{max(1.0, len(node_names) / 100):g}"},
                                logs / f"telemetry-agent-{spec.label}.log")
            telemetry = {"status": "running", "exporter": env["agent"]["GPUAWARE_TELEMETRY_AGENT_DCGM_URL"],
                         "nodes": len(node_names)}
            ours.append(agent)

        async def explains() -> bool | None:
            req = ExplainRequest(source=SOURCE, emitted_at=time.time(), cluster=spec.cluster,
                                 pod_uid="gpuaware-demo-probe", ask_quota=False)
            try:
                await bus.request(nc, PLACEMENT_EXPLAIN, req, ExplainReply, timeout=1.0)
            except bus.ServiceError:
                return True  # "not known to placement": it answers
            return True

        await wait_for(explains, timeout=90.0, what="placement.explain", procs=ours, stop=stop)
        if health_on:
            async def health_up() -> bool:
                await bus.request(nc, HEALTH_STATS, {}, dict, timeout=1.0)
                return True

            await wait_for(health_up, timeout=90.0, what="health-scoring's health.stats", procs=ours, stop=stop)
        if quota_on:
            async def quota_up() -> bool:
                await bus.request(nc, "$SRV.PING.quota", {}, dict, timeout=1.0)
                return True

            await wait_for(quota_up, timeout=90.0, what="the quota service", procs=ours, stop=stop)
        repair = plan.specs[plan.repair] if plan is not None and plan.repair is not None else None
        end = VIRTUAL_EPOCH + cfg.window_s
        deadline = time.monotonic() + cfg.duration_s * 1.25 + 20.0
        replay0 = time.monotonic()  # chaos steps are timed from here: every service is up
        last_count = 0.0
        while True:
            if stop.is_set():
                raise Interrupted(spec.label)
            if drill and failover is None and time.monotonic() - wall0 >= cfg.kill_leader_at_s \
                    and run_log.decision_times:
                leader = run_log.decision_times[-1][1].rsplit("/", 1)[-1]
                victim = placements.get(leader)
                if victim is not None and victim.proc is not None:
                    victim.proc.kill()  # SIGKILL: no hand-over, the lease must expire
                    failover = {"killed": leader, "process": victim.name, "killed_at": time.time(),
                                "decisions_before": len(run_log.decision_times)}
                    ours = [p for p in ours if p is not victim]
                    log.info("fault drill: placement leader %s killed", leader)
            if chaos is not None:
                chaos.tick(time.monotonic() - replay0)
            held = chaos.held_down() if chaos is not None else set()
            dead = [p for p in ours if not p.alive() and p.name not in held]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited during the run; its log ({dead[0].log_path}):\n"
                                   f"{dead[0].log_tail()}")
            with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
                page = (await world_snapshot(nc, spec.cluster, nodes=False, pods=False, timeout=2.0))[0]
                virtual_now = page.at
                clock.append((time.time(), virtual_now))
            if time.monotonic() - last_count >= 2.0:
                last_count = time.monotonic()
                with contextlib.suppress(Exception):
                    await counter.since(js)
            progress(spec, run_log, virtual_now - VIRTUAL_EPOCH, time.monotonic() - wall0)
            if repair is not None and plan is not None and virtual_now - VIRTUAL_EPOCH >= plan.repair_at_s:
                gpu = uuid_of.get((repair.node, repair.gpu), "")
                if gpu in run_log.quarantined_now():
                    health["repair"] = await operator_repair(nc, spec.cluster, gpu, repair.node, virtual_now)
                    repair = None
            if virtual_now >= end:
                reached = True
                break
            if time.monotonic() >= deadline:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        # the end: what chaos took down is back, the world's own view, explanations for unexplained
        # pending pods, then stop in order
        if chaos is not None:
            chaos_done = await chaos.finish(timeout=90.0)
        for f in followers:
            await f.sync(timeout=5.0)
        with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
            final = await world_snapshot(nc, spec.cluster, nodes=False, pods=True, timeout=5.0)
            snap_bad, snap_pods = snapshot_violations(final, gpus)
        # the world stops before the last explanations: a decision the binder applies now may still
        # preempt pods and re-queue them, and a pod re-queued after placement answered for the pending
        # ones would be left with no verdict. Placement then sees the binder's last events.
        exit_codes.update(await asyncio.to_thread(procs.stop, "binder", 15.0))
        for f in followers:
            await f.sync(timeout=5.0)
        await asyncio.sleep(1.0)  # placement decides (or parks) what the binder's last events re-queued
        for f in followers:
            await f.sync(timeout=5.0)
        await explain_pending(nc, spec.cluster, run_log, cfg.explain_limit)
        if health_on:
            with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
                health["stats"] = await bus.request(nc, HEALTH_STATS, {}, dict, timeout=5.0)
        if forecast_on:
            forecast["status"] = "running"
            with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
                forecast["stats"] = await bus.request(nc, FORECASTING_STATS, {}, dict, timeout=5.0)
            forecast["placement"] = await forecast_effect(placements, metrics_ports)
    except Interrupted:
        failure = "interrupted"
        raise
    except BaseException as exc:
        failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        for name in [p.name for p in procs.processes
                     if p.name.startswith(("placement", "telemetry-agent-", "health-scoring", "quota", "forecasting"))]:
            exit_codes.update(await asyncio.to_thread(procs.stop, name, 15.0))
        if any(p.name == "binder" for p in procs.processes):  # a run cut short (stopped already otherwise)
            await asyncio.sleep(1.0)  # decisions already published reach the binder
            exit_codes.update(await asyncio.to_thread(procs.stop, "binder", 15.0))
        with contextlib.suppress(Exception):
            for f in followers:
                await f.sync(timeout=5.0)
        for f in followers:
            with contextlib.suppress(Exception):
                await f.stop()
        event_writer.stop.set()
        with contextlib.suppress(Exception):
            await writer_task
        with contextlib.suppress(Exception):
            await delete_run_consumers(js, spec.cluster)
        if failure and failure != "interrupted":
            log.error("run %s failed: %s", spec.label, failure)
    messages = await counter.since(js)
    async with pool.connection() as conn:
        db = await count_placement_events_async(conn, spec.cluster)
    progress(spec, run_log, virtual_now - VIRTUAL_EPOCH, time.monotonic() - wall0)
    if failover is not None:
        failover = failover_figures(failover, run_log, exit_codes)
    quota: dict[str, Any] = {}
    if spec.label == "gpuaware" and service_built("gpuaware.services.quota"):
        from gpuaware.cli.quota import demo_summary
        try:
            quota = await demo_summary(pool, spec.cluster)
        except Exception as exc:  # the report says what failed; the run's other figures stand
            quota = {"status": f"no summary: {type(exc).__name__}: {exc}"}
    if forecast.get("status") == "running":
        from gpuaware.cli.demo_forecast import demand_accuracy
        forecast["model"] = dict(cfg.demand_model)
        try:
            forecast["accuracy"] = await demand_accuracy(pool, spec.cluster, VIRTUAL_EPOCH)
        except Exception as exc:  # the report says what failed; the run's other figures stand
            forecast["accuracy"] = {"status": f"not scored: {type(exc).__name__}: {exc}"}
    return RunResult(spec=spec, log=run_log, gpus=gpus, nodes=n_nodes, started_at=VIRTUAL_EPOCH,
                     virtual_end=virtual_now, wall_s=time.monotonic() - wall0, reached_end=reached,
                     messages=messages, db=db, snapshot_violations=snap_bad,
                     snapshot_pods=snap_pods, exit_codes=exit_codes,
                     services={"placement": spec.policy, "binder": "twin"}, failure=failure, failover=failover,
                     node_names=node_names, clock=clock, telemetry=telemetry, health=health,
                     quota=quota, chaos=chaos_done, forecast=forecast)


async def forecast_effect(placements: dict[str, Any], ports: dict[str, int]) -> dict[str, Any]:
    """Placement's forecast counters, read from the metrics of every instance still running (a
    killed leader's counts went with it)."""
    from gpuaware.cli.demo_forecast import placement_forecast_effect

    def scrape(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return reply.read().decode()

    texts = []
    for inst, proc in placements.items():
        if proc.alive():
            try:
                texts.append(await asyncio.to_thread(scrape, ports[inst]))
            except OSError as exc:
                log.warning("placement %s metrics unreadable: %s", inst, exc)
    return placement_forecast_effect(texts)


async def operator_repair(nc: bus.Client, cluster: str, gpu: str, node: str, virtual_now: float) -> dict[str, Any]:
    """What an operator does after the catalogue's REBOOT_NODE for XID 79: the node was rebooted and the
    GPU re-validated, so it goes back to work with its error history cleared (``gpuaware health uncordon
    GPU --clear``)."""
    req = CordonRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster, gpu_uuid=gpu,
                        action=CordonAction.UNCORDON, clear=True, by="demo-operator",
                        reason=f"node {node} rebooted after XID 79 (the catalogue's REBOOT_NODE); GPU re-validated")
    out: dict[str, Any] = {"gpu_uuid": gpu, "node": node, "requested_at": req.emitted_at,
                           "virtual_h": round((virtual_now - VIRTUAL_EPOCH) / 3600, 3), "reason": req.reason,
                           "by": req.by}
    try:
        reply = await bus.request(nc, HEALTH_CORDON, req, CordonReply, timeout=5.0)
    except (bus.RequestTimeout, bus.NoResponders, bus.ServiceError) as exc:
        return {**out, "error": str(exc)}
    return {**out, "previous": reply.previous.value, "current": reply.current.value, "changed": reply.changed}


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
