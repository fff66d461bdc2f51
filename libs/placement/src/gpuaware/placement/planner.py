"""What one placement instance decides from its view: a pending pod goes in, a decision comes out.

The placement service keeps wiring only (subscribe, convert wire messages, publish, the lease);
everything that decides is pure and starts here. The Planner turns events into the scheduling
session's input and the session's results into decisions: it keeps the node set and the allocation
ledger (ledger.py), builds the profile from configuration, holds gangs until they are complete,
remembers the nodes the binder refused a pod on, and runs the actions (session.py, actions/):

    submit(uid, attempt, request, payload)    once, from the pending stream
      -> ledger QUEUED -> Session.run([pod] or [gang])  (allocate, then preempt when it fits nowhere)
      -> Decided (reserved; victims evicted)  |  Parked (why, explained)
    retry(limit)                              parked pods again after capacity was freed: gangs,
                                              then lone pods in the queue order (actions.fair_share),
                                              then elastic jobs' extra workers on what is left (a grow)
    reclaim(uid, victims)                     a parked pod placed by evicting the pods quota's
                                              reclaim plan named (actions.reclaim)

A decision is recorded in the ledger when its session's statement is committed: at once, or, when a
Permit plugin made it wait (the placement service's), on `waiting.allow(uid)`; `waiting.reject(uid)`
discards it instead and the pod waits again (held.py).

Leader and standbys build the same view from the same events; only the leader calls `submit` and
`retry`. The cluster is rebuilt lazily after node-set changes (`ensure_cluster`), between cycles,
never inside one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gpuaware.placement.actions import Backfill, fair_share_pass, reclaim
from gpuaware.placement.config import PlannerConfig
from gpuaware.placement.elastic import GainFn, grow_order, holding_by_gang, is_elastic, spares
from gpuaware.placement.explain import PodExplanation
from gpuaware.placement.extensions import DefaultPreemption, PermitGate
from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.gang import GangTable
from gpuaware.placement.held import HeldDecisions
from gpuaware.placement.ledger import HOLDING, RETRIED, Phase, PodEntry
from gpuaware.placement.model import NodeSpec, PodRequest
from gpuaware.placement.outcomes import (
    ELASTIC_GROW,
    GANG_INCOMPLETE,
    Counters,
    Decided,
    Outcome,
    Parked,
    decision_id,
)
from gpuaware.placement.preempt import running_victims
from gpuaware.placement.queue_order import QueueSort, Reservation, gpus_of, queue_of
from gpuaware.placement.session import ACTIONS, Framework, Placed, Session, Waiting
from gpuaware.placement.verdicts import park
from gpuaware.placement.view import PlacementView
from gpuaware.placement.world_clock import WorldClock

log = logging.getLogger(__name__)

__all__ = ["Counters", "Decided", "Outcome", "Parked", "Planner", "PlannerConfig", "decision_id"]


class Planner:
    """The decisions of one placement instance (see the module docstring)."""

    def __init__(self, config: PlannerConfig, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.counters = Counters()
        self.view = PlacementView(config, clock, self.counters)
        self.ledger = self.view.ledger
        self.gangs = GangTable()
        self.refused: dict[str, set[str]] = {}
        """pod uid -> nodes the binder refused it on (transiently): not chosen again for it"""
        self.unpowered: frozenset[str] = frozenset()
        """nodes switched off, being switched off or still booting (a node-power planner's): no pod goes
        there, nor is any victim sought there"""
        self.waiting = HeldDecisions(self.ledger, self.gangs, self._record, clock)
        """decisions held at Permit (their statements open): `waiting.allow(uid)` / `.reject(uid, ...)`"""
        self.world = WorldClock(clock)
        self.backfill = Backfill()
        self.stops: dict[str, int] = {}
        """elastic job (gang id) -> times every worker of it was evicted (this instance's decisions)"""
        self.grown_at: dict[str, float] = {}
        self.shrunk_at: dict[str, float] = {}
        """elastic job (gang id) -> when this instance's decisions last grew / shrank it (the resize hold)"""
        self.grow_gain: GainFn | None = None
        """what one more worker adds to an elastic job (its measured throughput curve), when the host
        knows; None: the narrowest job grows first (elastic.py)"""

    # -- the view (view.py) ----------------------------------------------------------------------------

    @property
    def config(self) -> PlannerConfig:
        return self.view.config

    @config.setter
    def config(self, value: PlannerConfig) -> None:  # tuning a running instance (tests, tools)
        self.view.config = value

    def use_policy(self, name: str, config: Mapping[str, Any]) -> None:
        """Decide with another (validated) profile from the next cycle on (``PlacementView.use_policy``)."""
        self.view.use_policy(name, config)

    @property
    def framework(self) -> Framework | None:
        return self.view.framework

    @property
    def order(self) -> QueueSort | None:
        return self.view.order

    @property
    def specs(self) -> dict[str, NodeSpec]:
        return self.view.specs

    @property
    def typical(self) -> TypicalPods:
        return self.view.mix.typical

    @property
    def reservations(self) -> dict[str, Reservation]:
        """Nodes held for starved tenants' wide pods, by pod uid (actions/backfill.py)."""
        return self.backfill.held

    def ensure_cluster(self) -> bool:
        return self.view.ensure_cluster()

    def explain_request(self, req: PodRequest, max_classes: int = 50) -> PodExplanation:
        return self.view.explain(req, max_classes)

    def session(self, actions: Sequence[str] = ACTIONS) -> Session:
        """A scheduling session on the current view (the caller made sure the cluster exists)."""
        assert self.ledger.cluster is not None and self.framework is not None
        cfg = self.config
        return Session(self.ledger.cluster, self.framework, actions, exclude=self._excluded,
                       running=lambda: running_victims(self.ledger, self.clock(), min_run_s=cfg.victim_min_run_s,
                                                       max_requeues=cfg.victim_max_requeues, stops=self.stops))

    # -- deciding ----------------------------------------------------------------------------------------

    def is_duplicate(self, uid: str, attempt: int) -> bool:
        """A pending pod already seen for this attempt (or an attempt that is over)."""
        entry = self.ledger.pods.get(uid)
        return self.ledger.is_stale(uid, attempt) or uid in self.waiting or (
            entry is not None and entry.attempt == attempt and entry.phase != Phase.QUEUED)

    def reject_invalid(self, uid: str, attempt: int) -> None:
        """An invalid request: nothing will ever place this attempt."""
        self.counters.rejected += 1
        self.ledger.release(uid, attempt)

    def submit(self, uid: str, attempt: int, request: PodRequest, payload: Any = None) -> list[Outcome]:
        """A pending pod from the durable stream: decide it (or its gang, once complete) now.
        Raises RuntimeError when the cluster view is empty (nothing could be decided: retry later)."""
        if not self.ensure_cluster():
            raise RuntimeError("no nodes in the cluster view yet")
        self.view.observe(request)
        entry = self.ledger.pods.get(uid)
        if entry is None or entry.attempt != attempt:
            self.ledger.queue(uid, attempt, request, self.clock(), payload=payload)
        entry = self.ledger.pods[uid]
        if request.elastic:
            return self._submit_elastic(entry)
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
        """Try parked pods again (capacity was freed): gangs first, then lone pods in the queue order.
        Returns (outcomes, more): `more` when the pass stopped at `limit` decisions with pods left."""
        if not self.ensure_cluster():
            return [], False
        assert self.framework is not None
        singles: list[PodEntry] = []
        gangs: list[str] = []
        cores: dict[str, list[PodEntry]] = {}
        grows: list[PodEntry] = []
        retried = self.ledger.waiting([Phase.PARKED, Phase.QUEUED])
        holding = holding_by_gang(self.ledger) if any(
            e.request is not None and e.request.elastic for e in retried) else {}
        for entry in retried:
            req = entry.request
            if req is None or entry.uid in self.waiting:
                continue
            if req.elastic:
                if len(holding.get(req.gang_id, ())) >= max(1, req.gang_min_members):
                    grows.append(entry)
                else:
                    cores.setdefault(req.gang_id, []).append(entry)
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
        for gang_id, members in cores.items():
            if max(1, members[0].request.gang_min_members) - len(holding.get(gang_id, ())) == 1:  # type: ignore[union-attr]  # waiting() returns pods with requests
                singles.append(members[0])  # a core of one is a lone pod (the rest grow once it runs)
            else:
                out += self._place_core(gang_id)
        singles = self._ungated(singles)
        left = max(0, limit - sum(isinstance(o, Decided) for o in out))
        order = self.framework.queue_sort
        if order is None or not order.tenant_aware:
            got, tried = self._decide(singles, publish=set(), limit=left)
            more = tried < len(singles)
            if grows and not more:
                grown, more = self._grow(grows, max(0, left - sum(isinstance(o, Decided) for o in got)))
                got += grown
        else:  # the pass tries grows too: those of tenants below their share before others' pods
            cfg = self.config
            got, more = fair_share_pass(
                order, singles, left, ledger=self.ledger, specs=self.specs, now=self.world.now,
                decide=lambda entries, n: self._decide(entries, publish=set(), limit=n), reclaim=self.reclaim,
                backfill=self.backfill, max_reclaims=cfg.max_reclaims, max_reservations=cfg.max_reservations,
                counters=self.counters, grows=grows, grow=self._grow)
        self.counters.retried_decided += sum(isinstance(o, Decided) for o in got)
        return out + got, more

    def predict(self, uid: str, seconds: float) -> None:
        """The duration predictor's runtime for a waiting pod (fair-share order's shortest-first)."""
        if self.order is not None and uid in self.ledger.pods:
            self.order.predict(uid, seconds)

    def reclaim(self, uid: str, victims: Sequence[str]) -> Decided | None:
        """Quota answered a waiting pod with a reclaim plan: place it where evicting only pods of
        `victims` makes room (or where it fits now, if capacity came back meanwhile). None when the pod
        is not waiting, belongs to a gang (all or none: not reclaimed for), or the victims cannot make
        room on any one node: it stays parked."""
        entry = self.ledger.pods.get(uid)
        if (entry is None or entry.request is None or entry.phase not in RETRIED or uid in self.waiting
                or (entry.request.gang_id and entry.request.gang_min_members > 1 and not entry.request.elastic)
                or not self.ensure_cluster()):
            return None
        session = self.session()
        fits = session.allocate(entry.request)
        got = fits if isinstance(fits, Placed) else reclaim(session, entry.request, victims,
                                                            max_victims=self.config.max_victims)
        if got is None:
            return None
        return self._commit(entry, got, preemption_reason="reclaim" if got.victims else "priority")

    # -- the session's results into decisions -----------------------------------------------------------

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

    # -- elastic jobs (elastic.py) -------------------------------------------------------------------

    def _submit_elastic(self, entry: PodEntry) -> list[Outcome]:
        """A worker of an elastic job: part of the job's core (placed all or none, a core of one as a lone
        pod) while the job holds fewer than its minimum, else a grow (decided now only if no other pod
        waits: grows take idle GPUs, never anyone's turn)."""
        req = entry.request
        assert req is not None
        gang = self.gangs.add(req)
        core = max(1, req.gang_min_members)
        held = len(holding_by_gang(self.ledger.pods[u] for u in gang.members if u in self.ledger.pods).get(req.gang_id, ()))
        if held >= core:
            if any(e.uid != entry.uid and not (e.request is not None and e.request.elastic)
                   for e in self.ledger.waiting([Phase.PARKED])):
                return self._grow_waits(entry, publish=True)
            grown, _ = self._grow([entry], 1, publish={entry.uid})
            return grown or self._grow_waits(entry, publish=True)
        if core - held == 1:
            return self._decide([entry], publish={entry.uid})[0]
        got = self._place_core(req.gang_id, arriving=entry.uid)
        if not got:
            msg = f"elastic gang {req.gang_id}: {len(gang.members)}/{core} workers present"
            self.ledger.wait(entry.uid, entry.attempt, Phase.HELD, GANG_INCOMPLETE, now=self.clock())
            self.counters.unschedulable += 1
            return [Parked(entry, GANG_INCOMPLETE, msg)]
        return got

    def _place_core(self, gang_id: str, arriving: str | None = None) -> list[Outcome]:
        """The workers an elastic job lacks to reach its minimum, placed all or none (oldest first)."""
        gang = self.gangs.gangs.get(gang_id)
        if gang is None:
            return []
        members = [e for uid in gang.members if (e := self.ledger.pods.get(uid)) is not None and e.request is not None]
        held = len(holding_by_gang(members).get(gang_id, ()))
        waiting = sorted((e for e in members if e.phase not in HOLDING and e.uid not in self.waiting),
                         key=lambda e: (e.uid != arriving, e.seq))
        need = max(1, members[0].request.gang_min_members) - held if members else 0  # type: ignore[union-attr]  # filtered above
        if need <= 0 or len(waiting) < need:
            return []
        core = sorted(waiting[:need], key=lambda e: e.seq)
        results = self.session().run([[e.request for e in core if e.request is not None]])
        by_uid = {e.uid: e for e in core}
        if all(isinstance(r, Placed) for r in results):
            self.counters.gangs_placed += 1
            return [self._commit(by_uid[r.pod.name], r) for r in results if isinstance(r, Placed)]
        out: list[Outcome] = []
        for r in results:
            assert isinstance(r, Waiting)
            out += self._wait(by_uid[r.pod.name], r, publish=r.pod.name == arriving)
        return out

    def _grow(self, grows: Sequence[PodEntry], limit: int,
              publish: set[str] | None = None) -> tuple[list[Outcome], bool]:
        """Extra workers of running elastic jobs onto idle GPUs, in `grow_order`; allocate only (a grow
        never preempts, and what finds no room waits as a grow). (outcomes, whether workers the order
        kept were left untried at `limit`)."""
        if limit <= 0:
            return [], bool(grows)
        width = {g: len(m) for g, m in holding_by_gang(self.ledger).items()}
        order = self.order
        if order is not None and order.tenant_aware:
            demand = order.demand(self.ledger)
            below = lambda e: demand.attained(queue_of(e)) <= 1.0 + 1e-9  # noqa: E731  # one predicate
        else:
            below = lambda e: True  # noqa: E731  # no tenants: nobody is above a share
        ordered = grow_order([e for e in grows if not self._held(e, self.shrunk_at)], width, below_share=below,
                             gain=self.grow_gain)
        session = self.session(actions=("allocate",))
        results = session.run([e.request for e in ordered if e.request is not None], limit=limit)
        by_uid = {e.uid: e for e in ordered}
        out: list[Outcome] = []
        unplaced: list[PodEntry] = []
        for r in results:
            entry = by_uid[r.pod.name]
            if isinstance(r, Placed):
                self.counters.elastic_grows += 1
                out.append(self._commit(entry, r))
                self._mark(entry, self.grown_at)
            else:
                unplaced.append(entry)
        taken = self._grow_by_swap(unplaced, limit - sum(isinstance(o, Decided) for o in out))
        out += taken.values()
        for entry in unplaced:
            if entry.uid not in taken:
                out += self._grow_waits(entry, publish=entry.uid in (publish or ()))
        return out, len(results) < len(ordered)

    def _grow_by_swap(self, grows: Sequence[PodEntry], limit: int) -> dict[str, Decided]:
        """Goodput-aware shares: a grow of a tenant below its fair share that found no idle GPU takes a
        spare of a tenant that stays at or above its share without it (a swap of elastic workers: each
        side pays a resize, so only across the share line, never within it). At most `max_swaps` per
        pass, the shares recomputed after each."""
        order = self.order
        if not grows or order is None or not order.tenant_aware or limit <= 0:
            return {}
        got: dict[str, Decided] = {}
        demand = order.demand(self.ledger)
        spare: set[str] | None = None
        for entry in grows:
            if len(got) >= min(limit, self.config.max_swaps):
                break
            tenant = queue_of(entry)
            if demand.attained(tenant) >= 1.0 - 1e-9:
                continue
            if spare is None:
                spare = spares(self.ledger)
            donors = [e.uid for e in self.ledger if e.uid in spare and queue_of(e) != tenant
                      and demand.running.get(queue_of(e), 0.0) - gpus_of(e) >= demand.share.get(queue_of(e), 0.0) - 1e-9
                      and not self._held(e, self.grown_at)]
            if not donors:
                continue
            d = self.reclaim(entry.uid, donors)
            if d is not None:
                self.counters.elastic_grows += 1
                got[entry.uid] = d
                self._mark(entry, self.grown_at)
                demand, spare = order.demand(self.ledger), None
        return got

    def _held(self, entry: PodEntry, since: dict[str, float]) -> bool:
        """Whether `entry`'s elastic job moved the other way (`since`: `shrunk_at` for a grow,
        `grown_at` for a swap's donor) less than `resize_hold_s` ago."""
        at = since.get(entry.request.gang_id) if entry.request is not None else None
        return at is not None and self.clock() - at < self.config.resize_hold_s

    def _mark(self, entry: PodEntry, at: dict[str, float]) -> None:
        if entry.request is not None and entry.request.gang_id:
            at[entry.request.gang_id] = self.clock()

    def _grow_waits(self, entry: PodEntry, *, publish: bool) -> list[Outcome]:
        changed = entry.phase != Phase.PARKED or entry.reason != ELASTIC_GROW
        self.ledger.wait(entry.uid, entry.attempt, Phase.PARKED, ELASTIC_GROW, now=self.clock())
        if not (publish or changed):
            return []
        self.counters.unschedulable += 1
        return [Parked(entry, ELASTIC_GROW, "an elastic job's worker beyond its minimum: waits for idle GPUs")]

    def _place_gang(self, gang_id: str, arriving: str | None = None) -> list[Outcome]:
        gang = self.gangs.gangs[gang_id]
        entries = [e for uid in gang.members if (e := self.ledger.pods.get(uid)) is not None
                   and e.phase not in HOLDING and e.request is not None and uid not in self.waiting]
        if len(entries) < gang.min_members:
            return []
        results = self.session().run([[e.request for e in entries if e.request is not None]])
        by_uid = {e.uid: e for e in entries}
        placed = [r for r in results if isinstance(r, Placed)]
        if len(placed) == len(results):
            gang.placed = True
            self.counters.gangs_placed += 1
            return [self._commit(by_uid[r.pod.name], r) for r in placed]
        out: list[Outcome] = []
        for r in results:
            assert isinstance(r, Waiting)
            out += self._wait(by_uid[r.pod.name], r, publish=r.pod.name == arriving)
        return out

    def _commit(self, entry: PodEntry, placed: Placed, preemption_reason: str = "priority") -> Decided:
        """The session reserved the pod (and evicted its victims): the decision, recorded in the ledger
        now, or when its permit allows it."""
        assert self.ledger.cluster is not None and self.framework is not None
        d = placed.decision
        victims = tuple(self.ledger.pods[v.uid] for v in placed.victims if v.uid in self.ledger.pods)
        if victims:
            self.counters.preemptions_planned += 1
            self.counters.victims_planned += len(victims)
            self.counters.elastic_shrinks += sum(v.spare for v in placed.victims)
            if all(v.spare for v in placed.victims):
                preemption_reason = "shrink"
        alloc = self.ledger.cluster.allocations[entry.uid]
        self.counters.decided += 1
        decided = Decided(entry, decision_id(entry.uid, entry.attempt), d.node_name, d.gpus,
                          round(self.framework.scheduler.normalized(d.score), 3), alloc.gpu_mem, victims,
                          preemption_reason, placed.permit)
        if placed.permit is not None:
            self.waiting.hold(decided)
        else:
            self._record(decided)
        return decided

    def _record(self, d: Decided) -> None:
        entry = d.entry
        if d.victims:
            self.ledger.evict_for(d.decision_id, [v.uid for v in d.victims])
            self._count_stops(d.victims)
            for v in d.victims:
                if is_elastic(v):
                    self._mark(v, self.shrunk_at)
        self.ledger.decide(entry.uid, entry.attempt, d.decision_id, d.node, d.gpus, entry.request, self.clock(),
                           gpu_mem=d.gpu_mem)

    def _wait(self, entry: PodEntry, waiting: Waiting, *, publish: bool) -> list[Outcome]:
        return park(entry, waiting.status, publish=publish, refused=bool(self.refused.get(entry.uid)),
                    ledger=self.ledger, explain=self.explain_request, counters=self.counters, now=self.clock())

    # -- what a session needs from the view ---------------------------------------------------------

    def _ungated(self, entries: list[PodEntry]) -> list[PodEntry]:
        """``entries`` less those a Permit gate would refuse wherever they went (``PermitGate``): left
        parked with their reason, not tried this pass."""
        assert self.framework is not None
        gates = [p for p in self.framework.permits if isinstance(p, PermitGate)]
        if not gates or not entries or self.ledger.cluster is None:
            return entries
        snap = self.ledger.cluster.snapshot()
        return [e for e in entries
                if e.request is None or not any(g.certainly_denied(e.request, snap) for g in gates)]

    def refuse(self, uid: str, node: str) -> None:
        """The binder refused `uid` on `node` (transiently): keep its next attempts off it."""
        nodes = self.refused.setdefault(uid, set())
        if len(nodes) < self.config.max_refused_nodes:
            nodes.add(node)

    def _excluded(self, pod: PodRequest) -> np.ndarray | None:
        nodes = self.refused.get(pod.name, set())
        if self.unpowered:
            nodes = nodes | self.unpowered
        if self.backfill.held:  # (none held: nothing copied on the decision path)
            nodes = nodes | self.backfill.excluded(pod.name, self.order, self.ledger)
        if not nodes or self.ledger.cluster is None:
            return None
        return self.ledger.cluster.node_mask(nodes)

    def _count_stops(self, victims: Sequence[PodEntry]) -> None:
        """An elastic job whose every worker a decision evicts was stopped (not shrunk): counted per job,
        since its workers come back as new attempts in any order (the re-queue cap reads the count)."""
        gangs = {v.request.gang_id for v in victims if v.request is not None and v.request.elastic}
        if not gangs:
            return
        running = holding_by_gang(self.ledger)
        for gang in gangs - set(running):
            self.stops[gang] = self.stops.get(gang, 0) + 1

    def forget(self, uid: str) -> None:
        """The pod left: drop what was kept about it outside the ledger."""
        self.refused.pop(uid, None)
        if self.order is not None:
            self.order.forget(uid)
        for plugin in self.framework.post_filters if self.framework is not None else ():
            if isinstance(plugin, DefaultPreemption):
                plugin.forget(uid)  # its preemption cooldown
        entry = self.ledger.pods.get(uid)
        if entry is not None and entry.request is not None and entry.request.gang_id:
            self.gangs.remove_member(uid, entry.request.gang_id)
            if entry.request.gang_id not in self.gangs.gangs:
                for kept in (self.stops, self.grown_at, self.shrunk_at):
                    kept.pop(entry.request.gang_id, None)
