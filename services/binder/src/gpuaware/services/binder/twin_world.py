"""The digital twin as the binder's world: translation to the contract, and the twin's time loop.

``TwinWorld`` wraps a ``gpuaware.sim.twin.Twin`` (the truth) and an accelerated clock. Every call
first brings the twin up to the clock (``_sync``), so a bind happens at the virtual instant it is
made, not at the loop's last tick; the events that catch-up produced wait in an outbox that
``run`` publishes in order. ``run`` sleeps until the twin's next event is due in wall time (at most
``tick_s``), wakes early when a call scheduled something sooner (a checkpoint answer, a departure),
and - with ``skip_idle`` - jumps the clock over stretches where nothing is pending and no
checkpoint is in flight: event-driven virtual time, so a sparse trace does not replay its quiet
nights in wall time.

De-duplication ids (``<cluster>/<kind>/<key>``) are built here from the twin's own counters, so a
republished event after a crash is the same stream message: ``pending/<uid>/<attempt>``,
``finished/<uid>``, ``checkpoint-ack/<request id>/<answer>``.

An elastic job's workers share its work in the twin (``gpuaware.sim.twin.elastic``): they finish
together, and a worker still pending then is withdrawn (``binder.pod.finished.v1``, outcome
``deleted``, no node). The twin answers a resize's checkpoint requests like any other.

The twin lives in the binder's process, so a killed binder would take the whole simulated cluster
with it — unlike a real one, whose pods keep running while its binder restarts. ``restore`` gives
the twin that property: a restarted binder replays what the killed one published (its BINDER
events, in virtual-time order) into a fresh twin — arrivals, departures and checkpoint answers come
again from the twin's own deterministic schedule, bindings and evictions are applied as they were —
and resumes the clock where that left off. Events the twin produced but the killed binder had not
published yet are published now (the same message ids, so none is stored twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gpuaware.placement import NodeSpec
from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    Event,
    GpuSlice,
    NodePowerChanged,
    NodePowerRecommended,
    PlacementDecided,
    PlannedPreemption,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
    PodUnschedulable,
    QosClass,
    TopologyPreference,
    WorldGpu,
    WorldNode,
    WorldPod,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.world import ElasticWorkers, Emit, PodStateName, Worker, WorldRefused
from gpuaware.sim import (
    AcceleratedClock,
    Arrived,
    Binding,
    CheckpointAnswered,
    Finished,
    Pacer,
    Refused,
    SimPod,
    Slice,
    Twin,
    TwinEvent,
    Withdrawn,
    decode_faults,
    default_cluster,
    from_openb,
    generate,
    load_philly,
    load_pods,
    openb_cluster,
    openb_node_list,
    shared_data_dir,
    spec_for_cluster,
    to_faults,
)

__all__ = ["TwinWorld", "build_twin", "build_world"]

log = logging.getLogger(__name__)


def _gpu_slice(s: Slice) -> GpuSlice:
    return GpuSlice(gpu_uuid=s.gpu_uuid, gpu_index=s.gpu_index or 0, gpu_milli=s.gpu_milli, memory_mib=s.memory_mib)


class TwinWorld:
    """The twin behind the ``World`` protocol (see the module docstring)."""

    kind = "twin"

    def __init__(self, twin: Twin, clock: AcceleratedClock, *, source: str = "binder/twin",
                 skip_idle: bool = True, tick_s: float = 0.25, pacer: Pacer | None = None,
                 pace_wall: Callable[[], float] = time.monotonic) -> None:
        self.twin = twin
        self.clock = clock
        self.pacer = pacer
        """slows ``clock`` while the services lag it (``gpuaware.sim.Pacer``); None: the speed is fixed"""
        self.pace_wall = pace_wall
        """the wall seconds the pacer's lags are timed in"""
        if pacer is not None:  # the binder follows placement's verdicts for a world that has this hook
            self.unschedulable = self._unschedulable
        self.cluster = twin.cluster
        self.source = source
        self.skip_idle = skip_idle
        self.tick_s = tick_s
        self._outbox: list[tuple[Event, str]] = []
        self._wake = asyncio.Event()
        self.published = 0

    # --- time ---------------------------------------------------------------------------------------

    def now(self) -> float:
        return max(self.twin.now, self.clock())

    def wall_seconds(self, world_seconds: float) -> float:
        return self.clock.to_wall(world_seconds)

    def _sync(self) -> None:
        t = self.clock()
        if t > self.twin.now:
            events = self.twin.advance(t)
            if events:
                self._outbox.extend(self._message(e) for e in events)
                self._wake.set()

    def _idle(self) -> bool:
        counts = self.twin.counts()
        return counts["pending"] == 0 and self.twin.checkpoints_in_flight == 0 and not self._outbox

    async def run(self, emit: Emit, stop: asyncio.Event) -> None:
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                self._sync()
                while self._outbox:
                    event, msg_id = self._outbox[0]
                    await emit(event, msg_id)  # raises: the event stays first in line
                    self._outbox.pop(0)
                    self.published += 1
                    if isinstance(event, PodPending):
                        self._pending_out(event)
                nxt = self.twin.next_event_at()
                if nxt is not None and self.skip_idle and self._idle() and nxt > self.clock():
                    self.clock.skip_to(nxt)
                    continue
                delay = self.tick_s if nxt is None else min(self.tick_s, self.clock.wall_delay(nxt))
                self._wake.clear()
                if delay > 0:
                    waker = asyncio.create_task(self._wake.wait())
                    await asyncio.wait({waker, stopping}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
                    waker.cancel()
                else:
                    await asyncio.sleep(0)
        finally:
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping

    # --- pace ---------------------------------------------------------------------------------------

    def _pending_out(self, pending: PodPending) -> None:
        if self.pacer is not None:
            self.pacer.published(pending.pod_uid, pending.attempt, self.pace_wall())

    def _answered(self, pod_uid: str, attempt: int) -> None:
        """Placement's verdict on a pending the twin published: the pacer may change the clock's speed."""
        if self.pacer is None:
            return
        speed = self.pacer.answered(pod_uid, attempt, self.pace_wall())
        if speed is not None:
            self.clock.set_speed(speed)
            change = self.pacer.changes[-1]
            log.warning("the services answer %.0f virtual s after a pod's pending (median): the twin runs at %.4gx "
                        "now (asked %.4gx)", change.lag_virtual_s, speed, self.pacer.nominal)

    async def _unschedulable(self, ev: PodUnschedulable) -> None:
        """Placement parked a pod: an answer as much as a decision (the pacer's lag ends here)."""
        if ev.cluster == self.cluster:
            self._answered(ev.pod_uid, ev.attempt)

    # --- recovery -----------------------------------------------------------------------------------

    def restore(self, published: Iterable[Event]) -> dict[str, int]:
        """Bring a fresh twin to where a killed binder's twin was, from the events that binder published
        (module docstring). Returns counts: events replayed, bindings and evictions re-applied, events
        published again, and ``diverged`` (an event the replay could not reproduce; logged)."""
        events = sorted((e for e in published if getattr(e, "cluster", None) == self.cluster), key=_virtual_at)
        seen = {k for k in map(_key, events) if k is not None}
        produced: list[tuple[Event, str]] = []
        counts = {"events": len(events), "bound": 0, "evicted": 0, "requeued": 0, "powered": 0, "republished": 0,
                  "diverged": 0}
        twin = self.twin
        for ev in events:
            at = _virtual_at(ev)
            if at > twin.now:
                produced.extend(self._message(e) for e in twin.advance(at))
            try:
                if isinstance(ev, PodBound) and twin.state(ev.pod_uid) == "pending":
                    twin.bind(ev.pod_uid, ev.node, [Slice(s.gpu_uuid, s.gpu_milli, s.memory_mib, s.gpu_index)
                                                    for s in ev.slices], decision_id=ev.decision_id)
                    counts["bound"] += 1
                elif isinstance(ev, PodPreempted) and twin.state(ev.pod_uid) == "bound":
                    twin.evict(ev.pod_uid, checkpointed=ev.checkpointed)
                    counts["evicted"] += 1
                elif isinstance(ev, PodPending) and twin.state(ev.pod_uid) == "pending" \
                        and ev.attempt > twin.attempt(ev.pod_uid):
                    twin.requeue(ev.pod_uid)  # a transient bind failure counted another attempt
                    counts["requeued"] += 1
                elif isinstance(ev, CheckpointRequested) and twin.state(ev.pod_uid) == "bound":
                    twin.request_checkpoint(ev.pod_uid, ev.request_id)
                elif isinstance(ev, NodePowerChanged) and ev.node in twin.nodes and not ev.reason:
                    if ev.state == "off":
                        twin.power_off(ev.node)
                    elif ev.state == "booting":
                        twin.power_on(ev.node)
                    counts["powered"] += 1
                elif isinstance(ev, PodFinished) and twin.state(ev.pod_uid) != "finished":
                    counts["diverged"] += 1
                    log.warning("restore: %s finished at %.0f but the replayed twin has it %s", ev.pod_uid, at,
                                twin.state(ev.pod_uid))
            except Refused as r:
                counts["diverged"] += 1
                log.warning("restore: %s of %s not reproduced: %s", type(ev).__name__, getattr(ev, "pod_uid", ""), r)
        again = [(e, m) for e, m in produced if not isinstance(e, PodPending) and _key(e) not in seen]
        again += [(self._pending(pod, twin.attempt(pod.uid), twin.now),
                   f"{self.cluster}/pending/{pod.uid}/{twin.attempt(pod.uid)}")
                  for pod in twin.pending() if ("pending", pod.uid, str(twin.attempt(pod.uid))) not in seen]
        self._outbox.extend(again)
        counts["republished"] = len(again)
        self.clock.skip_to(twin.now)  # time goes on from where the killed twin's last event was
        return counts

    # --- translation --------------------------------------------------------------------------------

    def _pending(self, pod: SimPod, attempt: int, at: float) -> PodPending:
        return PodPending(
            source=self.source, emitted_at=at, cluster=self.cluster, pod_uid=pod.uid, pod_name=pod.name,
            namespace=pod.namespace, submitted_at=self.twin.start + pod.arrival_s, cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib, num_gpu=pod.num_gpu, gpu_milli=pod.gpu_milli,
            gpu_memory_mib=pod.gpu_memory_mib, gpu_types=pod.gpu_types, gang_id=pod.gang_id,
            gang_min_members=pod.gang_min_members, gang_max_members=pod.gang_max_members,
            topology=TopologyPreference(pod.topology), queue=pod.queue, priority=pod.priority,
            priority_class=pod.priority_class, checkpointable=pod.checkpointable, deferrable=pod.deferrable,
            qos=QosClass(pod.qos), expected_duration_s=pod.duration_s, attempt=attempt,
        )

    def _bound(self, b: Binding) -> PodBound:
        return PodBound(
            source=self.source, emitted_at=b.bound_at, cluster=self.cluster, pod_uid=b.pod.uid,
            pod_name=b.pod.name, namespace=b.pod.namespace, node=b.node,
            slices=tuple(_gpu_slice(s) for s in b.slices), bound_at=b.bound_at, decision_id=b.decision_id,
            queue=b.pod.queue,
        )

    def _message(self, e: TwinEvent) -> tuple[Event, str]:
        c = self.cluster
        if isinstance(e, Arrived):
            return self._pending(e.pod, 0, e.at), f"{c}/pending/{e.pod.uid}/0"
        if isinstance(e, Finished):
            b = e.binding
            return PodFinished(
                source=self.source, emitted_at=e.at, cluster=c, pod_uid=b.pod.uid, pod_name=b.pod.name,
                namespace=b.pod.namespace, outcome=PodOutcome.SUCCEEDED, finished_at=e.at, node=b.node,
                started_at=e.started_at, exit_code=0, slices=tuple(_gpu_slice(s) for s in b.slices),
            ), f"{c}/finished/{b.pod.uid}"
        if isinstance(e, Withdrawn):
            p = e.pod
            return PodFinished(
                source=self.source, emitted_at=e.at, cluster=c, pod_uid=p.uid, pod_name=p.name,
                namespace=p.namespace, outcome=PodOutcome.DELETED, finished_at=e.at, started_at=e.started_at,
                message="its elastic job finished",
            ), f"{c}/finished/{p.uid}"
        if isinstance(e, CheckpointAnswered):
            return CheckpointAcknowledged(
                source=f"{self.source}/workload", emitted_at=e.at, cluster=c, request_id=e.request_id,
                pod_uid=e.pod.uid, namespace=e.pod.namespace, status=CheckpointStatus(e.status),
                acknowledged_at=e.at, checkpoint_uri=e.checkpoint_uri,
            ), f"{c}/checkpoint-ack/{e.request_id}/{e.answer}"
        raise TypeError(f"unknown twin event {e!r}")

    # --- the World protocol -------------------------------------------------------------------------

    async def state(self, pod_uid: str) -> PodStateName:
        self._sync()
        s = self.twin.state(pod_uid)
        return "unknown" if s is None or s == "future" else s

    async def bound(self, pod_uid: str) -> PodBound | None:
        self._sync()
        b = self.twin.binding(pod_uid)
        return None if b is None else self._bound(b)

    async def checkpointable(self, pod_uid: str) -> bool:
        pod = self.twin.pod(pod_uid)
        return pod is not None and pod.checkpointable

    async def elastic_workers(self, pod_uid: str) -> ElasticWorkers | None:
        self._sync()
        job = self.twin.elastic_job(pod_uid)
        if job is None or job.finished:
            return None
        running = []
        for uid in sorted(job.running):
            b = self.twin.binding(uid)
            assert b is not None
            running.append(Worker(uid, b.pod.name, b.pod.namespace, b.node))
        return ElasticWorkers(job.key, job.minimum, tuple(running))

    async def bind(self, decision: PlacementDecided) -> PodBound:
        self._answered(decision.pod_uid, decision.attempt)
        self._sync()
        slices = [Slice(s.gpu_uuid, s.gpu_milli, s.memory_mib, s.gpu_index) for s in decision.slices]
        try:
            b = self.twin.bind(decision.pod_uid, decision.node, slices, decision_id=decision.decision_id)
        except Refused as r:
            raise WorldRefused(r.reason.value, r.message, transient=r.transient) from None
        self._wake.set()  # its departure may be due before the loop's planned wake-up
        return self._bound(b)

    async def evict(self, victim: PlannedPreemption, *, checkpointed: bool,
                    decision: PlacementDecided) -> tuple[PodPreempted, PodPending | None]:
        self._sync()
        b = self.twin.binding(victim.pod_uid)
        if b is not None and b.node != victim.node:
            raise WorldRefused("victim_moved", f"pod {victim.pod_uid} runs on {b.node}, not {victim.node}",
                               transient=True)
        try:
            ev = self.twin.evict(victim.pod_uid, checkpointed=checkpointed)
        except Refused as r:
            raise WorldRefused(r.reason.value, r.message, transient=r.transient) from None
        pod = ev.binding.pod
        preempted = PodPreempted(
            source=self.source, emitted_at=ev.at, cluster=self.cluster, pod_uid=pod.uid, pod_name=pod.name,
            namespace=pod.namespace, node=ev.binding.node, reason=victim.reason, preempted_at=ev.at,
            decision_id=decision.decision_id, preemptor_pod_uid=decision.pod_uid, checkpointed=ev.checkpointed,
            requeued=True, slices=tuple(_gpu_slice(s) for s in ev.binding.slices),
        )
        requeued = self._pending(pod, ev.attempt, ev.at)
        self._pending_out(requeued)  # the binder publishes it next
        return preempted, requeued

    async def request_checkpoint(self, request: CheckpointRequested) -> None:
        self._sync()
        try:
            self.twin.request_checkpoint(request.pod_uid, request.request_id)
        except Refused as r:
            raise WorldRefused(r.reason.value, r.message, transient=r.transient) from None
        self._wake.set()

    async def requeue(self, pod_uid: str) -> PodPending | None:
        self._sync()
        if self.twin.state(pod_uid) != "pending":
            return None
        attempt = self.twin.requeue(pod_uid)
        pod = self.twin.pod(pod_uid)
        assert pod is not None
        pending = self._pending(pod, attempt, self.now())
        self._pending_out(pending)  # the binder publishes it next
        return pending

    async def power(self, rec: NodePowerRecommended) -> NodePowerChanged:
        """Switch a twin node (``Twin.power_off`` / ``power_on``): off at once, or booting until ready."""
        self._sync()
        now = self.twin.now
        reason, ready = "", None
        try:
            if rec.action == "power-down":
                self.twin.power_off(rec.node)
            else:
                ready = self.twin.power_on(rec.node)
        except Refused as r:
            reason = f"{r.reason.value}: {r.message}"
        state = self.twin.power.state(rec.node) if rec.node in self.twin.nodes else "on"
        self._wake.set()
        return NodePowerChanged(source=self.source, emitted_at=now, cluster=self.cluster, node=rec.node, state=state,
                                ready_at=ready if state == "booting" else None, changed_at=now,
                                recommendation_id=rec.recommendation_id, reason=reason)

    async def snapshot(self, request: WorldSnapshotRequest) -> WorldSnapshotReply:
        self._sync()
        twin, limit = self.twin, request.limit
        nodes: tuple[WorldNode, ...] = ()
        next_node = None
        if request.include_nodes:
            names = list(twin.nodes)
            page = names[request.node_offset:request.node_offset + limit]
            nodes = tuple(_world_node(twin.nodes[n], twin) for n in page)
            if request.node_offset + limit < len(names):
                next_node = request.node_offset + limit
        pods: tuple[WorldPod, ...] = ()
        next_pod = None
        bindings = twin.bindings()
        if request.include_pods:
            page_b = bindings[request.pod_offset:request.pod_offset + limit]
            pods = tuple(
                WorldPod(pod_uid=b.pod.uid, pod_name=b.pod.name, namespace=b.pod.namespace, node=b.node,
                         slices=tuple(_gpu_slice(s) for s in b.slices), bound_at=b.bound_at,
                         decision_id=b.decision_id, queue=b.pod.queue, priority=b.pod.priority,
                         cpu_milli=b.pod.cpu_milli, memory_mib=b.pod.memory_mib,
                         checkpointable=b.pod.checkpointable, gang_id=b.pod.gang_id)
                for b in page_b
            )
            if request.pod_offset + limit < len(bindings):
                next_pod = request.pod_offset + limit
        return WorldSnapshotReply(
            source=self.source, emitted_at=self.now(), cluster=self.cluster, world=self.kind, at=twin.now,
            generation=twin.generation, nodes=nodes, pods=pods, total_nodes=len(twin.nodes),
            total_pods=len(bindings), pending_pods=twin.counts()["pending"], next_node_offset=next_node,
            next_pod_offset=next_pod,
        )


def _virtual_at(ev: Event) -> float:
    """When an event happened in the twin's time (each carries it in its own field)."""
    for name in ("bound_at", "preempted_at", "finished_at", "acknowledged_at"):
        at = getattr(ev, name, None)
        if at is not None:
            return float(at)
    return float(ev.emitted_at)


def _key(ev: Event) -> tuple[str, ...] | None:
    """What makes two publications the same event, for the events the twin's own schedule produces."""
    if isinstance(ev, PodPending):
        return ("pending", ev.pod_uid, str(ev.attempt))
    if isinstance(ev, PodFinished):
        return ("finished", ev.pod_uid)
    if isinstance(ev, CheckpointAcknowledged):
        return ("ack", ev.request_id)
    return None


def _world_node(spec: NodeSpec, twin: Twin) -> WorldNode:
    return WorldNode(
        name=spec.name, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib, gpu_model=spec.gpu_model,
        gpus=tuple(WorldGpu(uuid=g.uuid, index=g.index, model=g.model, memory_mib=g.memory_mib,
                            nvlink_island=g.nvlink_island, numa_node=g.numa_node)
                   for g in twin.node_gpus[spec.name]),
        rack=spec.rack or None, zone=spec.zone or None, labels=dict(spec.labels),
    )


# --- building the twin from settings ---------------------------------------------------------------


def _shared(settings: BinderSettings) -> Path:
    return Path(settings.shared_data) if settings.shared_data else shared_data_dir()


def _nodes(settings: BinderSettings) -> tuple[NodeSpec, ...]:
    choice = settings.twin_nodes
    if choice == "auto":
        openb = openb_node_list(_shared(settings))
        return openb_cluster(openb) if openb.is_file() else default_cluster(settings.twin_default_nodes)
    if choice == "default":
        return default_cluster(settings.twin_default_nodes)
    if choice == "openb":
        return openb_cluster(openb_node_list(_shared(settings)))
    return openb_cluster(choice)


def _workload(settings: BinderSettings, nodes: tuple[NodeSpec, ...]) -> tuple[SimPod, ...]:
    start = None if settings.window_start_s < 0 else settings.window_start_s
    if settings.workload == "none":
        return ()
    if settings.workload == "generator":
        gpus = sum(n.num_gpu for n in nodes)
        spec = spec_for_cluster(gpus, load=settings.load, duration_s=settings.window_s,
                                available_models=tuple(sorted({n.gpu_model for n in nodes})),
                                max_pods=settings.max_pods, elastic=settings.elastic)
        return generate(spec, settings.seed)
    if settings.workload == "openb":
        name = settings.workload_file or "default"
        path = Path(name) if "/" in name or name.endswith(".csv") else (
            _shared(settings) / "openb" / f"openb_pod_list_{name}.csv")
        pods = load_pods(path)
        first = min((p.creation_time or 0.0 for p in pods), default=0.0)
        return from_openb(pods, window_start=None if start is None else first + start, window_s=settings.window_s,
                          max_pods=settings.max_pods)
    path = Path(settings.workload_file) if settings.workload_file else (
        _shared(settings) / "pollux" / "traces" / "philly.csv")
    return load_philly(path, window_start=start, window_s=settings.window_s, max_pods=settings.max_pods)


def build_twin(settings: BinderSettings, *, start: float) -> Twin:
    """The twin the settings describe (reads the node list and the trace: the binder's start-up I/O)."""
    nodes = _nodes(settings)
    twin = Twin(nodes, _workload(settings, nodes), start=start, seed=settings.seed, cluster=settings.cluster,
                checkpoint_delay_s=(settings.checkpoint_delay_min_s, settings.checkpoint_delay_max_s),
                fleet=settings.fleet, traces=settings.fleet_traces, restart_delay_s=settings.resize_restart_delay_s)
    if twin.fleet is not None and settings.faults.strip():
        twin.fleet.inject(*to_faults(decode_faults(settings.faults), start))  # the GPUs' future, planned
    return twin


def build_world(settings: BinderSettings, *, source: str = "binder/twin") -> TwinWorld:
    start = settings.start if settings.start > 0 else time.time()
    twin = build_twin(settings, start=start)
    return TwinWorld(twin, AcceleratedClock(speed=settings.speed, start=start), source=source,
                     skip_idle=settings.skip_idle, tick_s=settings.tick_s, pacer=Pacer(settings.speed))
