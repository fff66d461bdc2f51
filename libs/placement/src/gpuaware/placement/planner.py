"""What one placement instance decides from its view: a pending pod goes in, a decision comes out.

The placement service keeps wiring only (subscribe, convert wire messages, publish, the lease);
everything that decides lives here, pure: the node set and the allocation ledger (ledger.py), the
profile built from configuration, gangs, the request mix the fragmentation scores assume (learned
from the pods seen), the nodes the binder refused a pod on, and the scheduling session every
decision goes through (session.py). A pod's path:

    submit(uid, attempt, request, payload)        once, from the pending stream
      -> ledger QUEUED -> Session.run([pod] or [gang])  (allocate, then preempt when it fits nowhere)
      -> Decided (the ledger reserved it; victims are marked evicting)  |  Parked (why, explained)
    retry(limit)                                  parked pods again after capacity was freed, in the
                                                  configured order (queue_order.py: priority, or fair
                                                  share with reclaim, reservations and shortest first)
    reclaim(uid, victims)                         a parked pod placed by evicting the pods quota's
                                                  reclaim plan named (borrowed capacity given back)

Both return outcomes for the caller to publish; the ledger has already changed, and `undo(uid)`
puts a decision back when publishing it failed or an asynchronous permit (quota over NATS) denied
it, so a refused pod leaves nothing reserved.

Leader and standbys build the same view from the same events; only the leader calls `submit` and
`retry`. The cluster is rebuilt lazily after node-set changes (`ensure_cluster`), between cycles,
never inside one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpuaware.placement.explain import PodExplanation, explain, node_class_names
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.framework import Code
from gpuaware.placement.gang import GangTable
from gpuaware.placement.ledger import HOLDING, RETRIED, Ledger, Phase, PodEntry
from gpuaware.placement.model import GpuModel, NodeSpec, PodRequest
from gpuaware.placement.preempt import Victim
from gpuaware.placement.queue_order import Reservation, order_for, queue_of
from gpuaware.placement.registry import REGISTRY
from gpuaware.placement.session import Framework, Placed, Session, Waiting

log = logging.getLogger(__name__)

__all__ = ["Decided", "Parked", "Planner", "PlannerConfig", "decision_id"]

GANG_INCOMPLETE = "gang_incomplete"
INSUFFICIENT_GPU = "insufficient_gpu"
NO_MATCHING_GPU_TYPE = "no_matching_gpu_type"
REFUSED_BY_BINDER = "refused_by_binder"
QUOTA_EXCEEDED = "quota_exceeded"


def decision_id(uid: str, attempt: int) -> str:
    """Deterministic: a redelivered pending pod yields the same id, so JetStream stores it once."""
    return f"{uid}/{attempt}"


@dataclass(frozen=True, slots=True)
class Decided:
    """`entry` is reserved on `node`/`gpus` (GPU slots); `victims` are evicted for it."""

    entry: PodEntry
    decision_id: str
    node: str
    gpus: tuple[int, ...]
    score: float
    """the weighted score mapped onto 0..100"""
    gpu_mem: int = 0
    """GPU memory the pod holds on each GPU, MiB"""
    victims: tuple[PodEntry, ...] = ()
    preemption_reason: str = "priority"
    """why the victims go: ``priority`` (a preemption plan) or ``reclaim`` (quota's reclaim plan)"""


@dataclass(frozen=True, slots=True)
class Parked:
    """`entry` waits: `reason` is a code (`UnschedulableReason` values), `message` says more."""

    entry: PodEntry
    reason: str
    message: str
    explanation: PodExplanation | None = None
    unresolvable: bool = False
    retry_after_s: float | None = None


Outcome = Decided | Parked


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    policy_name: str
    policy_config: Mapping[str, Any]
    typical: TypicalPods | None = None
    """the request mix the fragmentation scores assume; None: `prior`, then learned"""
    prior: Mapping[tuple[int, int, int, str], float] = field(default_factory=dict)
    learn_typical: bool = True
    typical_min_pods: int = 200
    typical_window: int = 5000
    typical_drift: float = 0.15
    seed: int = 0
    max_tombstones: int = 200_000
    preemption: bool = True
    preemption_cooldown_s: float = 30.0
    max_victims: int = 16
    max_refused_nodes: int = 4
    extra_filters: tuple[Any, ...] = ()
    """built Filter plugins every profile gets on top of its own (strict partitions from the quota tree)"""
    queue_order: str = "priority"
    """the order parked pods are retried in: ``priority`` or ``fair-share`` (queue_order.py)"""
    starved_below: float = 1.0
    """fair-share: a tenant running less than this fraction of its share goes first, and may reclaim"""
    duration_default_s: float = 3600.0
    """fair-share: the runtime of a pod nobody predicted yet"""
    reclaim_min_runtime_s: float = 600.0
    """fair-share: a running pod is not reclaimed before it ran this long (world seconds since its bind)"""
    max_reclaims: int = 4
    """fair-share: reclaims planned per retry pass at most"""
    turn_due: float = 0.0
    """fair-share: turn-taking (queue_order.py; 0: off): a tenant owed this fraction of its share lately
    is starved, and may also reclaim from tenants at or above theirs not owed a turn"""
    turn_lease_s: float = 900.0
    """fair-share: a pod runs at least this long (world seconds since its bind) before a turn takes it"""
    max_reservations: int = 0
    """fair-share: nodes held for starved tenants' wide pods at once (one per tenant, most starved first);
    none by default: on the philly demo one cut allocation (0.75-0.77 against 0.774) and was no fairer"""


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
    fair_reclaims: int = 0
    reservations: int = 0


class Planner:
    """The decisions of one placement instance (see the module docstring)."""

    def __init__(self, config: PlannerConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.ledger = Ledger(max_tombstones=config.max_tombstones)
        self.gangs = GangTable()
        self.counters = Counters()
        self.specs: dict[str, NodeSpec] = {}
        self.models: dict[str, GpuModel] = {}
        self.typical = config.typical or TypicalPods.from_counts(dict(config.prior))
        self.framework: Framework | None = None
        self._memory: dict[str, Any] = {}
        """plugins' state across rebuilt frameworks (preemption cooldowns)"""
        self.refused: dict[str, set[str]] = {}
        """pod uid -> nodes the binder refused it on (transiently): not chosen again for it"""
        self._dirty = False
        self._classes: list[str] = []
        self._shapes: deque[tuple[int, int, int, str]] = deque(maxlen=max(1, config.typical_window))
        self._since_learn = 0
        self._learned = False
        self.order = order_for(config.queue_order, capacity=self._gpu_capacity, starved_below=config.starved_below,
                               default_s=config.duration_default_s, min_runtime_s=config.reclaim_min_runtime_s,
                               turn_due=config.turn_due, turn_lease_s=config.turn_lease_s)
        """the fair-share order, or None for the ledger's own (priority, then arrival)"""
        self._world: tuple[float, float] | None = None
        """the world's latest event time and this clock when it was seen (``world_now``)"""
        self.reservations: dict[str, Reservation] = {}
        """nodes held for starved tenants' waiting wide pods (fair-share order), by pod uid; each retry
        pass renews them (``_reserve_for``)"""

    # -- the node set ---------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.specs)

    def set_node(self, spec: NodeSpec, model: GpuModel | None) -> bool:
        """A node as inventoried (and its GPU model as reported). True when something changed."""
        if model is not None and self.models.get(model.name) != model:
            if model.name in self.models:
                self._dirty = True
            self.models[model.name] = model
        if self.specs.get(spec.name) == spec:
            return False
        self.specs[spec.name] = spec
        self._dirty = True
        return True

    def invalidate(self) -> None:
        """Something about the nodes changed that `set_node` does not see: rebuild before the next cycle."""
        self._dirty = True

    def ensure_cluster(self) -> bool:
        """Rebuild the cluster after node-set changes (between cycles). True when there is one."""
        if self._dirty:
            self._dirty = False
            specs = [self.specs[n] for n in sorted(self.specs)]
            unplaced = self.ledger.set_nodes(specs, dict(self.models))
            self.counters.cluster_rebuilds += 1
            if unplaced:
                log.warning("cluster view rebuilt (%d nodes): %d pods hold GPUs on nodes not in the view",
                            len(specs), len(unplaced))
            else:
                log.info("cluster view rebuilt: %d nodes", len(specs))
            cluster = self.ledger.cluster
            self._classes = node_class_names(cluster.snapshot()) if cluster is not None else []
            self._build_framework()
            for e in self.ledger.waiting([Phase.UNRESOLVABLE]):
                self.ledger.set_phase(e, Phase.PARKED)  # a new node set may hold them: the next pass sees
        return self.ledger.cluster is not None

    def _build_framework(self) -> None:
        n = len(self.specs)
        rank = np.random.default_rng(self.config.seed).permutation(n) if n else None
        cfg = self.config
        preemption = {"name": "default-preemption", "args": {"max_victims": cfg.max_victims,
                                                            "cooldown_s": cfg.preemption_cooldown_s}}
        framework = REGISTRY.build_framework(cfg.policy_config, typical=self.typical, seed=cfg.seed, tie_rank=rank,
                                             name=cfg.policy_name, clock=self.clock, memory=self._memory,
                                             default_post_filter=preemption if cfg.preemption else None,
                                             extra_filters=cfg.extra_filters)
        if not cfg.preemption:
            framework.post_filters = ()
        if self.framework is not None:  # the counts are this instance's, not one build's
            framework.scheduler.stats = self.framework.scheduler.stats
        self.framework = framework
        self.counters.scheduler_rebuilds += 1

    def session(self) -> Session:
        """A scheduling session on the current view (the caller made sure the cluster exists)."""
        assert self.ledger.cluster is not None and self.framework is not None
        return Session(self.ledger.cluster, self.framework, running=self._running, exclude=self._excluded)

    # -- deciding ----------------------------------------------------------------------------------------

    def is_duplicate(self, uid: str, attempt: int) -> bool:
        """A pending pod already seen for this attempt (or an attempt that is over)."""
        entry = self.ledger.pods.get(uid)
        return self.ledger.is_stale(uid, attempt) or (
            entry is not None and entry.attempt == attempt and entry.phase != Phase.QUEUED)

    def reject(self, uid: str, attempt: int) -> None:
        """An invalid request: nothing will ever place this attempt."""
        self.counters.rejected += 1
        self.ledger.release(uid, attempt)

    def submit(self, uid: str, attempt: int, request: PodRequest, payload: Any = None) -> list[Outcome]:
        """A pending pod from the durable stream: decide it (or its gang, once complete) now.
        Raises RuntimeError when the cluster view is empty (nothing could be decided: retry later)."""
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        self._observe(request)
        entry = self.ledger.pods.get(uid)
        if entry is None or entry.attempt != attempt:
            self.ledger.queue(uid, attempt, request, self.clock(), payload=payload)
        entry = self.ledger.pods[uid]
        if request.gang_id and request.gang_min_members > 1:
            gang = self.gangs.add(request)
            if not gang.placed:
                if not gang.ready:
                    msg = f"gang {gang.gang_id}: {len(gang.members)}/{gang.min_members} members present"
                    self.ledger.wait(uid, attempt, Phase.HELD, GANG_INCOMPLETE, now=self.clock())
                    self.counters.unschedulable += 1
                    return [Parked(entry, GANG_INCOMPLETE, msg)]
                return self._place_gang(gang.gang_id, arriving=uid)
        return self._decide([entry], publish={uid})[0]

    def retry(self, limit: int = 256) -> tuple[list[Outcome], bool]:
        """Try parked pods again (capacity was freed), highest priority first, in one session.
        Returns (outcomes, more): `more` when the pass stopped at `limit` decisions with pods left to try."""
        if not self.ensure_cluster():
            return [], False
        singles: list[PodEntry] = []
        gangs: list[str] = []
        for entry in self.ledger.waiting([Phase.PARKED, Phase.QUEUED]):
            req = entry.request
            if req is None:
                continue
            if req.gang_id and req.gang_min_members > 1:
                gang = self.gangs.gangs.get(req.gang_id)
                if gang is not None and not gang.placed:
                    if req.gang_id not in gangs:
                        gangs.append(req.gang_id)
                    continue
            singles.append(entry)
        out: list[Outcome] = []
        for gang_id in gangs:
            out += self._place_gang(gang_id)
        left = max(0, limit - sum(isinstance(o, Decided) for o in out))
        if self.order is None:
            got, tried = self._decide(singles, publish=set(), limit=left)
            more = tried < len(singles)
        else:
            got, more = self._fair_pass(singles, left)
        self.counters.retried_decided += sum(isinstance(o, Decided) for o in got)
        return out + got, more

    def _fair_pass(self, singles: list[PodEntry], limit: int) -> tuple[list[Outcome], bool]:
        """The fair-share order's pass: starved tenants' pods first (placed, else reclaiming); where
        ``max_reservations`` allows, starved tenants' first wide pods still waiting get a node held; then
        everyone else, shortest predicted first, a held node only for pods that end before it is needed
        (queue_order.py)."""
        assert self.order is not None
        demand = self.order.demand(self.ledger)
        self.order.observe(demand, self.world_now())
        ordered = self.order.sort(singles, demand)
        starved = [e for e in ordered if self.order.starved(queue_of(e), demand)]
        rest = ordered[len(starved):]
        got, tried = self._decide(starved, publish=set(), limit=limit)  # the nodes held so far stay held
        got += self._reclaim_for_starved(starved[:tried])
        held, self.reservations = self.reservations, {}
        self._reserve_for(starved[:tried], held)
        left = max(0, limit - sum(isinstance(o, Decided) for o in got))
        if tried < len(starved) or not rest:
            return got, tried < len(starved) or bool(rest)
        later, n = self._decide(rest, publish=set(), limit=left)
        return got + later, n < len(rest)

    def _reserve_for(self, starved: Sequence[PodEntry], held: Mapping[str, Reservation]) -> None:
        """A node for each starved tenant's first waiting pod wider than one GPU (a one-GPU pod is first
        in line for the next GPU freed anywhere; a wider one needs GPUs to free on one node at once), at
        most ``max_reservations``, on distinct nodes. A pod that held a node keeps it unless another
        frees more than a quarter sooner: moving the hold every pass would let the backfill fill each
        node in turn. Nodes held stay held through the starved pods' own pass (a hold only the waiting
        pods of other tenants respected would never drain)."""
        assert self.order is not None
        if self.config.max_reservations <= 0:
            return
        heads: dict[str, PodEntry] = {}
        for e in starved:
            if e.phase in RETRIED and e.request is not None and e.request.num_gpu > 1:
                heads.setdefault(queue_of(e), e)
        if not heads:
            return
        holding = [e for e in self.ledger if e.phase in HOLDING and not e.evicting]
        now = self.world_now()
        gpus = {n: s.num_gpu for n, s in self.specs.items()}
        models = {n: s.gpu_model for n, s in self.specs.items()}
        for head in list(heads.values())[:self.config.max_reservations]:
            taken = {r.node for r in self.reservations.values()}
            free = {n: g for n, g in gpus.items() if n not in taken}
            before = held.get(head.uid)
            r = self.order.reserve(head, holding, free, models, now)
            if r is not None and before is not None and before.node in free and before.node != r.node:
                kept = self.order.reserve(head, holding, {before.node: free[before.node]}, models, now)
                if kept is not None and kept.shadow - now <= 1.25 * (r.shadow - now):
                    r = kept  # moving for little would let the backfill fill each node in turn
            if r is not None:
                self.reservations[head.uid] = r
                self.counters.reservations += before is None

    def world_event(self, at: float) -> None:
        """The world reported something that happened at ``at`` on its clock (a bind, a departure:
        Kubernetes' time, or the digital twin's virtual time); a bound pod's ``since`` is on that clock."""
        if self._world is None or at > self._world[0]:
            self._world = (at, self.clock())

    def world_now(self) -> float:
        """The world's clock now: its latest event's time plus what this clock ran since, this clock
        before the world said anything. Not this clock alone: the digital twin's virtual time is neither
        this clock nor ahead of it (it starts at its own epoch and runs faster), and a bound pod's age
        on the wrong clock is months, which made every pod look overdue and older than any minimum."""
        if self._world is None:
            return self.clock()
        at, seen = self._world
        return at + max(0.0, self.clock() - seen)

    def _reclaim_for_starved(self, tried: Sequence[PodEntry]) -> list[Outcome]:
        """Fair share: starved tenants' pods the pass could not place evict what `queue_order` allows:
        at most ``max_reclaims`` per pass and four times as many tries (each plans a preemption), the
        view recomputed after each reclaim; a tenant and priority with no victims is not asked again."""
        assert self.order is not None
        out: list[Outcome] = []
        tries = 0
        nothing: set[tuple[str, int]] = set()
        demand = self.order.demand(self.ledger)
        holding = [e for e in self.ledger if e.phase == Phase.BOUND]
        now = self.world_now()
        for entry in tried:
            if len(out) >= self.config.max_reclaims or tries >= 4 * self.config.max_reclaims:
                break
            req = entry.request
            if entry.phase not in RETRIED or req is None or (queue_of(entry), req.priority) in nothing:
                continue
            victims = self.order.reclaim_victims(entry, holding, demand, now)
            if not victims:
                nothing.add((queue_of(entry), req.priority))
                continue
            tries += 1
            placed = self.reclaim(entry.uid, victims)
            if placed is not None:
                self.counters.fair_reclaims += 1
                out.append(placed)
                demand = self.order.demand(self.ledger)
                holding = [e for e in self.ledger if e.phase == Phase.BOUND]
        return out

    def _gpu_capacity(self) -> float:
        return float(sum(s.num_gpu for s in self.specs.values()))

    def predict(self, uid: str, seconds: float) -> None:
        """The duration predictor's runtime for a waiting pod (fair-share order's shortest-first)."""
        if self.order is not None and uid in self.ledger.pods:
            self.order.predicted[uid] = seconds

    def undo(self, uid: str) -> None:
        """A decision was not stored, or an asynchronous permit denied it: forget it (the pod is
        decided again from the pending stream or the next retry pass)."""
        self.ledger.undo(uid)

    def deny(self, uid: str, reason: str, retry_after_s: float | None = None) -> Parked | None:
        """An asynchronous Permit (quota) denied a decision: undo it and park the pod."""
        entry = self.ledger.pods.get(uid)
        if entry is None:
            return None
        self.ledger.undo(uid)
        self.ledger.wait(uid, entry.attempt, Phase.PARKED, QUOTA_EXCEEDED, now=self.clock())
        return Parked(entry, QUOTA_EXCEEDED, reason or "refused by quota", retry_after_s=retry_after_s)

    def reclaim(self, uid: str, victims: Sequence[str]) -> Decided | None:
        """Quota answered a waiting pod with a reclaim plan: place it where evicting only pods of
        `victims` makes room (or where it fits now, if capacity came back meanwhile). The victims are
        marked evicting in the ledger, so no later plan counts their GPUs twice. None when the pod is
        not waiting, belongs to a gang (gangs are all-or-none; not reclaimed for yet), or quota's
        victims cannot make room on any one node: it stays parked."""
        entry = self.ledger.pods.get(uid)
        if (entry is None or entry.request is None or entry.phase not in RETRIED
                or (entry.request.gang_id and entry.request.gang_min_members > 1) or not self.ensure_cluster()):
            return None
        session = self.session()
        got = session.allocate(entry.request)
        if not isinstance(got, Placed):
            got = session.reclaim(entry.request, victims, max_victims=self.config.max_victims)
        if got is None:
            return None
        reason = "reclaim" if got.victims else "priority"
        return self._commit(entry, got, preemption_reason=reason)

    def _decide(self, entries: Sequence[PodEntry], publish: set[str],
                limit: int | None = None) -> tuple[list[Outcome], int]:
        """One session over `entries`; (outcomes, how many pods it got to before `limit` decisions)."""
        results = self.session().run([e.request for e in entries if e.request is not None], limit=limit)
        by_uid = {e.uid: e for e in entries}
        out: list[Outcome] = []
        for r in results:
            entry = by_uid[r.pod.name]
            if isinstance(r, Placed):
                out.append(self._commit(entry, r))
            else:
                out += self._wait(entry, r, publish=entry.uid in publish)
        return out, len(results)

    def _place_gang(self, gang_id: str, arriving: str | None = None) -> list[Outcome]:
        gang = self.gangs.gangs[gang_id]
        entries = [e for uid in gang.members if (e := self.ledger.pods.get(uid)) is not None
                   and e.phase not in HOLDING and e.request is not None]
        if len(entries) < gang.min_members:
            return []
        results = self.session().run([[e.request for e in entries]])  # type: ignore[misc]
        by_uid = {e.uid: e for e in entries}
        if all(isinstance(r, Placed) for r in results):
            gang.placed = True
            self.counters.gangs_placed += 1
            return [self._commit(by_uid[r.pod.name], r) for r in results]  # type: ignore[arg-type]
        out: list[Outcome] = []
        for r in results:
            assert isinstance(r, Waiting)
            out += self._wait(by_uid[r.pod.name], r, publish=r.pod.name == arriving)
        return out

    def _commit(self, entry: PodEntry, placed: Placed, preemption_reason: str = "priority") -> Decided:
        """The session reserved the pod (and evicted its victims): record both in the ledger."""
        assert entry.request is not None and self.ledger.cluster is not None and self.framework is not None
        did = decision_id(entry.uid, entry.attempt)
        d = placed.decision
        victims = tuple(self.ledger.pods[v.uid] for v in placed.victims if v.uid in self.ledger.pods)
        if victims:
            self.ledger.evict_for(did, [v.uid for v in victims])
            self.counters.preemptions_planned += 1
            self.counters.victims_planned += len(victims)
        alloc = self.ledger.cluster.allocations[entry.uid]
        self.ledger.decide(entry.uid, entry.attempt, did, d.node_name, d.gpus, entry.request, self.clock(),
                           gpu_mem=alloc.gpu_mem)
        self.counters.decided += 1
        return Decided(entry, did, d.node_name, d.gpus, round(self.framework.scheduler.normalized(d.score), 3),
                       alloc.gpu_mem, victims, preemption_reason)

    def _wait(self, entry: PodEntry, waiting: Waiting, *, publish: bool) -> list[Outcome]:
        assert entry.request is not None
        status = waiting.status
        if status.code == Code.ERROR:
            raise RuntimeError(f"placement plugin {status.plugin} failed: {status.reason}")
        unresolvable = status.code == Code.UNRESOLVABLE
        override = None
        if status.plugin == "exclude":
            # the nodes left were refused by the binder, or one is held for a starved pod: then it
            # waits for capacity like any other, explained as such
            override = REFUSED_BY_BINDER if self.refused.get(entry.uid) else None
        elif status.plugin == "gang":
            override = INSUFFICIENT_GPU
        if not publish and override is None and entry.phase in (Phase.PARKED, Phase.UNRESOLVABLE) \
                and (entry.phase == Phase.UNRESOLVABLE) == unresolvable:
            return []  # a retry that changed nothing: no explanation computed, nothing published
        why = self.explain_request(entry.request)
        reason = override or why.reason or (NO_MATCHING_GPU_TYPE if unresolvable else INSUFFICIENT_GPU)
        changed = entry.reason != reason
        self.ledger.wait(entry.uid, entry.attempt, Phase.UNRESOLVABLE if unresolvable else Phase.PARKED, reason,
                         now=self.clock())
        if not (publish or changed):
            return []
        if unresolvable:
            self.counters.unresolvable += 1
        else:
            self.counters.unschedulable += 1
        return [Parked(entry, reason, why.summary, why, unresolvable=unresolvable)]

    # -- what a session needs from the view ---------------------------------------------------------

    def _running(self) -> list[Victim]:
        """Bound pods a PostFilter may evict (the plugin keeps those of lower priority)."""
        allocations = self.ledger.cluster.allocations if self.ledger.cluster is not None else {}
        now = self.clock()
        out = []
        for e in self.ledger:
            if e.phase != Phase.BOUND or e.evicting or e.request is None:
                continue
            a = allocations.get(e.uid)
            if a is None:
                continue
            out.append(Victim(e.uid, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, e.request.priority,
                              e.request.checkpointable, max(1.0, now - e.since), bool(e.request.gang_id),
                              gpu_mem=a.gpu_mem))
        return out

    def refuse(self, uid: str, node: str) -> None:
        """The binder refused `uid` on `node` (transiently): keep its next attempts off it."""
        nodes = self.refused.setdefault(uid, set())
        if len(nodes) < self.config.max_refused_nodes:
            nodes.add(node)

    def _excluded(self, pod: PodRequest) -> np.ndarray | None:
        nodes = self.refused.get(pod.name)
        if self.reservations:  # (none held: nothing copied on the decision path)
            nodes = set(nodes or ())
            for r in list(self.reservations.values()):
                if r.uid == pod.name or self.order is None:
                    continue
                held = self.ledger.pods.get(r.uid)
                if held is None or held.phase not in RETRIED:
                    del self.reservations[r.uid]  # its pod was placed or left
                elif not r.admits(self.order.predicted.get(pod.name, self.order.default_s)):
                    nodes.add(r.node)
        if not nodes or self.ledger.cluster is None:
            return None
        mask = np.zeros(self.ledger.cluster.num_nodes, bool)
        for node in nodes:
            i = self.ledger.node_index(node)
            if i is not None:
                mask[i] = True
        return mask

    def forget(self, uid: str) -> None:
        """The pod left: drop what was kept about it outside the ledger."""
        self.refused.pop(uid, None)
        if self.order is not None:
            self.order.predicted.pop(uid, None)
        for plugin in self.framework.post_filters if self.framework is not None else ():
            forget = getattr(plugin, "forget", None)
            if forget is not None:
                forget(uid)  # its preemption cooldown
        entry = self.ledger.pods.get(uid)
        if entry is not None and entry.request is not None and entry.request.gang_id:
            self.gangs.remove_member(uid, entry.request.gang_id)

    # -- the request mix --------------------------------------------------------------------------------

    def _observe(self, req: PodRequest) -> None:
        cfg = self.config
        if not cfg.learn_typical or cfg.typical is not None:
            return
        self._shapes.append(req.spec_key)
        self._since_learn += 1
        if self._since_learn < (cfg.typical_window if self._learned else cfg.typical_min_pods):
            return
        self._since_learn = 0
        self._learned = True
        learned = TypicalPods.from_counts(dict(Counter(self._shapes)))
        if self._drift(learned) > cfg.typical_drift:
            log.info("request mix moved: %d typical shapes now (scores rebuilt)", len(learned.keys))
            self.typical = learned
            if self.specs and self.ledger.cluster is not None:
                self._build_framework()

    def _drift(self, new: TypicalPods) -> float:
        a = dict(zip(self.typical.keys, self.typical.p, strict=True))
        b = dict(zip(new.keys, new.p, strict=True))
        return float(sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys()))

    # -- explaining -------------------------------------------------------------------------------------

    def explain_request(self, req: PodRequest, max_classes: int = 50) -> PodExplanation:
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        assert self.ledger.cluster is not None and self.framework is not None
        sched = self.framework.scheduler
        snap = self.ledger.cluster.snapshot()

        def scores(pod: PodRequest, s: Any) -> tuple[np.ndarray, np.ndarray]:
            nodes, totals = sched.scores(pod, s)
            return nodes, totals / sched.total_weight

        return explain(req, snap, sched.inner, scores=scores, classes=self._classes, max_classes=max_classes)

    def summary(self) -> dict[str, Any]:
        phases = Counter(e.phase.value for e in self.ledger)
        c = self.ledger.cluster
        return {"nodes": self.num_nodes, "pods": dict(phases),
                "gpu_milli_used": int(c.used_gpu_milli) if c else 0,
                "gpu_milli_total": int(c.total_gpu_milli) if c else 0,
                "counters": asdict(self.counters), "ledger": asdict(self.ledger.stats),
                "cache": asdict(self.framework.scheduler.stats) if self.framework else {}}
