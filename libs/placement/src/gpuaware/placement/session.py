"""One scheduling session per cycle: every caller that decides goes through it.

Volcano's model on our cluster: a session opens on a cluster (its snapshot), runs the configured
actions in order over the pods it is given, stages each change in a *statement* that is committed or
discarded as a whole, and closes. The placement service, the evaluator (`gpuaware eval placement`),
the online and Gavel simulators, the digital twin's baseline (the service again, under the
KubeDefault profile) and every `make bench-*` decide through this module, so a figure in
bench/results is a decision the service would make.

    Session(cluster, framework)            framework: a profile built (registry.build_framework):
                                           the scheduler + the plugins of every other point
      .run([pod | gang, ...])              actions in order, e.g. ("allocate", "preempt")
         allocate  filter -> score -> select GPUs -> reserve -> permit   (per pod)
                   a gang: every member staged in one statement, all or none
         preempt   pods still unschedulable: PostFilter plugins plan evictions; the plan's
                   victims are evicted and the pod reserved in one statement, then permitted
      .allocate(pod) / .allocate_gang(members) / .preempt(pod)    one action on one unit
      .stage(pod, decision, plan)    a decision made elsewhere (reclaim), staged and permitted

Statements: `Statement.reserve` / `evict` change the cluster at once (a later pod of the same session
sees them, so two pods never count the same free GPU) and remember how to undo; `discard` undoes in
reverse order, `commit` forgets the undo log. A pod that a
Permit plugin denies, or a gang with one member that fits nowhere, leaves nothing reserved.

Permit may also answer *wait* (kube-scheduler's WaitingPod): the verdict comes from outside the
session, e.g. the quota service over the bus. The pod's statement then stays open and its `Placed`
carries a `WaitingPod`; whoever gets the answer calls `allow()` (the statement is committed) or
`reject()` (it is discarded: nothing stays reserved, no victim stays evicted). Pods of later sessions
see the waiting pod's reservation meanwhile, so nobody else takes its GPUs while it waits.

The snapshot's arrays are read-only views of the live cluster, so within a session each pod sees
what the pods before it took; the cluster is never changed behind the session's back (callers apply
world events between sessions).

The fair-share retry pass, reclaim and backfill are actions over sessions too; they live in
`gpuaware.placement.actions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuaware.placement.cache import CachedScheduler, shape_of
from gpuaware.placement.cluster import Allocation, Cluster, ReserveError, Snapshot
from gpuaware.placement.extensions import PermitPlugin, PostFilterPlugin
from gpuaware.placement.framework import Code, CycleState, Decision, Scheduler, Status
from gpuaware.placement.model import PodRequest
from gpuaware.placement.preempt import PreemptionPlan, Victim

if TYPE_CHECKING:
    from gpuaware.placement.queue_order import QueueSort

__all__ = ["ACTIONS", "Framework", "Placed", "Result", "Session", "Statement", "Waiting", "WaitingPod"]

ACTIONS = ("allocate", "preempt")
"""The actions a session knows, in their default order."""


# -- statements -----------------------------------------------------------------------------------


class Statement:
    """Changes staged on a cluster: applied at once, undone together by `discard`, kept by `commit`."""

    __slots__ = ("_undo", "cluster")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._undo: list[Callable[[], object]] = []

    def reserve(self, pod: PodRequest, node: int, gpus: Sequence[int], gpu_mem: int | None = None) -> Allocation:
        """`Cluster.reserve`, undone by `discard` (a placement the pod already held is left alone)."""
        held = pod.name in self.cluster.allocations
        alloc = self.cluster.reserve(pod, node, gpus, gpu_mem)
        if not held:
            self._undo.append(lambda: self.cluster.unreserve(alloc.pod))
        return alloc

    def evict(self, pod_name: str) -> Allocation | None:
        """Release what `pod_name` holds; `discard` gives it back exactly."""
        alloc = self.cluster.unreserve(pod_name)
        if alloc is not None:
            self._undo.append(lambda: self.cluster.restore(alloc))
        return alloc

    def commit(self) -> None:
        self._undo.clear()

    def discard(self, to: int = 0) -> None:
        """Undo in reverse order everything staged since `to` (a `len(statement)` taken earlier)."""
        while len(self._undo) > to:
            self._undo.pop()()

    def __len__(self) -> int:
        return len(self._undo)


# -- what a session needs and what it returns -----------------------------------------------------


@dataclass(slots=True)
class Framework:
    """One scheduling profile, built: the filter/score/select scheduler and the plugins of the other
    points (kube-scheduler calls the built profile a framework).

    The scheduler is always wrapped in `CachedScheduler` (decisions identical to the bare one, tested
    pod by pod), so every caller pays the same per-decision cost as the service."""

    scheduler: CachedScheduler
    permits: tuple[PermitPlugin, ...] = ()
    post_filters: tuple[PostFilterPlugin, ...] = ()
    queue_sort: QueueSort | None = None
    """the order waiting pods are retried in (None: priority, then arrival; see queue_order.py)"""

    @classmethod
    def of(cls, scheduler: Scheduler | CachedScheduler, **plugins: Any) -> Framework:
        cached = scheduler if isinstance(scheduler, CachedScheduler) else CachedScheduler(scheduler)
        points: dict[str, Any] = {k: tuple(v) for k, v in plugins.items()}
        return cls(cached, **points)

    @property
    def name(self) -> str:
        return self.scheduler.name


class WaitingPod:
    """A pod (or a gang's members) staged and held at Permit until its verdict comes from outside.

    Its statement stays open: `allow()` commits it, once for each member of `pods` (a gang commits
    when every member was allowed); `reject()` discards it, whole. `waiting_on` names the Permit
    plugins that asked to wait."""

    __slots__ = ("_allowed", "_statement", "pods", "waiting_on")

    def __init__(self, statement: Statement, pods: Sequence[str], waiting_on: Sequence[str]) -> None:
        self._statement: Statement | None = statement
        self._allowed: set[str] = set()
        self.pods = tuple(pods)
        self.waiting_on = tuple(waiting_on)

    @property
    def open(self) -> bool:
        """Neither committed nor discarded yet."""
        return self._statement is not None

    def allow(self, pod: str | None = None) -> bool:
        """`pod` (every member when None) is permitted; True when that closed the statement."""
        if self._statement is None:
            return False
        self._allowed.update(self.pods if pod is None else (pod,))
        if not self._allowed.issuperset(self.pods):
            return False
        self._statement.commit()
        self._statement = None
        return True

    def evict(self, pod: str) -> bool:
        """Also evict `pod` in the open statement (a permit's late reclaim plan). True if it held GPUs."""
        return self._statement is not None and self._statement.evict(pod) is not None

    def reject(self) -> bool:
        """Undo everything staged for the unit. True when something was still open."""
        if self._statement is None:
            return False
        self._statement.discard()
        self._statement = None
        return True


@dataclass(frozen=True, slots=True)
class Placed:
    """A pod reserved on `decision`'s node and GPUs; `victims` were evicted for it (a preemption plan
    or a permit's reclaim), `plan` is the preemption plan when there was one. `permit` is set while a
    Permit plugin makes the pod wait (its statement still open)."""

    pod: PodRequest
    decision: Decision
    victims: tuple[Victim, ...] = ()
    plan: PreemptionPlan | None = None
    permit: WaitingPod | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pod left unplaced this cycle, and why (`status.code`: UNSCHEDULABLE waits for capacity,
    UNRESOLVABLE can never fit, DENIED waits for a permit, ERROR is a plugin fault)."""

    pod: PodRequest
    status: Status
    retry_after_s: float | None = None


Result = Placed | Waiting
Unit = PodRequest | Sequence[PodRequest]
"""A pod, or the members of a gang (placed all or none)."""


@dataclass(slots=True)
class SessionStats:
    placed: int = 0
    waiting: int = 0
    preempted: int = 0
    denied: int = 0
    shapes_skipped: int = 0
    """pods not tried because a pod of the same shape found no node earlier in the session"""


# -- the session ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Session:
    """One cycle over `cluster` with `framework`.

    `running()` lists the pods a PostFilter may evict (None: nothing may be); `exclude(pod)` is a bool
    mask of nodes kept out of this pod's choices for reasons outside the engine (the binder refused
    it there), or None."""

    cluster: Cluster
    framework: Framework
    actions: Sequence[str] = ACTIONS
    running: Callable[[], Iterable[Victim]] | None = None
    exclude: Callable[[PodRequest], np.ndarray | None] | None = None
    stats: SessionStats = field(default_factory=SessionStats)
    _evicted: set[str] = field(default_factory=set)
    _running: list[Victim] | None = None
    """`running()` read once per session, on first need (nothing becomes running inside a session)"""

    def __post_init__(self) -> None:
        if self.actions is ACTIONS:  # the default (a session per decision: kept cheap)
            return
        unknown = [a for a in self.actions if a not in ACTIONS]
        if unknown:
            raise ValueError(f"unknown session action(s) {unknown}; known: {', '.join(ACTIONS)}")

    @property
    def snapshot(self) -> Snapshot:
        """The cycle's view: read-only views of the live arrays (a staged change shows at once)."""
        return self.cluster.snapshot()

    # -- the actions ----------------------------------------------------------------------------------

    def run(self, units: Iterable[Unit], limit: int | None = None) -> list[Result]:
        """Every action in order over `units` (pods, or gangs as sequences of members). Results come in
        the order of the units, a gang's members in their order; a pod placed by a later action
        replaces its earlier Waiting result. With `limit`, allocation stops after that many pods were
        placed: the units after it get no result (not tried) and no later action sees them."""
        units = list(units)
        results: list[list[Result]] = [[] for _ in units]
        failed: dict[tuple[Any, ...], Status] = {}
        for action in self.actions:
            placed = 0
            for i, unit in enumerate(units):
                if action == "allocate":
                    if limit is not None and placed >= limit:
                        break
                    results[i] = self._allocate_unit(unit, failed)
                    placed += sum(isinstance(r, Placed) for r in results[i])
                elif action == "preempt" and isinstance(unit, PodRequest):
                    got = results[i][0] if results[i] else None
                    if isinstance(got, Waiting) and got.status.code == Code.UNSCHEDULABLE:
                        planned = self.preempt(unit)
                        if planned is not None:
                            results[i] = [planned]
        out = [r for rs in results for r in rs]
        for r in out:
            if isinstance(r, Placed):
                self.stats.placed += 1
            else:
                self.stats.waiting += 1
        return out

    def _allocate_unit(self, unit: Unit, failed: dict[tuple[Any, ...], Status]) -> list[Result]:
        if not isinstance(unit, PodRequest):
            return self.allocate_gang(unit)
        # reservations only take capacity away, so a shape the filters found no node for finds none
        # later in the same allocate pass either. Only the filters' own verdict (plugin "") counts: a
        # per-pod exclusion or a Permit plugin may refuse one pod and not the next.
        key = shape_of(unit)
        if key in failed:
            self.stats.shapes_skipped += 1
            return [Waiting(unit, failed[key])]
        result = self.allocate(unit)
        if (isinstance(result, Waiting) and result.status.code in (Code.UNSCHEDULABLE, Code.UNRESOLVABLE)
                and result.status.plugin == "" and self.excluded(unit) is None):
            failed[key] = result.status
        return [result]

    def schedule(self, pod: PodRequest) -> Decision | Status:
        """Filter, Score and GPU selection: the staged choice, nothing reserved."""
        return self.framework.scheduler.schedule(pod, self.cluster.snapshot(), self.excluded(pod))

    def allocate(self, pod: PodRequest, statement: Statement | None = None) -> Result:
        """Schedule one pod and stage it (committed unless a `statement` of the caller holds it)."""
        result = self.schedule(pod)
        if isinstance(result, Status):
            return Waiting(pod, result)
        return self._stage(CycleState(), pod, result, statement)

    def allocate_gang(self, members: Sequence[PodRequest]) -> list[Result]:
        """Every member or none: the largest GPU request first (the hard ones choose first), each
        staged before the next is scheduled; one member without a place discards them all."""
        order = sorted(members, key=lambda p: (-p.total_gpu_milli, -p.cpu_milli, p.name))
        stmt = Statement(self.cluster)
        placed: list[Placed] = []
        for pod in order:
            got = self.allocate(pod, stmt)
            if isinstance(got, Waiting):
                stmt.discard()
                why = f"gang member {pod.name}: {got.status.reason}"
                return [got if m is pod else Waiting(m, Status(got.status.code, why, "gang"), got.retry_after_s)
                        for m in members]
            placed.append(got)
        waits = sorted({name for r in placed if r.permit is not None for name in r.permit.waiting_on})
        if waits:
            permit = WaitingPod(stmt, [m.name for m in members], waits)
            placed = [replace(r, permit=permit) for r in placed]
        else:
            stmt.commit()
        by_name = {r.pod.name: r for r in placed}
        return [by_name[m.name] for m in members]

    def preempt(self, pod: PodRequest, statement: Statement | None = None) -> Placed | None:
        """PostFilter: the first plan a plugin finds, staged with its evictions; None when none."""
        if self.running is None or not self.framework.post_filters:
            return None
        cycle = CycleState()
        snap = self.cluster.snapshot()
        running = _Candidates(self)  # read only if a plugin looks (most pods may evict nobody)
        for plugin in self.framework.post_filters:
            plan = plugin.post_filter(cycle, pod, snap, self.framework.scheduler.inner, running, self.excluded(pod))
            if plan is None:
                continue
            got = self.stage(pod, plan, statement, cycle)
            if got is not None:
                return got
        return None

    def stage(self, pod: PodRequest, plan: PreemptionPlan, statement: Statement | None = None,
              cycle: CycleState | None = None) -> Placed | None:
        """A plan made outside the filters (a PostFilter's, or reclaim's): its victims evicted and the
        pod reserved in one statement, then permitted. None when staging or a permit refused it."""
        decision = Decision(pod.name, plan.node, plan.node_name, plan.gpus, 0.0, plan.candidates)
        got = self._stage(CycleState() if cycle is None else cycle, pod, decision, statement, plan)
        if not isinstance(got, Placed):
            return None
        self.stats.preempted += 1
        return got

    # -- staging ----------------------------------------------------------------------------------------

    def candidates(self) -> list[Victim]:
        """The running pods a plan may still evict in this session (those not evicted by it yet)."""
        if self._running is None:
            self._running = list(self.running()) if self.running is not None else []
        return [v for v in self._running if v.uid not in self._evicted]

    def excluded(self, pod: PodRequest) -> np.ndarray | None:
        """The nodes kept out of `pod`'s choices (`exclude`), None when none are."""
        if self.exclude is None:
            return None
        mask = self.exclude(pod)
        return mask if mask is not None and mask.any() else None

    def _stage(self, cycle: CycleState, pod: PodRequest, decision: Decision, statement: Statement | None,
               plan: PreemptionPlan | None = None) -> Result:
        stmt = Statement(self.cluster) if statement is None else statement
        mark = len(stmt)
        victims: list[Victim] = list(plan.victims) if plan is not None else []
        try:
            for v in victims:
                stmt.evict(v.uid)
            stmt.reserve(pod, decision.node, decision.gpus)
        except ReserveError as exc:
            stmt.discard(mark)
            return Waiting(pod, Status(Code.UNSCHEDULABLE, str(exc), "reserve"))
        reclaim: list[str] = []
        waits: list[str] = []
        snap: Snapshot | None = None
        for permit in self.framework.permits:
            if snap is None:
                snap = self.cluster.snapshot()
            verdict = permit.permit(cycle, pod, decision, snap)
            if not verdict.allowed:
                stmt.discard(mark)
                self.stats.denied += 1
                return Waiting(pod, Status(Code.DENIED, verdict.reason or "denied", permit.name),
                               verdict.retry_after_s)
            if verdict.wait:
                waits.append(permit.name)
            reclaim += verdict.reclaim
        if reclaim:
            known = {v.uid: v for v in self.candidates()}
            for uid in reclaim:
                if uid in known and uid not in {v.uid for v in victims}:
                    stmt.evict(uid)
                    victims.append(known[uid])
        waiting = WaitingPod(stmt, (pod.name,), waits) if waits else None
        if statement is None and waiting is None:
            stmt.commit()
        self._evicted.update(v.uid for v in victims)
        return Placed(pod, decision, tuple(victims), plan, waiting)


class _Candidates:
    """`Session.candidates()`, read when iterated: a PostFilter that evicts nothing for this pod (a pod
    of priority 0, a cooldown) costs no walk over the running pods."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def __iter__(self) -> Iterator[Victim]:
        return iter(self.session.candidates())
