"""The event-sourced view placement keeps, and the decisions it makes from it (no I/O here).

Every instance, leader or standby, applies the same events in stream order: inventories and GPU
health build the cluster, decisions and unschedulable verdicts (ours or a previous leader's) and the
binder's bound / bind-failed / preempted / finished events build the allocation ledger. A standby is
therefore *hot*: when it wins the lease its view is already the leader's, which is what makes
fail-over take seconds. A restarted instance rebuilds the same view by replaying the streams.

Preemption: a pod that fits nowhere may evict pods of lower priority (`gpuaware.placement.preempt`
picks the cheapest plan); the plan rides in the decision, the binder executes it (checkpoint
handshake first for pods that can), and every instance's ledger releases the victims when it applies
the decision, so leader and standbys agree. A pod is planned for at most once per
`preemption_cooldown_s`, so a pod that no plan can help costs nothing on every retry pass.

Only the leader decides (`on_pending`, `retry`): each returns the messages to publish, the ledger
already changed (reserve on decide), so the handlers only publish and acknowledge. One snapshot per
decision: the cluster is rebuilt lazily (after inventory changes) at the start of a cycle, never in
the middle of one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from gpuaware.placement import (
    DEGRADED,
    HEALTHY,
    MILLI,
    QUARANTINED,
    Decision,
    GpuModel,
    NodeSpec,
    PodRequest,
    RequestError,
    Snapshot,
    Status,
    TypicalPods,
    build_scheduler,
)
from gpuaware.placement.cache import CachedScheduler, shape_of
from gpuaware.placement.explain import PodExplanation, explain, node_class_names
from gpuaware.placement.framework import Code
from gpuaware.placement.gang import Gang, GangFailure, GangTable, place_gang
from gpuaware.placement.ledger import HOLDING, Ledger, Phase, PodEntry
from gpuaware.placement.preempt import PreemptionPlan, Victim, plan_preemption
from gpuaware.schemas.binder import PodBindFailed, PodBound, PodFinished, PodPreempted
from gpuaware.schemas.forecast import GpuUtilPredicted
from gpuaware.schemas.health import GpuScored, GpuStateChanged, HealthState
from gpuaware.schemas.inventory import GpuInfo, NodeInventory
from gpuaware.schemas.placement import (
    PlacementDecided,
    PlannedPreemption,
    PodUnschedulable,
    UnschedulableReason,
)
from gpuaware.schemas.pods import PodPending
from gpuaware.schemas.telemetry import GpuRolledUp, RollupWindow
from gpuaware.schemas.world import WorldSnapshotReply
from gpuaware.services.placement import convert

log = logging.getLogger(__name__)

_HEALTH = {HealthState.HEALTHY: HEALTHY, HealthState.DEGRADED: DEGRADED, HealthState.QUARANTINED: QUARANTINED}


def decision_id(uid: str, attempt: int) -> str:
    """Deterministic: a redelivered pending pod yields the same id, so JetStream stores it once."""
    return f"{uid}/{attempt}"


def attempt_of(decision: str | None) -> int | None:
    if not decision or "/" not in decision:
        return None
    tail = decision.rsplit("/", 1)[1]
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True, slots=True)
class Decided:
    msg: PlacementDecided


@dataclass(frozen=True, slots=True)
class Unschedulable:
    msg: PodUnschedulable


@dataclass(frozen=True, slots=True)
class Rejected:
    """An invalid request: publish `msg`, then dead-letter the pending message with `reason`."""

    msg: PodUnschedulable
    reason: str


Outcome = Decided | Unschedulable | Rejected


@dataclass(slots=True)
class Counters:
    pending_seen: int = 0
    duplicates: int = 0
    decided: int = 0
    unschedulable: int = 0
    unresolvable: int = 0
    rejected: int = 0
    retried_decided: int = 0
    gangs_placed: int = 0
    cluster_rebuilds: int = 0
    scheduler_rebuilds: int = 0
    other_cluster: int = 0
    preemptions_planned: int = 0
    victims_planned: int = 0


@dataclass
class PlacementState:
    cluster_name: str
    source: str
    policy_name: str
    policy_config: dict[str, Any]
    typical: TypicalPods | None = None
    learn_typical: bool = True
    typical_min_pods: int = 200
    typical_window: int = 5000
    typical_drift: float = 0.15
    seed: int = 0
    max_tombstones: int = 200_000
    preemption: bool = True
    preemption_cooldown_s: float = 30.0
    max_victims: int = 16
    checkpoint_grace_s: float = 60.0
    clock: Callable[[], float] = time.time

    ledger: Ledger = field(init=False)
    scheduler: CachedScheduler | None = field(init=False, default=None)
    gangs: GangTable = field(init=False, default_factory=GangTable)
    counters: Counters = field(init=False, default_factory=Counters)
    specs: dict[str, NodeSpec] = field(init=False, default_factory=dict)
    gpus: dict[str, tuple[GpuInfo, ...]] = field(init=False, default_factory=dict)
    models: dict[str, GpuModel] = field(init=False, default_factory=dict)
    capability: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
    forecasts: dict[str, GpuUtilPredicted] = field(init=False, default_factory=dict)
    world_nodes: set[str] = field(init=False, default_factory=set)
    avoid: dict[str, set[str]] = field(init=False, default_factory=dict)
    """pod uid -> nodes the binder refused it on (transiently): not chosen again for it"""
    _slot: dict[tuple[str, str], int] = field(init=False, default_factory=dict)
    _dirty: bool = field(init=False, default=False)
    _classes: list[str] = field(init=False, default_factory=list)
    _shapes: deque = field(init=False)
    _since_learn: int = field(init=False, default=0)
    _learned: bool = field(init=False, default=False)
    _planned_at: dict[str, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.ledger = Ledger(max_tombstones=self.max_tombstones)
        self._shapes = deque(maxlen=max(1, self.typical_window))
        if self.typical is None:
            self.typical = TypicalPods.from_counts(convert.PRIOR)

    # -- the cluster ----------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.specs)

    def ensure_cluster(self) -> bool:
        """Rebuild the cluster after inventory changes (between cycles). True when there is one."""
        if self._dirty:
            self._dirty = False
            specs = [self.specs[n] for n in sorted(self.specs)]
            catalog = {name: m for name, m in self.models.items()}
            unplaced = self.ledger.set_nodes(specs, catalog)
            self.counters.cluster_rebuilds += 1
            if unplaced:
                log.warning("cluster view rebuilt (%d nodes): %d pods hold GPUs on nodes not in the view",
                            len(specs), len(unplaced))
            else:
                log.info("cluster view rebuilt: %d nodes", len(specs))
            self._classes = node_class_names(self.ledger.cluster.snapshot()) if self.ledger.cluster else []
            self._build_scheduler()
            for e in self.ledger.waiting([Phase.UNRESOLVABLE]):
                self.ledger.set_phase(e, Phase.PARKED)  # a new node set may hold them: the next pass sees
        return self.ledger.cluster is not None

    def _build_scheduler(self) -> None:
        n = len(self.specs)
        rank = np.random.default_rng(self.seed).permutation(n) if n else None
        sched = build_scheduler(self.policy_config, typical=self.typical, seed=self.seed, tie_rank=rank,
                                name=self.policy_name)
        self.scheduler = CachedScheduler(sched)
        self.counters.scheduler_rebuilds += 1

    def apply_inventory(self, inv: NodeInventory) -> bool:
        """A node's full inventory. True when the node set or a node changed (capacity may be new).
        Nodes the world's snapshot described are the world's: agents' inventories do not override them."""
        if inv.cluster != self.cluster_name or inv.node in self.world_nodes:
            return False
        return self._set_node(*convert.node_of(inv))

    def apply_world(self, page: WorldSnapshotReply) -> int:
        """One page of the world's truth: its nodes replace the view's, its bound pods are committed.
        Returns the number of pods applied."""
        for n in page.nodes:
            self.world_nodes.add(n.name)
            self._set_node(*convert.node_of_world(n))
        for pod in page.pods:
            attempt = attempt_of(pod.decision_id) or 0
            slots = self._slots(pod.node, pod.slices) or ()
            request = convert.observed_request(pod.pod_uid, pod.cpu_milli, pod.memory_mib, pod.slices,
                                               priority=pod.priority, gang_id=pod.gang_id)
            self.ledger.bound(pod.pod_uid, attempt, pod.node, slots, request, pod.decision_id or "", pod.bound_at,
                              gpu_mem=pod.slices[0].memory_mib if pod.slices else 0)
            self._remember(pod.pod_uid, pod)
            if pod.gang_id:
                self.gangs.gangs.setdefault(pod.gang_id, Gang(pod.gang_id, 1, placed=True)).placed = True
        return len(page.pods)

    def _set_node(self, spec: NodeSpec, gpus: tuple[GpuInfo, ...], model: GpuModel | None,
                  cc: tuple[int, int]) -> bool:
        name = spec.name
        if model is not None:
            known = self.models.get(model.name)
            if known != model:
                self.models[model.name] = model
                self.capability[model.name] = cc
                if known is not None:
                    self._dirty = True
        if self.specs.get(name) == spec and self.gpus.get(name) == gpus:
            return False
        self.specs[name] = spec
        self.gpus[name] = gpus
        for slot, g in enumerate(gpus):
            self._slot[(name, g.uuid)] = slot
        self._dirty = True
        return True

    def apply_health(self, ev: GpuStateChanged) -> bool:
        if ev.cluster != self.cluster_name:
            return False
        slot = self._slot_of(ev.node, ev.gpu_uuid, ev.gpu_index)
        if slot is None:
            return False
        return self.ledger.set_gpu_health(ev.node, slot, _HEALTH[ev.current])

    def apply_forecast(self, ev: GpuUtilPredicted) -> bool:
        """A utilisation forecast: each GPU's p90 (the quantile nearest 0.9) peak over the horizon,
        as a fraction, feeds the forecast-headroom score. True when the view changed."""
        if ev.cluster != self.cluster_name:
            return False
        self.forecasts[ev.node] = ev
        q = min(range(len(ev.quantiles)), key=lambda i: abs(ev.quantiles[i] - 0.9))
        changed = False
        for g in ev.gpus:
            if g.metric != "util_pct":
                continue
            slot = self._slot_of(ev.node, g.gpu_uuid, -1)
            if slot is not None and g.values[q]:
                changed |= self.ledger.set_gpu_signals(ev.node, slot, util_forecast=max(g.values[q]) / 100.0)
        return changed

    def apply_scored(self, ev: GpuScored) -> bool:
        """A GPU's health score (0..100) for the health score plugin (its state comes separately)."""
        if ev.cluster != self.cluster_name:
            return False
        slot = self._slot_of(ev.node, ev.gpu_uuid, ev.gpu_index)
        return slot is not None and self.ledger.set_gpu_signals(ev.node, slot, health_score=float(ev.score))

    def apply_rollup(self, ev: GpuRolledUp) -> bool:
        """A node's one-minute rollup: each GPU's p95 temperature and p95 power over its enforced
        limit feed the thermal/power score (hour windows are too slow to steer placement)."""
        if ev.cluster != self.cluster_name or ev.window != RollupWindow.MINUTE:
            return False
        infos = self.gpus.get(ev.node, ())
        changed = False
        for r in ev.gpus:
            slot = self._slot_of(ev.node, r.gpu_uuid, r.gpu_index)
            if slot is None:
                continue
            limit = infos[slot].power_limit_w if slot < len(infos) else None
            power = r.power_w.p95 / limit if r.power_w is not None and limit else None
            temp = r.temperature_c.p95 if r.temperature_c is not None else None
            changed |= self.ledger.set_gpu_signals(ev.node, slot, temp_c=temp, power_frac=power)
        return changed

    def _slot_of(self, node: str, uuid: str, index: int) -> int | None:
        slot = self._slot.get((node, uuid))
        if slot is not None:
            return slot
        for s, g in enumerate(self.gpus.get(node, ())):
            if g.index == index:
                return s
        return None

    def _slots(self, node: str, gpu_slices) -> tuple[int, ...] | None:
        out = []
        for s in gpu_slices:
            slot = self._slot_of(node, s.gpu_uuid, s.gpu_index)
            if slot is None:
                slot = s.gpu_index  # node not inventoried yet: NVML index order is slot order
            out.append(slot)
        return tuple(out)

    # -- the ledger, from events ------------------------------------------------------------------------

    def apply_decided(self, ev: PlacementDecided) -> None:
        if ev.cluster != self.cluster_name:
            return
        # no ensure_cluster() here: a pod on a node the view does not have yet is kept unplaced and
        # placed by the next rebuild, so replaying the streams never rebuilds per event
        slots = self._slots(ev.node, ev.slices) or ()
        entry = self.ledger.pods.get(ev.pod_uid)
        request = entry.request if entry is not None and entry.attempt == ev.attempt else None
        if request is None:
            request = convert.observed_request(ev.pod_uid, ev.cpu_milli, ev.memory_mib, ev.slices,
                                               priority=ev.priority, gang_id=ev.gang_id)
        elif (entry is not None and entry.phase == Phase.BOUND and entry.node == ev.node
              and request.cpu_milli == 0 and request.memory_mib == 0 and (ev.cpu_milli or ev.memory_mib)):
            # the binding was replayed before its decision: now the CPU/memory it holds are known
            self.ledger.refine(ev.pod_uid, convert.observed_request(
                ev.pod_uid, ev.cpu_milli, ev.memory_mib, ev.slices, priority=ev.priority, gang_id=ev.gang_id))
            return
        if ev.preemptions and not self.ledger.is_stale(ev.pod_uid, ev.attempt):
            # the plan's victims give way first (a no-op for the leader's own echo); not for a decision
            # whose attempt is already over (its bind failure was read first): nothing would restore them
            self.ledger.evict_for(ev.decision_id, [v.pod_uid for v in ev.preemptions])
        self.ledger.decide(ev.pod_uid, ev.attempt, ev.decision_id, ev.node, slots, request, ev.decided_at,
                           payload=entry.payload if entry is not None else ev,
                           gpu_mem=ev.slices[0].memory_mib if ev.slices else 0)
        if ev.gang_id:
            gang = self.gangs.gangs.get(ev.gang_id)
            if gang is not None:
                gang.placed = True

    def apply_unschedulable(self, ev: PodUnschedulable) -> None:
        """A verdict read back from the stream: a standby learns which pods wait (and their requests).
        A pod already waiting for this attempt keeps its phase (the leader's own echo changes nothing),
        except that a gang member held for its gang becomes parked when the gang could not be placed."""
        if ev.cluster != self.cluster_name or ev.pod is None:
            return
        entry = self.ledger.pods.get(ev.pod_uid)
        gang_wait = ev.reason == UnschedulableReason.GANG_INCOMPLETE
        settled = (*HOLDING, Phase.PARKED, Phase.UNRESOLVABLE)
        if entry is not None and entry.attempt == ev.attempt and (entry.phase in settled or gang_wait):
            return
        try:
            req = convert.pod_request(ev.pod, self.models, self.capability)
        except RequestError:
            return
        # unresolvable pods are parked too: as leader, the first retry pass finds them so again
        phase = Phase.HELD if gang_wait else Phase.PARKED
        self.ledger.wait(ev.pod_uid, ev.attempt, phase, ev.reason, req, ev.emitted_at, payload=ev.pod)
        if req.gang_id and req.gang_min_members > 1:
            self.gangs.add(req)

    def apply_bound(self, ev: PodBound) -> None:
        if ev.cluster != self.cluster_name:
            return
        entry = self.ledger.pods.get(ev.pod_uid)
        attempt = attempt_of(ev.decision_id)
        if attempt is None:
            attempt = entry.attempt if entry is not None else 0
        request = entry.request if entry is not None else None
        if request is None:
            request = convert.observed_request(ev.pod_uid, 0, 0, ev.slices)
        slots = self._slots(ev.node, ev.slices) or ()
        self.ledger.bound(ev.pod_uid, attempt, ev.node, slots, request, ev.decision_id or "", ev.bound_at,
                          gpu_mem=ev.slices[0].memory_mib if ev.slices else 0)
        self._remember(ev.pod_uid, ev)
        self.avoid.pop(ev.pod_uid, None)

    def apply_bind_failed(self, ev: PodBindFailed) -> bool:
        """Roll back. A transient refusal also keeps the pod's next attempts off that node (the view
        evidently misses something about it), for a few nodes at most."""
        if ev.cluster != self.cluster_name:
            return False
        if ev.transient and ev.node:
            nodes = self.avoid.setdefault(ev.pod_uid, set())
            if len(nodes) < 4:
                nodes.add(ev.node)
        attempt = attempt_of(ev.decision_id)
        return self.ledger.rollback(ev.pod_uid, ev.decision_id, attempt if attempt is not None else ev.attempt)

    def apply_preempted(self, ev: PodPreempted) -> bool:
        if ev.cluster != self.cluster_name:
            return False
        self._forget_pod(ev.pod_uid)
        return self.ledger.release(ev.pod_uid, attempt_of(ev.decision_id))

    def apply_finished(self, ev: PodFinished) -> bool:
        if ev.cluster != self.cluster_name:
            return False
        self._forget_pod(ev.pod_uid)
        return self.ledger.release(ev.pod_uid)

    def _remember(self, uid: str, record: Any) -> None:
        """Keep a record naming the pod (name, namespace, checkpointable) when the ledger has none."""
        entry = self.ledger.pods.get(uid)
        if entry is not None and entry.payload is None:
            entry.payload = record

    def _forget_pod(self, uid: str) -> None:
        self.avoid.pop(uid, None)
        self._planned_at.pop(uid, None)
        entry = self.ledger.pods.get(uid)
        if entry is not None and entry.request is not None and entry.request.gang_id:
            self.gangs.remove_member(uid, entry.request.gang_id)

    # -- deciding (the leader) --------------------------------------------------------------------------

    def on_pending(self, p: PodPending) -> list[Outcome]:
        """A pending pod from the durable stream. Empty: nothing to publish (a duplicate, a stale
        attempt, another cluster's pod). Raises RuntimeError when the cluster view is empty."""
        if p.cluster != self.cluster_name:
            self.counters.other_cluster += 1
            return []
        self.counters.pending_seen += 1
        uid, attempt = p.pod_uid, p.attempt
        entry = self.ledger.pods.get(uid)
        if self.ledger.is_stale(uid, attempt) or (
                entry is not None and entry.attempt == attempt and entry.phase != Phase.QUEUED):
            self.counters.duplicates += 1
            return []
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        try:
            req = convert.pod_request(p, self.models, self.capability)
        except RequestError as exc:
            self.counters.rejected += 1
            self.ledger.release(uid, attempt)
            return [Rejected(self._unschedulable(p, UnschedulableReason.INVALID_REQUEST, str(exc)), str(exc))]
        self._observe(req)
        if entry is None or entry.attempt != attempt:
            self.ledger.queue(uid, attempt, req, self.clock(), payload=p)
        entry = self.ledger.pods[uid]
        if req.gang_id and req.gang_min_members > 1:
            return self._gang_member(entry)
        return self._try(entry, publish_unschedulable=True)

    def schedule(self, pod: PodRequest, snap: Snapshot) -> Decision | Status:
        """The engine's choice, within what the engine does not model: GPU memory held by other
        pods (sharing pods need a GPU with both compute and memory free) and nodes the binder just
        refused for this pod. A GPU the score plugin picked without the memory is swapped for the
        tightest one on the same node that has it."""
        assert self.scheduler is not None
        need = None
        exclude = None
        if pod.is_gpu_share and (pod.gpu_memory_mib or self.ledger.heavy):
            total = self.ledger.mem_total
            need = pod.gpu_memory_mib if pod.gpu_memory_mib else total * pod.gpu_milli // MILLI
            ok = (snap.gpu_free >= pod.gpu_milli) & (self.ledger.gpu_memory_free() >= need)
            exclude = ~ok.any(axis=1)
        refused = self._refused_nodes(pod.name, snap.num_nodes)
        if refused is not None:
            exclude = refused if exclude is None else exclude | refused
        result = self.scheduler.schedule(pod, snap, exclude if exclude is not None and exclude.any() else None)
        if isinstance(result, Decision) and need is not None and result.gpus:
            g = result.gpus[0]
            if not ok[result.node, g]:
                row = np.where(ok[result.node], snap.gpu_free[result.node], MILLI + 1)
                result = replace(result, gpus=(int(np.argmin(row)),))
        return result

    def _try(self, entry: PodEntry, *, publish_unschedulable: bool) -> list[Outcome]:
        assert self.scheduler is not None and self.ledger.cluster is not None and entry.request is not None
        req = entry.request
        result = self.schedule(req, self.ledger.cluster.snapshot())
        if isinstance(result, Decision):
            return [self._commit(entry, result)]
        if result.code == Code.ERROR:
            raise RuntimeError(f"placement plugin {result.plugin} failed: {result.reason}")
        if result.code == Code.UNSCHEDULABLE and self.preemption:
            plan = self._plan(entry)
            if plan is not None:
                decided = self._commit(entry, Decision(entry.uid, plan.node, plan.node_name, plan.gpus, 0.0, 0),
                                       plan=plan)
                if decided is not None:
                    return [decided]
        override = None
        if result.plugin == "exclude":
            refused = self.avoid.get(entry.uid)
            override = UnschedulableReason.INSUFFICIENT_GPU_MEMORY if not refused else "refused_by_binder"
        return self._wait(entry, result, publish=publish_unschedulable, reason_override=override)

    def _plan(self, entry: PodEntry) -> PreemptionPlan | None:
        """The cheapest eviction plan for a pod that fits nowhere, at most once per cooldown."""
        assert self.scheduler is not None and self.ledger.cluster is not None and entry.request is not None
        req = entry.request
        now = self.clock()
        if req.priority <= 0 or now - self._planned_at.get(entry.uid, -1e18) < self.preemption_cooldown_s:
            return None
        self._planned_at[entry.uid] = now
        allocations = self.ledger.cluster.allocations
        running = []
        for e in self.ledger:
            if e.phase != Phase.BOUND or e.evicting or e.request is None or e.request.priority >= req.priority:
                continue
            a = allocations.get(e.uid)
            if a is None:
                continue
            running.append(Victim(e.uid, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, e.request.priority,
                                  bool(getattr(e.payload, "checkpointable", False)), max(1.0, now - e.since),
                                  bool(e.request.gang_id)))
        if not running:
            return None
        snap = self.ledger.cluster.snapshot()
        return plan_preemption(req, snap, self.scheduler.inner, running, max_victims=self.max_victims,
                               exclude=self._refused_nodes(entry.uid, snap.num_nodes))

    def _refused_nodes(self, uid: str, num_nodes: int) -> np.ndarray | None:
        """Bool mask of the nodes the binder refused this pod on (None: none), kept out of its choices."""
        nodes = self.avoid.get(uid)
        if not nodes:
            return None
        mask = np.zeros(num_nodes, bool)
        for node in nodes:
            i = self.ledger.node_index(node)
            if i is not None:
                mask[i] = True
        return mask

    def _victim(self, v: Victim) -> PlannedPreemption:
        entry = self.ledger.pods[v.uid]
        record = entry.payload
        return PlannedPreemption(
            pod_uid=v.uid, pod_name=getattr(record, "pod_name", v.uid), namespace=getattr(record, "namespace", "default"),
            node=entry.node, reason="priority", checkpoint_first=v.checkpointable,
            grace_period_s=self.checkpoint_grace_s)

    def _commit(self, entry: PodEntry, d: Decision, plan: PreemptionPlan | None = None) -> Decided | None:
        """Reserve and describe a decision. With a preemption plan the victims are released first;
        None when the plan's reservation does not hold (nothing changed then)."""
        assert self.scheduler is not None and entry.request is not None
        did = decision_id(entry.uid, entry.attempt)
        p: PodPending = entry.payload
        gpu_slices = convert.slices(entry.request, self.gpus[d.node_name], d.gpus, p.mig_profile)
        preemptions: tuple[PlannedPreemption, ...] = ()
        if plan is not None:
            preemptions = tuple(self._victim(v) for v in plan.victims)
            self.ledger.evict_for(did, [v.uid for v in plan.victims])
        self.ledger.decide(entry.uid, entry.attempt, did, d.node_name, d.gpus, entry.request, self.clock(),
                           gpu_mem=gpu_slices[0].memory_mib if gpu_slices else 0)
        if plan is not None:
            if not self.ledger.pods[entry.uid].placed:
                log.warning("preemption plan for %s on %s did not reserve; dropped", entry.uid, d.node_name)
                self.ledger.undo(entry.uid)
                return None
            self.counters.preemptions_planned += 1
            self.counters.victims_planned += len(preemptions)
        self.counters.decided += 1
        now = self.clock()
        msg = PlacementDecided(
            source=self.source, emitted_at=now, cluster=self.cluster_name, decision_id=did, pod_uid=entry.uid,
            pod_name=p.pod_name, namespace=p.namespace, node=d.node_name, slices=gpu_slices,
            policy=self.policy_name, score=round(self.scheduler.normalized(d.score), 3), decided_at=now,
            gang_id=p.gang_id, queue=p.queue, attempt=entry.attempt, cpu_milli=entry.request.cpu_milli,
            memory_mib=entry.request.memory_mib, preemptions=preemptions, priority=entry.request.priority,
            checkpointable=p.checkpointable)
        return Decided(msg)

    def _wait(self, entry: PodEntry, status: Status, *, publish: bool,
              reason_override: str | None = None) -> list[Outcome]:
        assert entry.request is not None and self.ledger.cluster is not None
        unresolvable = status.code == Code.UNRESOLVABLE
        if not publish and reason_override is None and entry.phase in (Phase.PARKED, Phase.UNRESOLVABLE) \
                and (entry.phase == Phase.UNRESOLVABLE) == unresolvable:
            return []  # a retry that changed nothing: no explanation computed, nothing published
        why = self.explain_request(entry.request)
        reason = reason_override or why.reason or (
            UnschedulableReason.INSUFFICIENT_GPU if not unresolvable else UnschedulableReason.NO_MATCHING_GPU_TYPE)
        phase = Phase.UNRESOLVABLE if unresolvable else Phase.PARKED
        changed = entry.reason != reason
        self.ledger.wait(entry.uid, entry.attempt, phase, reason, now=self.clock())
        if not (publish or changed):
            return []
        if unresolvable:
            self.counters.unresolvable += 1
        else:
            self.counters.unschedulable += 1
        msg = self._unschedulable(entry.payload, reason, why.summary, why, unresolvable=unresolvable,
                                  attempt=entry.attempt)
        return [Unschedulable(msg)]

    def _unschedulable(self, p: PodPending, reason: str, message: str, why: PodExplanation | None = None, *,
                       unresolvable: bool = False, attempt: int | None = None) -> PodUnschedulable:
        classes = convert.explanation(why).node_classes if why is not None else ()
        return PodUnschedulable(
            source=self.source, emitted_at=self.clock(), cluster=self.cluster_name, pod_uid=p.pod_uid,
            pod_name=p.pod_name, namespace=p.namespace, reason=str(reason), message=message,
            node_classes=classes, retry_after_s=None, attempt=p.attempt if attempt is None else attempt,
            pod=p)

    # -- gangs ----------------------------------------------------------------------------------------

    def _gang_member(self, entry: PodEntry) -> list[Outcome]:
        assert entry.request is not None
        gang = self.gangs.add(entry.request)
        if gang.placed:
            return self._try(entry, publish_unschedulable=True)
        if not gang.ready:
            msg = f"gang {gang.gang_id}: {len(gang.members)}/{gang.min_members} members present"
            self.ledger.wait(entry.uid, entry.attempt, Phase.HELD, UnschedulableReason.GANG_INCOMPLETE,
                             now=self.clock())
            self.counters.unschedulable += 1
            return [Unschedulable(self._unschedulable(entry.payload, UnschedulableReason.GANG_INCOMPLETE, msg))]
        return self._place_gang(gang.gang_id, arriving=entry.uid)

    def _place_gang(self, gang_id: str, arriving: str | None = None) -> list[Outcome]:
        assert self.scheduler is not None and self.ledger.cluster is not None
        gang = self.gangs.gangs[gang_id]
        entries = [e for uid in gang.members if (e := self.ledger.pods.get(uid)) is not None
                   and e.phase not in HOLDING and e.request is not None]
        if len(entries) < gang.min_members:
            return []
        result = place_gang(self, self.ledger.cluster, [e.request for e in entries])
        if isinstance(result, GangFailure):
            out: list[Outcome] = []
            failing = result.member.name
            for e in entries:
                reason = None if e.uid == failing else UnschedulableReason.INSUFFICIENT_GPU
                out += self._wait(e, result.status, publish=e.uid == arriving, reason_override=reason)
            return out
        by_pod = {e.uid: e for e in entries}
        gang.placed = True
        self.counters.gangs_placed += 1
        return [self._commit(by_pod[d.pod], d) for d in result]

    # -- retrying parked pods ---------------------------------------------------------------------------

    def retry(self, limit: int = 256) -> tuple[list[Outcome], bool]:
        """Try parked pods again (capacity was freed). Returns (outcomes, more): `more` when the pass
        stopped at `limit` decisions with pods left to try."""
        if not self.ensure_cluster() or self.scheduler is None:
            return [], False
        out: list[Outcome] = []
        failed_shapes: set[tuple[Any, ...]] = set()
        gangs_seen: set[str] = set()
        decided = 0
        for entry in self.ledger.waiting([Phase.PARKED, Phase.QUEUED]):
            if decided >= limit:
                return out, True
            if entry.phase not in (Phase.PARKED, Phase.QUEUED) or entry.request is None:
                continue
            req = entry.request
            if req.gang_id and req.gang_min_members > 1:
                gang = self.gangs.gangs.get(req.gang_id)
                if gang is not None and not gang.placed:
                    if req.gang_id not in gangs_seen:
                        gangs_seen.add(req.gang_id)
                        got = self._place_gang(req.gang_id)
                        decided += sum(isinstance(o, Decided) for o in got)
                        out += got
                    continue
            key = shape_of(req)
            if key in failed_shapes:
                continue
            got = self._try(entry, publish_unschedulable=False)
            if got and isinstance(got[0], Decided):
                decided += 1
                self.counters.retried_decided += 1
            else:
                failed_shapes.add(key)
            out += got
        return out, False

    def undo(self, uid: str) -> None:
        """A decision could not be published: forget it (the pending message will come again)."""
        self.ledger.undo(uid)

    # -- the request mix --------------------------------------------------------------------------------

    def _observe(self, req: PodRequest) -> None:
        if not self.learn_typical:
            return
        self._shapes.append(req.spec_key)
        self._since_learn += 1
        if self._since_learn < (self.typical_window if self._learned else self.typical_min_pods):
            return
        self._since_learn = 0
        self._learned = True
        learned = TypicalPods.from_counts(dict(Counter(self._shapes)))
        if self._drift(learned) > self.typical_drift:
            log.info("request mix moved: %d typical shapes now (scores rebuilt)", len(learned.keys))
            self.typical = learned
            if self.specs:
                self._build_scheduler()

    def _drift(self, new: TypicalPods) -> float:
        old = self.typical
        if old is None:
            return 2.0
        a = dict(zip(old.keys, old.p, strict=True))
        b = dict(zip(new.keys, new.p, strict=True))
        return float(sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys()))

    # -- explaining -------------------------------------------------------------------------------------

    def explain_request(self, req: PodRequest, max_classes: int = 50) -> PodExplanation:
        assert self.ledger.cluster is not None and self.scheduler is not None
        sched = self.scheduler
        snap = self.ledger.cluster.snapshot()

        def scores(pod: PodRequest, s) -> tuple[np.ndarray, np.ndarray]:
            nodes, totals = sched.scores(pod, s)
            return nodes, totals / sched.total_weight

        return explain(req, snap, sched.inner, scores=scores, classes=self._classes, max_classes=max_classes)

    def explain_pending(self, p: PodPending, max_classes: int = 50) -> PodExplanation:
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        return self.explain_request(convert.pod_request(p, self.models, self.capability), max_classes)

    def summary(self) -> dict[str, Any]:
        phases = Counter(e.phase.value for e in self.ledger)
        c = self.ledger.cluster
        return {"nodes": self.num_nodes, "pods": dict(phases),
                "gpu_milli_used": int(c.used_gpu_milli) if c else 0,
                "gpu_milli_total": int(c.total_gpu_milli) if c else 0,
                "counters": asdict(self.counters), "ledger": asdict(self.ledger.stats),
                "cache": asdict(self.scheduler.stats) if self.scheduler else {}}
