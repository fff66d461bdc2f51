"""The service's view of its cluster's GPUs: what to publish, and what the next checkpoint writes.

No I/O here: ``handlers.py`` decodes, calls these methods, sends what they return and awaits the
checkpoint; ``checkpoint.py`` writes what ``take_checkpoint`` hands it. Scoring itself is
``gpuaware.health`` (one ``HealthBook``, one ``AlertBook``); this module decides only:

* what to publish for an assessment: ``GpuStateChanged`` on a transition; ``GpuScored`` once per
  GPU per ``score_window_s`` of the telemetry's time, at once on a transition, a cordon or an
  uncordon, when the telemetry went stale, and when the score moved by ``score_delta``; the ``AlertRaised`` / ``AlertResolved``
  the AlertBook decides. Every message gets a message id derived from what it says (GPU, time,
  state, fingerprint), so the same assessment re-made after a crash is stored once by JetStream.
* a drain recommendation (``DrainRecommended``) with a transition into degraded or quarantined,
  when the GPU holds pods (``PodsOnGpus``, fed by placement's decisions and the binder's pod
  events): ``gpuaware.health.recommend_drain`` says which and in what order;
* what a redelivered message is: a delivery the server marks as repeated whose observation is not
  newer than what the GPU's track already applied was handled before the crash (the checkpoint
  holds it), so it is skipped and counted as ``redelivered``, never as bad input;
* what the next checkpoint writes: the GPUs touched since the last one, the scores published, the
  alerts raised and resolved, the overrides (``gpuaware.tsdb.HealthCheckpoint``).

Manual overrides (``health.cordon``) go through ``HealthBook.cordon`` / ``uncordon`` (recorded in the
GPU's ``audit``), into ``health_overrides`` and into the published messages' reasons as
``<action>_by:<who>`` and ``<action>_reason:<why>`` next to ``manual_cordon``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpuaware import bus
from gpuaware.health import (
    ActiveAlert,
    AlertBook,
    Assessment,
    GpuTrack,
    HealthBook,
    HealthConfig,
    Observation,
    PodOnGpu,
    PodsOnGpus,
    from_rolledup,
    from_sampled,
    recommend_drain,
)
from gpuaware.schemas import (
    AlertRaised,
    AlertResolved,
    CordonAction,
    CordonReply,
    CordonRequest,
    DrainPod,
    DrainRecommended,
    GpuRolledUp,
    GpuSampled,
    GpuScored,
    GpuStateChanged,
    HealthState,
    NodeInventory,
    PlacementDecided,
    RollupWindow,
)
from gpuaware.tsdb import HealthAlertRow, HealthCheckpoint, HealthOverrideRow, HealthScoreRow, HealthTrackRow

__all__ = ["SCORED", "STATE_CHANGED", "Outbound", "UnknownGpu", "View", "Work"]

SCORED = bus.event_channel(GpuScored)
STATE_CHANGED = bus.event_channel(GpuStateChanged)
RAISED = bus.event_channel(AlertRaised)
RESOLVED = bus.event_channel(AlertResolved)
DRAIN = bus.event_channel(DrainRecommended)
_WORSE = {HealthState.HEALTHY: 0, HealthState.DEGRADED: 1, HealthState.QUARANTINED: 2}
_ENCODER = msgspec.json.Encoder()
_REASON_MAX = 200


class UnknownGpu(LookupError):
    """A cordon named a GPU this service never saw (no telemetry, no inventory)."""


@dataclass(frozen=True, slots=True)
class Outbound:
    channel: bus.Channel[Any]
    msg: Any
    msg_id: str


@dataclass
class Work:
    """What one unit of work (a message, a tick, an override) produced."""

    out: list[Outbound] = field(default_factory=list)
    urgent: bool = False
    """a state change, an alert or an override: write the checkpoint now, not at the next interval"""
    assessments: list[Assessment] = field(default_factory=list)
    changed: bool = False
    """the view changed (a checkpoint must hold it before the message is acknowledged)"""


def _t(x: float) -> str:
    return f"{x:.6f}"


class View:
    """One cluster's GPUs: the book, the alerts, the publication policy, the pending checkpoint."""

    def __init__(self, config: HealthConfig, *, cluster: str, source: str, score_window_s: float = 60.0,
                 score_delta: float = 10.0, alert_resend_s: float | None = None,
                 agent_heartbeat_s: float = 0.0) -> None:
        self.config = config
        self.cluster = cluster
        self.source = source
        self.score_window_s = score_window_s
        self.score_delta = score_delta
        self.book = HealthBook(config)
        self.pods = PodsOnGpus()
        """which pods hold which GPUs (for drain recommendations)"""
        self.alerts = AlertBook(source=source, cluster=cluster, config=config, resend_after_s=alert_resend_s)
        self.version = 0
        """+1 per change of the view; a checkpoint taken at version v holds every change up to v"""
        self.counts: Counter[str] = Counter()
        """observations, redelivered, refused, other_cluster, ignored_windows, published per subject ..."""
        self.issues: Counter[str] = Counter()
        """bad input met since start, by kind (the book's InputCounters hold the totals per GPU)"""
        self.agent_heartbeat_s = agent_heartbeat_s
        self._seq: dict[str, int] = {}
        self._last_pub: dict[str, tuple[float, float]] = {}
        self._dirty: set[str] = set()
        self._scores: list[HealthScoreRow] = []
        self._alerts: list[HealthAlertRow] = []
        self._overrides: list[HealthOverrideRow] = []

    # --- restore ---------------------------------------------------------------------------------------
    def restore(self, tracks: dict[str, str], active_alerts: Iterable[str]) -> None:
        """What the last checkpoint held: every GPU's track and the open alerts."""
        dec = msgspec.json.Decoder(GpuTrack)
        self.book.tracks = {uuid: dec.decode(text) for uuid, text in tracks.items()}
        adec = msgspec.json.Decoder(ActiveAlert)
        active = [adec.decode(text) for text in active_alerts]
        self.alerts.active = {a.fingerprint: a for a in active}

    # --- input ---------------------------------------------------------------------------------------
    def describe(self, inv: NodeInventory) -> bool:
        """An inventory: where each GPU is and its model (its slowdown temperature). False when it is
        another cluster's."""
        if inv.cluster != self.cluster:
            return False
        for g in inv.gpus:
            t = self.book.tracks.get(g.uuid)
            if t is None or t.node != inv.node or t.gpu_index != g.index or t.model != g.model:
                self.book.describe(g.uuid, node=inv.node, gpu_index=g.index, model=g.model)
                self._touch(g.uuid)
        return True

    def placed(self, d: PlacementDecided) -> bool:
        """Placement put a pod on GPUs (its checkpointability and priority matter to a drain's order)."""
        if d.cluster != self.cluster or not d.slices:
            return False
        pod = PodOnGpu(uid=d.pod_uid, checkpointable=d.checkpointable, priority=d.priority, name=d.pod_name,
                       namespace=d.namespace)
        return self.pods.place(pod, (s.gpu_uuid for s in d.slices), d.decided_at)

    def gone(self, cluster: str, pod_uid: str) -> bool:
        """The binder says the pod left its GPUs (finished, preempted, or its binding failed)."""
        return cluster == self.cluster and self.pods.remove(pod_uid)

    def observations(self, msg: GpuSampled | GpuRolledUp) -> list[Observation]:
        if isinstance(msg, GpuSampled):
            obs = from_sampled(msg)
            if msg.interval_s < self.agent_heartbeat_s:  # adaptive sampling: see the setting
                obs = [msgspec.structs.replace(o, interval_s=self.agent_heartbeat_s) for o in obs]
            return obs
        if msg.window is not RollupWindow.MINUTE:
            self.counts["ignored_windows"] += 1
            return []
        return from_rolledup(msg, width_s=60.0)

    def observe(self, msg: GpuSampled | GpuRolledUp, *, redelivered: bool, now: float) -> Work:
        """One telemetry message: every GPU row scored; returns what to publish."""
        work = Work()
        if msg.cluster != self.cluster:
            self.counts["other_cluster"] += 1
            return work
        if isinstance(msg, GpuSampled) and not redelivered:
            last = self._seq.get(msg.node)
            if last is not None and msg.seq > last + 1:
                self.counts["lost_batches"] += msg.seq - last - 1  # the agent sent them; they never came
            if last is None or msg.seq > last or msg.seq == 0:  # 0: the agent restarted
                self._seq[msg.node] = msg.seq
        for obs in self.observations(msg):
            track = self.book.tracks.get(obs.gpu_uuid)
            if redelivered and track is not None and track.last_at is not None and obs.at <= track.last_at:
                self.counts["redelivered"] += 1  # handled before a crash: the checkpoint holds it
                continue
            a = self.book.observe(obs)
            self.counts["observations"] += 1
            for issue in a.issues:
                self.issues[issue.kind.value] += 1
            if not a.applied:
                self.counts["refused"] += 1
                self._touch(a.gpu_uuid)  # the bad-input counters are part of the track
                work.changed = True
                continue
            self._emit(work, a, now)
        return work

    def tick(self, now: float) -> Work:
        """GPUs whose telemetry is stale: scored (once per window), alerts decided, state held."""
        work = Work()
        for a in self.book.tick(now):
            for issue in a.issues:
                self.issues[issue.kind.value] += 1
            # the first tick of a stale period is news (placement prefers GPUs it can see): scored at once
            self._emit(work, a, now, force=bool(a.issues))
        return work

    def override(self, req: CordonRequest, now: float) -> tuple[Work, CordonReply]:
        """A cordon or an uncordon (``health.cordon``); raises ``UnknownGpu`` or ``ValueError`` (not
        cordoned, no reason)."""
        t = self.book.tracks.get(req.gpu_uuid)
        if t is None or not t.node:
            raise UnknownGpu(f"GPU {req.gpu_uuid} is not known to health-scoring of cluster {self.cluster} "
                             "(no telemetry or inventory seen)")
        by = req.by or req.source
        before = t.state
        if req.action is CordonAction.CORDON:
            a = self.book.cordon(req.gpu_uuid, reason=req.reason, by=by, at=now, state=req.state)
        else:
            a = self.book.uncordon(req.gpu_uuid, reason=req.reason, by=by, at=now, clear=req.clear)
        action = req.action.value
        extra = (f"{action}_by:{by}"[:_REASON_MAX], f"{action}_reason:{req.reason}"[:_REASON_MAX])
        work = Work(urgent=True)
        self._emit(work, a, now, force=True, extra_reasons=extra)
        self._overrides.append(HealthOverrideRow(
            gpu_uuid=req.gpu_uuid, at=now, action=action, reason=req.reason, requested_by=by,
            previous=before.value, current=a.state.value, cleared=req.clear, node=a.node))
        self.counts[f"{action}s"] += 1
        reply = CordonReply(source=self.source, emitted_at=now, cluster=self.cluster, gpu_uuid=req.gpu_uuid,
                            action=req.action, previous=before, current=a.state, at=now, by=by, reason=req.reason,
                            node=a.node, changed=a.changed, cleared=req.clear)
        return work, reply

    # --- output --------------------------------------------------------------------------------------
    def _touch(self, gpu: str) -> None:
        self._dirty.add(gpu)
        self.version += 1

    def _score_due(self, a: Assessment) -> bool:
        last = self._last_pub.get(a.gpu_uuid)
        if last is None:
            return True
        at, score = last
        w = self.score_window_s
        return math.floor(a.at / w) != math.floor(at / w) or abs(a.score - score) >= self.score_delta

    def _emit(self, work: Work, a: Assessment, now: float, *, force: bool = False,
              extra_reasons: tuple[str, ...] = ()) -> None:
        work.assessments.append(a)
        work.changed = True
        self._touch(a.gpu_uuid)
        node, gpu, cluster = a.node, a.gpu_uuid, self.cluster
        if not node:
            self.counts["no_node"] += 1  # a GPU known by uuid only cannot be published (node is required)
            return
        reasons = (*a.reasons, *extra_reasons)
        to = (cluster, node)
        change = a.to_state_changed(source=self.source, emitted_at=now, cluster=cluster)
        if change is not None:
            if extra_reasons:
                change = msgspec.structs.replace(change, reasons=reasons)
            work.out.append(Outbound(STATE_CHANGED.at(*to), change,
                                     f"hc/{cluster}/{gpu}/{_t(a.at)}/{a.state.value}"))
            work.urgent = True
            self.counts["state_changes"] += 1
            if a.previous is not None and _WORSE[a.state] > _WORSE[a.previous]:
                self._recommend_drain(work, a, now, to)
        if force or change is not None or self._score_due(a):
            scored = a.to_scored(source=self.source, emitted_at=now, cluster=cluster,
                                 model_version=self.config.model_version)
            if extra_reasons:
                scored = msgspec.structs.replace(scored, reasons=reasons)
            work.out.append(Outbound(SCORED.at(*to), scored, f"hs/{cluster}/{gpu}/{_t(a.at)}"))
            self._last_pub[gpu] = (a.at, a.score)
            self._scores.append(HealthScoreRow(
                cluster=cluster, gpu_uuid=gpu, node=node, at=a.at, score=a.score, state=a.state.value,
                risk=a.risk, gpu_index=a.gpu_index, changed=a.changed, cause=a.cause,
                previous=a.previous.value if a.previous is not None else None,
                components_json=_ENCODER.encode(a.components).decode(),
                reasons_json=_ENCODER.encode(reasons).decode()))
        decision = self.alerts.decide(a, emitted_at=now)
        for r in decision.raised:
            work.out.append(Outbound(RAISED.at(cluster), r,
                                     f"ar/{cluster}/{r.fingerprint}/{_t(r.started_at)}/{_t(a.at)}"))
            active = self.alerts.active.get(r.fingerprint)
            self._alerts.append(HealthAlertRow(
                fingerprint=r.fingerprint, started_at=r.started_at, rule=r.rule, severity=r.severity.value,
                gpu_uuid=r.gpu_uuid, node=r.node, summary=r.summary,
                active_json=_ENCODER.encode(active).decode() if active is not None else None))
            work.urgent = True
        for gone in decision.resolved:
            work.out.append(Outbound(RESOLVED.at(cluster), gone,
                                     f"ao/{cluster}/{gone.fingerprint}/{_t(gone.started_at)}"))
            self._alerts.append(HealthAlertRow(
                fingerprint=gone.fingerprint, started_at=gone.started_at, rule=gone.rule,
                severity=gone.severity.value, gpu_uuid=gone.gpu_uuid, node=gone.node, summary=gone.summary,
                resolved_at=gone.resolved_at))
            work.urgent = True

    def _recommend_drain(self, work: Work, a: Assessment, now: float, to: tuple[str, str]) -> None:
        plan = recommend_drain(a, self.pods.on(a.gpu_uuid, a.at), self.config)
        if plan is None:
            return
        pods = tuple(DrainPod(pod_uid=st.pod.uid, order=st.order, pod_name=st.pod.name, namespace=st.pod.namespace,
                              checkpointable=st.pod.checkpointable, priority=st.pod.priority,
                              running_s=st.pod.running_s, work_lost_s=st.work_lost_s) for st in plan.steps)
        msg = DrainRecommended(source=self.source, emitted_at=now, cluster=self.cluster, node=a.node,
                               gpu_uuid=a.gpu_uuid, gpu_index=a.gpu_index, state=a.state, risk=min(1.0, a.risk),
                               urgent=plan.urgent, reason=plan.reason[:_REASON_MAX * 5], recommended_at=a.at,
                               pods=pods)
        work.out.append(Outbound(DRAIN.at(*to), msg, f"hd/{self.cluster}/{a.gpu_uuid}/{_t(a.at)}/{a.state.value}"))
        self.counts["drain_recommendations"] += 1

    # --- checkpoints ---------------------------------------------------------------------------------
    def take_checkpoint(self) -> tuple[HealthCheckpoint, int]:
        """The rows of everything changed since the last checkpoint, and the version they hold."""
        tracks = []
        for gpu in sorted(self._dirty):
            t = self.book.tracks.get(gpu)
            if t is not None:
                tracks.append(HealthTrackRow(gpu_uuid=gpu, node=t.node, state=t.state.value,
                                             track_json=_ENCODER.encode(t).decode()))
        cp = HealthCheckpoint(cluster=self.cluster, tracks=tracks, scores=self._scores, alerts=self._alerts,
                              overrides=self._overrides)
        self._dirty, self._scores, self._alerts, self._overrides = set(), [], [], []
        return cp, self.version

    def give_back(self, cp: HealthCheckpoint) -> None:
        """A checkpoint that could not be written: its rows go into the next one (tracks are re-read then)."""
        self._dirty |= {t.gpu_uuid for t in cp.tracks}
        self._scores = [*cp.scores, *self._scores]
        self._alerts = [*cp.alerts, *self._alerts]
        self._overrides = [*cp.overrides, *self._overrides]

    # --- figures -------------------------------------------------------------------------------------
    def states(self) -> dict[str, int]:
        out = {s.value: 0 for s in HealthState}
        for t in self.book.tracks.values():
            if t.last_at is not None or t.override is not None:
                out[t.state.value] += 1
        return out
