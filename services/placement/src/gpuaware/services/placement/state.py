"""The placement view as the wire sees it: events in, messages out; every decision is the Planner's.

Every instance, leader or standby, applies the same events in stream order: inventories and GPU
health build the cluster, decisions and unschedulable verdicts (ours or a previous leader's) and the
binder's bound / bind-failed / preempted / finished events build the allocation ledger. A standby is
therefore *hot*: when it wins the lease its view is already the leader's, which is what makes
fail-over take seconds. A restarted instance rebuilds the same view by replaying the streams.

This module only translates: wire Structs (schemas/) into the engine's vocabulary (convert.py) and
into the pure `gpuaware.placement.planner.Planner`, and the Planner's outcomes back into
`PlacementDecided` / `PodUnschedulable`. What it keeps of its own is what only the wire knows: each
node's GPUs by slot (UUIDs, for slices and for events that name a GPU), and which nodes the world's
snapshot described.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from gpuaware import schemas
from gpuaware.placement import (
    DEGRADED,
    HEALTHY,
    HOLDING,
    QUARANTINED,
    Counters,
    ForecastHeadroom,
    Gang,
    Ledger,
    Parked,
    Phase,
    Planner,
    PlannerConfig,
    PodExplanation,
    PodRequest,
    RequestError,
    TypicalPods,
    decision_id,
)
from gpuaware.placement import Decided as Placed
from gpuaware.services.placement import convert
from gpuaware.services.placement.slots import GpuSlots

log = logging.getLogger(__name__)

__all__ = ["Decided", "Outcome", "PlacementState", "Rejected", "Unschedulable", "attempt_of", "decision_id"]

_HEALTH = {schemas.HealthState.HEALTHY: HEALTHY, schemas.HealthState.DEGRADED: DEGRADED,
           schemas.HealthState.QUARANTINED: QUARANTINED}


def attempt_of(decision: str | None) -> int | None:
    if not decision or "/" not in decision:
        return None
    tail = decision.rsplit("/", 1)[1]
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True, slots=True)
class Decided:
    msg: schemas.PlacementDecided


@dataclass(frozen=True, slots=True)
class Unschedulable:
    msg: schemas.PodUnschedulable


@dataclass(frozen=True, slots=True)
class Rejected:
    """An invalid request: publish `msg`, then dead-letter the pending message with `reason`."""

    msg: schemas.PodUnschedulable
    reason: str


Outcome = Decided | Unschedulable | Rejected


class PlacementState:
    """One instance's view. `planner` takes `PlannerConfig`'s knobs as keywords (typical, learn_typical,
    typical_min_pods, seed, preemption, max_victims, ...); the prior request mix is convert.PRIOR."""

    def __init__(self, cluster_name: str, source: str, policy_name: str, policy_config: Mapping[str, Any], *,
                 checkpoint_grace_s: float = 60.0, clock: Callable[[], float] = time.time, **planner: Any) -> None:
        self.cluster_name = cluster_name
        self.source = source
        self.policy_name = policy_name
        self.checkpoint_grace_s = checkpoint_grace_s
        self.clock = clock
        self.planner = Planner(PlannerConfig(policy_name=policy_name, policy_config=policy_config,
                                             prior=convert.PRIOR, **planner), clock=clock)
        self.slots = GpuSlots()
        self.gpus = self.slots.gpus
        """each node's GPUs by slot, as inventoried (UUIDs for slices and for events naming a GPU)"""
        self.capability: dict[str, tuple[int, int]] = {}
        self.forecasts: dict[str, schemas.GpuUtilPredicted] = {}
        self.world_nodes: set[str] = set()
        self.other_clusters: set[str] = set()
        """clusters whose pending pods arrived here (logged once each; counted in ``other_cluster``)"""

    @property
    def typical(self) -> TypicalPods:
        """The request mix the fragmentation scores assume now (learned from the pods seen)."""
        return self.planner.typical

    @property
    def max_victims(self) -> int:
        return self.planner.config.max_victims

    @max_victims.setter
    def max_victims(self, value: int) -> None:  # tuning a running instance (tests, tools)
        self.planner.config = dataclasses.replace(self.planner.config, max_victims=value)
        self.planner.view.invalidate()

    def use_policy(self, name: str, config: Mapping[str, Any]) -> None:
        """Decide with another profile from the next pod on (a GPUPolicy changed); decisions name it."""
        self.policy_name = name
        self.planner.use_policy(name, config)

    # -- the view -------------------------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        return self.planner.ledger

    @property
    def counters(self) -> Counters:
        return self.planner.counters

    @property
    def specs(self) -> dict[str, Any]:
        return self.planner.specs

    @property
    def num_nodes(self) -> int:
        return len(self.planner.specs)

    def ensure_cluster(self) -> bool:
        return self.planner.ensure_cluster()

    def apply_inventory(self, inv: schemas.NodeInventory) -> bool:
        """A node's full inventory. True when the node set or a node changed (capacity may be new).
        Nodes the world's snapshot described are the world's: agents' inventories do not override them."""
        if inv.cluster != self.cluster_name or inv.node in self.world_nodes:
            return False
        return self._set_node(*convert.node_of(inv))

    def apply_world(self, page: schemas.WorldSnapshotReply) -> int:
        """One page of the world's truth: its nodes replace the view's, its bound pods are committed,
        its time is the world's now (a quiet world's latest bind may be hours old). Returns the number
        of pods applied."""
        self.planner.world.event(page.at)
        for n in page.nodes:
            self.world_nodes.add(n.name)
            self._set_node(*convert.node_of_world(n))
        for pod in page.pods:
            attempt = attempt_of(pod.decision_id) or 0
            slots = self.slots.of_slices(pod.node, pod.slices)
            request = convert.observed_request(pod.pod_uid, pod.cpu_milli, pod.memory_mib, pod.slices,
                                               priority=pod.priority, gang_id=pod.gang_id,
                                               checkpointable=pod.checkpointable)
            self.ledger.bound(pod.pod_uid, attempt, pod.node, slots, request, pod.decision_id or "", pod.bound_at,
                              gpu_mem=pod.slices[0].memory_mib if pod.slices else 0)
            self._remember(pod.pod_uid, pod)
            if pod.gang_id:
                self.planner.gangs.gangs.setdefault(pod.gang_id, Gang(pod.gang_id, 1, placed=True)).placed = True
        return len(page.pods)

    def _set_node(self, spec: Any, gpus: tuple[schemas.GpuInfo, ...], model: Any,
                  cc: tuple[int, int]) -> bool:
        if model is not None:
            self.capability[model.name] = cc
        changed = self.planner.view.set_node(spec, model)
        if self.slots.set(spec.name, gpus):
            changed = True
            self.planner.view.invalidate()
        return changed

    def apply_health(self, ev: schemas.GpuStateChanged) -> bool:
        if ev.cluster != self.cluster_name:
            return False
        slot = self.slots.slot_of(ev.node, ev.gpu_uuid, ev.gpu_index)
        if slot is None:
            return False
        return self.ledger.set_gpu_health(ev.node, slot, _HEALTH[ev.current])

    def apply_forecast(self, ev: schemas.GpuUtilPredicted) -> bool:
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
            slot = self.slots.slot_of(ev.node, g.gpu_uuid, -1)
            if slot is not None and g.values[q]:
                changed |= self.ledger.set_gpu_forecast(ev.node, slot, max(g.values[q]) / 100.0, ev.issued_at)
        return changed

    def apply_demand_forecast(self, ev: schemas.DemandPredicted, headroom: ForecastHeadroom | None) -> bool:
        """The latency-sensitive classes' demand forecast: ``headroom`` keeps free its p90 (the quantile
        nearest 0.9) peak over its horizon less what those classes hold now. True when the room shrank
        (pods it held back may fit now). A series labelled ``horizon`` (the hours-ahead path, steps of an
        hour) is not this path: its first step is already past a 30-minute head-room."""
        if ev.cluster != self.cluster_name or headroom is None:
            return False
        series = next((s for s in ev.series if s.metric == "gpus_requested" and "horizon" not in s.labels
                       and s.labels.get("class") == schemas.LATENCY_SENSITIVE), None)
        if series is None or not ev.quantiles:
            return False
        q = min(range(len(ev.quantiles)), key=lambda i: abs(ev.quantiles[i] - 0.9))
        # demand forecasts run on the pod events' own clock (a twin's virtual one): the horizon is on it
        within = [v for k, v in enumerate(series.values[q]) if ev.start + k * ev.step_s <= ev.issued_at + headroom.horizon_s]
        peak = max(within or series.values[q][:1] or [0.0])
        return headroom.update(peak, headroom.held_by_classes(self.ledger))

    def apply_scored(self, ev: schemas.GpuScored) -> bool:
        """A GPU's health score (0..100) for the health score plugin (its state comes separately)."""
        if ev.cluster != self.cluster_name:
            return False
        slot = self.slots.slot_of(ev.node, ev.gpu_uuid, ev.gpu_index)
        return slot is not None and self.ledger.set_gpu_signals(ev.node, slot, health_score=float(ev.score))

    def apply_rollup(self, ev: schemas.GpuRolledUp) -> bool:
        """A node's one-minute rollup: each GPU's p95 temperature and p95 power over its enforced
        limit feed the thermal/power score (hour windows are too slow to steer placement)."""
        if ev.cluster != self.cluster_name or ev.window != schemas.RollupWindow.MINUTE:
            return False
        infos = self.gpus.get(ev.node, ())
        changed = False
        for r in ev.gpus:
            slot = self.slots.slot_of(ev.node, r.gpu_uuid, r.gpu_index)
            if slot is None:
                continue
            limit = infos[slot].power_limit_w if slot < len(infos) else None
            power = r.power_w.p95 / limit if r.power_w is not None and limit else None
            temp = r.temperature_c.p95 if r.temperature_c is not None else None
            changed |= self.ledger.set_gpu_signals(ev.node, slot, temp_c=temp, power_frac=power)
        return changed

    # -- the ledger, from events ------------------------------------------------------------------------

    def apply_decided(self, ev: schemas.PlacementDecided) -> None:
        if ev.cluster != self.cluster_name:
            return
        # no ensure_cluster() here: a pod on a node the view does not have yet is kept unplaced and
        # placed by the next rebuild, so replaying the streams never rebuilds per event
        slots = self.slots.of_slices(ev.node, ev.slices)
        entry = self.ledger.pods.get(ev.pod_uid)
        request = entry.request if entry is not None and entry.attempt == ev.attempt else None
        observed = convert.observed_request(ev.pod_uid, ev.cpu_milli, ev.memory_mib, ev.slices, priority=ev.priority,
                                            gang_id=ev.gang_id, checkpointable=ev.checkpointable)
        if request is None:
            request = observed
        elif (entry is not None and entry.phase == Phase.BOUND and entry.node == ev.node
              and request.cpu_milli == 0 and request.memory_mib == 0 and (ev.cpu_milli or ev.memory_mib)):
            # the binding was replayed before its decision: now the CPU/memory it holds are known
            self.ledger.refine(ev.pod_uid, observed)
            return
        if ev.preemptions and not self.ledger.is_stale(ev.pod_uid, ev.attempt):
            # the plan's victims give way first (a no-op for the leader's own echo); not for a decision
            # whose attempt is already over (its bind failure was read first): nothing would restore them
            self.ledger.evict_for(ev.decision_id, [v.pod_uid for v in ev.preemptions])
        self.ledger.decide(ev.pod_uid, ev.attempt, ev.decision_id, ev.node, slots, request, ev.decided_at,
                           payload=entry.payload if entry is not None else ev,
                           gpu_mem=ev.slices[0].memory_mib if ev.slices else 0)
        if ev.gang_id:
            gang = self.planner.gangs.gangs.get(ev.gang_id)
            if gang is not None:
                gang.placed = True

    def apply_unschedulable(self, ev: schemas.PodUnschedulable) -> None:
        """A verdict read back from the stream: a standby learns which pods wait (and their requests).
        A pod already waiting for this attempt keeps its phase (the leader's own echo changes nothing),
        except that a gang member held for its gang becomes parked when the gang could not be placed."""
        if ev.cluster != self.cluster_name or ev.pod is None:
            return
        entry = self.ledger.pods.get(ev.pod_uid)
        gang_wait = ev.reason == schemas.UnschedulableReason.GANG_INCOMPLETE
        settled = (*HOLDING, Phase.PARKED, Phase.UNRESOLVABLE)
        if entry is not None and entry.attempt == ev.attempt and (entry.phase in settled or gang_wait):
            return
        try:
            req = self._request(ev.pod)
        except RequestError:
            return
        # unresolvable pods are parked too: as leader, the first retry pass finds them so again
        phase = Phase.HELD if gang_wait else Phase.PARKED
        self.ledger.wait(ev.pod_uid, ev.attempt, phase, ev.reason, req, ev.emitted_at, payload=ev.pod)
        if req.gang_id and (req.gang_min_members > 1 or req.elastic):
            self.planner.gangs.add(req)

    def apply_bound(self, ev: schemas.PodBound) -> None:
        if ev.cluster != self.cluster_name:
            return
        self.planner.waiting.settle(ev.pod_uid)  # a decision still held at Permit reached the world
        entry = self.ledger.pods.get(ev.pod_uid)
        attempt = attempt_of(ev.decision_id)
        if attempt is None:
            attempt = entry.attempt if entry is not None else 0
        request = entry.request if entry is not None else None
        if request is None:
            request = convert.observed_request(ev.pod_uid, 0, 0, ev.slices)
        self.ledger.bound(ev.pod_uid, attempt, ev.node, self.slots.of_slices(ev.node, ev.slices), request,
                          ev.decision_id or "", ev.bound_at, gpu_mem=ev.slices[0].memory_mib if ev.slices else 0)
        self.planner.world.event(ev.bound_at)
        self._remember(ev.pod_uid, ev)
        self.planner.refused.pop(ev.pod_uid, None)

    def apply_bind_failed(self, ev: schemas.PodBindFailed) -> bool:
        """Roll back. A transient refusal also keeps the pod's next attempts off that node (the view
        evidently misses something about it), for a few nodes at most."""
        if ev.cluster != self.cluster_name:
            return False
        self.planner.waiting.settle(ev.pod_uid)  # a decision still held at Permit reached the world
        if ev.transient and ev.node:
            self.planner.refuse(ev.pod_uid, ev.node)
        attempt = attempt_of(ev.decision_id)
        return self.ledger.rollback(ev.pod_uid, ev.decision_id, attempt if attempt is not None else ev.attempt)

    def apply_preempted(self, ev: schemas.PodPreempted) -> bool:
        """The victim left its GPUs. The event's ``decision_id`` is the decision that planned the
        preemption (the preemptor's), not the victim's attempt, and the victim's next attempt may be
        here already (the binder re-queues it right after; the pending stream and this follower are
        not ordered): only the holding it was evicted from is released -- the same node, bound no
        later than the eviction -- and no attempt is closed on the preemptor's number."""
        if ev.cluster != self.cluster_name:
            return False
        self.planner.waiting.settle(ev.pod_uid)  # a decision still held at Permit reached the world
        self.planner.world.event(ev.preempted_at)
        entry = self.ledger.pods.get(ev.pod_uid)
        if entry is None or entry.phase not in HOLDING or entry.node != ev.node \
                or (entry.phase == Phase.BOUND and entry.since > ev.preempted_at):
            return False
        self.planner.forget(ev.pod_uid)
        return self.ledger.release(ev.pod_uid)

    def apply_finished(self, ev: schemas.PodFinished) -> bool:
        if ev.cluster != self.cluster_name:
            return False
        self.planner.waiting.settle(ev.pod_uid)  # a decision still held at Permit reached the world
        self.planner.world.event(ev.finished_at)
        self.planner.forget(ev.pod_uid)
        return self.ledger.release(ev.pod_uid)

    def _remember(self, uid: str, record: Any) -> None:
        """Keep a record naming the pod (name, namespace) when the ledger has none."""
        entry = self.ledger.pods.get(uid)
        if entry is not None and entry.payload is None:
            entry.payload = record

    # -- deciding (the leader) --------------------------------------------------------------------------

    def _request(self, p: schemas.PodPending) -> PodRequest:
        return convert.pod_request(p, self.planner.view.models, self.capability)

    def on_pending(self, p: schemas.PodPending) -> list[Outcome]:
        """A pending pod from the durable stream. Empty: nothing to publish (a duplicate, a stale
        attempt, another cluster's pod). Raises RuntimeError when the cluster view is empty."""
        if p.cluster != self.cluster_name:
            self.counters.other_cluster += 1
            if p.cluster not in self.other_clusters:  # said once per cluster: another instance may serve it
                self.other_clusters.add(p.cluster)
                log.warning("pending pod %s/%s is for cluster %r; this placement serves %r and leaves pods of "
                            "that cluster to the placement serving it (is one running?)", p.namespace, p.pod_name,
                            p.cluster[:64], self.cluster_name)
            return []
        self.counters.pending_seen += 1
        if self.planner.is_duplicate(p.pod_uid, p.attempt):
            self.counters.duplicates += 1
            return []
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        try:
            req = self._request(p)
        except RequestError as exc:
            self.planner.reject_invalid(p.pod_uid, p.attempt)
            invalid = self._unschedulable(p, schemas.UnschedulableReason.INVALID_REQUEST, str(exc))
            return [Rejected(invalid, str(exc))]
        return self._messages(self.planner.submit(p.pod_uid, p.attempt, req, payload=p))

    def retry(self, limit: int = 256) -> tuple[list[Outcome], bool]:
        """Try parked pods again (capacity was freed). Returns (outcomes, more): `more` when the pass
        stopped at `limit` decisions with pods left to try."""
        outcomes, more = self.planner.retry(limit)
        return self._messages(outcomes), more

    def allow(self, uid: str) -> None:
        """A decision held at Permit was admitted and stored: the ledger records it."""
        self.planner.waiting.allow(uid)

    def echoed(self, decision_id: str) -> bool:
        """This instance's own decision came back from the stream (so it is stored: one still held at
        Permit is allowed now). True when the view has it."""
        return self.planner.waiting.stored(decision_id)

    def release_held(self) -> int:
        """Stepping down: every decision still held at Permit is discarded (one that was stored after
        all comes back as an echo and is applied then). Returns how many."""
        return self.planner.waiting.reject_all()

    def reject(self, uid: str, reason: str = "", retry_after_s: float | None = None) -> list[Unschedulable]:
        """A decision held at Permit is refused: nothing stays reserved. Quota's refusal (`reason`) parks
        the pod (and its gang) with the verdicts returned; a decision not stored is decided again."""
        return [Unschedulable(self._unschedulable_of(p)) for p in self.planner.waiting.reject(uid, reason,
                                                                                              retry_after_s)]

    def reclaim(self, pod_uid: str, victims: Sequence[str]) -> Decided | None:
        """Quota answered a waiting pod with a reclaim plan: the decision that executes it (its
        victims as planned preemptions, reason ``reclaim``), or None when the pod stays parked."""
        placed = self.planner.reclaim(pod_uid, victims)
        return None if placed is None else Decided(self._decided(placed))

    def reclaim_for(self, msg: schemas.PlacementDecided, victims: Sequence[str]) -> schemas.PlacementDecided:
        """Quota admitted a held decision with a reclaim plan: the victims placement knows as running
        (and no other plan evicts) are evicted in its statement and join its planned preemptions."""
        planned = {p.pod_uid for p in msg.preemptions}
        evicted = self.planner.waiting.evict_also(msg.pod_uid, [u for u in victims if u not in planned])
        if not evicted:
            return msg
        extra = convert.planned_preemptions(evicted, "reclaim", self.checkpoint_grace_s)
        return msgspec.structs.replace(msg, preemptions=msg.preemptions + extra)

    def _messages(self, outcomes: list[Placed | Parked]) -> list[Outcome]:
        out: list[Outcome] = []
        for o in outcomes:
            if isinstance(o, Placed):
                out.append(Decided(self._decided(o)))
            else:
                out.append(Unschedulable(self._unschedulable_of(o)))
        return out

    def _unschedulable_of(self, o: Parked) -> schemas.PodUnschedulable:
        p: schemas.PodPending = o.entry.payload
        return self._unschedulable(p, o.reason, o.message, o.explanation, unresolvable=o.unresolvable,
                                   attempt=o.entry.attempt, retry_after_s=o.retry_after_s)

    def _decided(self, d: Placed) -> schemas.PlacementDecided:
        return convert.decided_message(d, self.gpus[d.node], source=self.source, cluster=self.cluster_name,
                                       policy=self.policy_name, grace_s=self.checkpoint_grace_s, now=self.clock())

    def _unschedulable(self, p: schemas.PodPending, reason: str, message: str,
                       why: PodExplanation | None = None, *,
                       unresolvable: bool = False, attempt: int | None = None,
                       retry_after_s: float | None = None) -> schemas.PodUnschedulable:
        return convert.unschedulable_message(p, reason, message, why, source=self.source, cluster=self.cluster_name,
                                             now=self.clock(), attempt=attempt, retry_after_s=retry_after_s)

    # -- explaining -------------------------------------------------------------------------------------

    def explain_request(self, req: PodRequest, max_classes: int = 50) -> PodExplanation:
        return self.planner.explain_request(req, max_classes)

    def explain_pending(self, p: schemas.PodPending, max_classes: int = 50) -> PodExplanation:
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        return self.explain_request(self._request(p), max_classes)

    def summary(self) -> dict[str, Any]:
        return self.planner.view.summary()
