"""In which order waiting pods get freed capacity: kube-scheduler's QueueSort point, and fair-share reclaim.

Why: in a full cluster every departure frees a few GPUs and the retry pass hands them to the first
waiting pods that fit, so the order of the waiting pods *is* the scheduling policy. A profile names
one order, with typed arguments (a registry kind, ``queue_sort``; absent: ``priority``)::

    {"score": [...], "queue_sort": {"name": "fair-share", "args": {"starved_below": 1.0, "turn_due": 0.1}}}

* ``priority`` (`PrioritySort`, kube-scheduler's PrioritySort, stock Kubernetes): priority, then arrival.
* ``fair-share`` (`FairShareOrder`, `args.FairShareArgs`): priority first; within a priority, tenants
  (queues) below their fair share go first, most starved first; everyone else shortest predicted
  first, then arrival.

Both implement `QueueSort`; its `tenant_aware` trait says whether tenants' shares matter at all (when
not, nobody is ever starved and a caller may skip the share bookkeeping).

Fair share is water-filled over what each tenant wants *now* -- its running plus waiting GPUs -- with
equal weights (``gpuaware.quota.water_fill``, quota's one implementation): a tenant wanting less than
an equal split gets all it wants, the rest is split among the others. A tenant is *starved* while it
runs less than ``starved_below`` of that share (a *capped* tenant -- one wanting more than an equal
split, sharing what is left with the others like it -- only below ``CAPPED_STARVED`` of that, or the
capped tenants would take turns reclaiming from each other). Everyone not starved goes shortest
predicted job first (shortest-job-first with predicted runtimes, PAI's and Tiresias's finding: order by
runtime cuts average completion time). Tenant order alone can keep wide jobs of small tenants waiting
for hours, because a whole node never drains while one-GPU jobs keep taking each freed GPU; so a
starved tenant's pod that fits nowhere may also *reclaim*:
``reclaim_victims`` names the running pods it may evict -- pods of capped tenants holding more than
their share, checkpointable (they resume from the checkpoint the binder asks for), past a minimum
runtime; the session evicts the fewest of them on one node. A victim's tenant dipping under its share
is not starved for it, so it does not take the GPUs straight back.

Reclaim is not always possible (no node where evictable pods make room); then, where the planner's
``max_reservations`` allows (none by default), each starved tenant's first waiting pod wider than one GPU gets a *reservation*
(EASY backfilling, as quota's backfill and Slurm do it, per node here; a one-GPU pod takes the next
GPU freed anywhere, being first in line): the node where it fits soonest by the predicted ends of the
pods running there (quota's ``shadow``), held for it -- a pod that would still run at that time is not placed there, a shorter
one is (backfill). A running pod past its prediction is expected to run as long again as it has run
(runtimes are heavy-tailed), so an overdue node is not reserved on a promise already broken.

With ``turn_due`` above 0 (0 by default; the placement service's default is 0.1), a tenant below its share
and owed service lately (``gpuaware.quota.turns.OwedService``: the decayed mean of share - running) is
starved too, and may also reclaim pods of tenants at or above their share not owed a turn, past
``turn_lease_s``, even if their tenant then dips below its share: it is then owed, and gets its turn
back. A turn takes pods of any priority, lower first: priority orders a tenant's own pods, not the
tenants (see ``gpuaware.quota.turns``).

Predicted runtimes come from the forecasting service's duration predictor (``predicted``: pod uid ->
seconds, filled by the service as answers arrive); a pod nobody predicted yet counts ``default_s``.
Pure: ledger entries in, an order, a victim list or a reservation out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from gpuaware.placement.elastic import spares
from gpuaware.placement.ledger import HOLDING, WAITING, Phase, PodEntry
from gpuaware.placement.model import MILLI
from gpuaware.quota import OwedService, Running, shadow, water_fill

__all__ = ["FairShareOrder", "PrioritySort", "QueueSort", "Reservation", "TenantDemand", "queue_of"]

CAPPED_STARVED = 0.75
"""a capped tenant is starved below this fraction of ``starved_below`` (see ``FairShareOrder.starved``)"""


def gpus_of(entry: PodEntry) -> float:
    """The GPUs a pod holds or asks, in whole GPUs (a share counts its fraction)."""
    req = entry.request
    return 0.0 if req is None else req.total_gpu_milli / MILLI


def _priority(entry: PodEntry) -> int:
    return 0 if entry.request is None else entry.request.priority


def queue_of(entry: PodEntry) -> str:
    return (entry.request.queue if entry.request is not None else "") or "default"


@dataclass(frozen=True, slots=True)
class TenantDemand:
    """GPUs each tenant runs and waits for now, and its water-filled fair share of ``capacity``."""

    running: Mapping[str, float]
    waiting: Mapping[str, float]
    share: Mapping[str, float]

    @classmethod
    def of(cls, entries: Iterable[PodEntry], capacity: float) -> TenantDemand:
        running: dict[str, float] = {}
        waiting: dict[str, float] = {}
        for e in entries:
            into = running if e.phase in HOLDING and not e.evicting else waiting if e.phase in WAITING else None
            if into is not None:
                t = queue_of(e)
                into[t] = into.get(t, 0.0) + gpus_of(e)
        demand = {t: running.get(t, 0.0) + waiting.get(t, 0.0) for t in {*running, *waiting}}
        share = water_fill(capacity, {t: d for t, d in demand.items() if d > 0}, {})
        return cls(running, waiting, share)

    def capped(self, tenant: str) -> bool:
        """It wants more than its share (it shares what is left with the other capped tenants)."""
        want = self.running.get(tenant, 0.0) + self.waiting.get(tenant, 0.0)
        return want > self.share.get(tenant, 0.0) + 1e-9

    def attained(self, tenant: str) -> float:
        """Running GPUs / fair share (1: exactly its share; a tenant with no share counts as served)."""
        share = self.share.get(tenant, 0.0)
        return self.running.get(tenant, 0.0) / share if share > 0 else 1.0


class QueueSort(Protocol):
    """kube-scheduler's QueueSort extension point, with what a tenant-aware order adds: which tenants
    are starved (they go first and may reclaim), the pods they may evict, the node a starved pod's
    turn is held on, and the predicted runtimes shortest-first ordering reads."""

    name: ClassVar[str]
    tenant_aware: ClassVar[bool]
    """False: nobody is ever starved, no victims, no reservations; the order is priority, then arrival
    (the ledger's own), so a caller may skip `demand` and the passes built on it"""

    def demand(self, entries: Iterable[PodEntry]) -> TenantDemand:
        """What each tenant runs and waits for now, and its share."""
        ...

    def observe(self, demand: TenantDemand, now: float) -> None:
        """Fold the tenants' service now into whatever the order remembers (turn-taking)."""
        ...

    def sort(self, waiting: Sequence[PodEntry], demand: TenantDemand) -> list[PodEntry]:
        """The waiting pods in the order they are offered capacity."""
        ...

    def starved(self, tenant: str, demand: TenantDemand) -> bool: ...

    def reclaim_victims(self, entry: PodEntry, holding: Iterable[PodEntry], demand: TenantDemand,
                        now: float) -> list[str]:
        """Running pods (uids) `entry` may evict, in the order they should go."""
        ...

    def reserve(self, entry: PodEntry, holding: Iterable[PodEntry], gpus_of_node: Mapping[str, int],
                models: Mapping[str, str], now: float) -> Reservation | None:
        """The node `entry` fits on soonest and when; None when none ever (or the order holds none)."""
        ...

    def predict(self, uid: str, seconds: float) -> None:
        """The duration predictor's runtime for a waiting pod."""
        ...

    def forget(self, uid: str) -> None:
        """The pod left: drop what was predicted for it."""
        ...

    def runtime(self, uid: str) -> float:
        """The pod's predicted runtime (the default when nobody predicted it)."""
        ...


@dataclass(slots=True)
class PrioritySort:
    """``priority``: priority, then arrival; tenants play no part."""

    name: ClassVar[str] = "priority"
    tenant_aware: ClassVar[bool] = False
    default_s: float = 3600.0

    def demand(self, entries: Iterable[PodEntry]) -> TenantDemand:
        return TenantDemand({}, {}, {})

    def observe(self, demand: TenantDemand, now: float) -> None:
        return None

    def sort(self, waiting: Sequence[PodEntry], demand: TenantDemand) -> list[PodEntry]:
        return sorted(waiting, key=lambda e: (-_priority(e), e.seq))

    def starved(self, tenant: str, demand: TenantDemand) -> bool:
        return False

    def reclaim_victims(self, entry: PodEntry, holding: Iterable[PodEntry], demand: TenantDemand,
                        now: float) -> list[str]:
        return []

    def reserve(self, entry: PodEntry, holding: Iterable[PodEntry], gpus_of_node: Mapping[str, int],
                models: Mapping[str, str], now: float) -> Reservation | None:
        return None

    def predict(self, uid: str, seconds: float) -> None:
        return None

    def forget(self, uid: str) -> None:
        return None

    def runtime(self, uid: str) -> float:
        return self.default_s


@dataclass(slots=True)
class FairShareOrder:
    """The ``fair-share`` order and its reclaim rule (see the module docstring)."""

    name: ClassVar[str] = "fair-share"
    tenant_aware: ClassVar[bool] = True

    capacity: Callable[[], float]
    """GPUs in the cluster now"""
    starved_below: float = 1.0
    default_s: float = 3600.0
    min_runtime_s: float = 600.0
    predicted: dict[str, float] = field(default_factory=dict)
    turn_due: float = 0.0
    """turn-taking (``gpuaware.quota.turns``; 0: off): a tenant below its share and owed this fraction of
    it lately is starved, and may also take pods of tenants at or above their shares not owed a turn"""
    turn_lease_s: float = 900.0
    """turn-taking: a pod runs at least this long (world seconds since its bind) before a turn takes it"""
    owed: OwedService | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.turn_due > 0:
            self.owed = OwedService(due=self.turn_due)

    def demand(self, entries: Iterable[PodEntry]) -> TenantDemand:
        return TenantDemand.of(entries, self.capacity())

    def observe(self, demand: TenantDemand, now: float) -> None:
        """Fold the tenants' running GPUs against their shares into their owed service (turn-taking)."""
        if self.owed is not None:
            self.owed.update(now, demand.running, demand.share)

    def due_turn(self, tenant: str, demand: TenantDemand) -> bool:
        return self.owed is not None and self.owed.is_due(tenant, demand.running.get(tenant, 0.0),
                                                           demand.share.get(tenant, 0.0))

    def starved(self, tenant: str, demand: TenantDemand) -> bool:
        """Below ``starved_below`` of its share; a capped tenant only below ``CAPPED_STARVED`` of that (it
        shares the remainder with the other capped tenants, and they would otherwise take turns reclaiming).
        With turn-taking, also a tenant due a turn."""
        limit = self.starved_below * (CAPPED_STARVED if demand.capped(tenant) else 1.0)
        return demand.attained(tenant) < limit or self.due_turn(tenant, demand)

    def predict(self, uid: str, seconds: float) -> None:
        self.predicted[uid] = seconds

    def forget(self, uid: str) -> None:
        self.predicted.pop(uid, None)

    def runtime(self, uid: str) -> float:
        return self.predicted.get(uid, self.default_s)

    def sort(self, waiting: Sequence[PodEntry], demand: TenantDemand) -> list[PodEntry]:
        def key(e: PodEntry) -> tuple[float, int, float, int]:
            prio = -_priority(e)
            t = queue_of(e)
            if self.starved(t, demand):
                return (prio, 0, demand.attained(t), e.seq)
            return (prio, 1, self.predicted.get(e.uid, self.default_s), e.seq)
        return sorted(waiting, key=key)

    def reserve(self, entry: PodEntry, holding: Iterable[PodEntry], gpus_of_node: Mapping[str, int],
                models: Mapping[str, str], now: float) -> Reservation | None:
        """The node ``entry`` fits on soonest and when (see the module docstring); None when none ever."""
        req = entry.request
        if req is None or req.num_gpu == 0:
            return None
        need = req.num_gpu
        running: dict[str, list[Running]] = {}
        used: dict[str, int] = {}
        for e in holding:
            if not e.node or e.request is None or e.request.num_gpu == 0:
                continue
            n = e.request.num_gpu
            used[e.node] = used.get(e.node, 0) + n
            # a decided pod's `since` is this service's clock, not the world's: count it as starting now
            start = now if e.phase == Phase.DECIDED else min(e.since, now)
            end = start + self.predicted.get(e.uid, self.default_s)
            if end <= now:
                end = now + (now - start)  # overdue: as long again as it has run
            running.setdefault(e.node, []).append(Running(n, end))
        best: tuple[float, int, str] | None = None
        for node, total in gpus_of_node.items():
            if total < need or (req.gpu_types and models.get(node) not in req.gpu_types):
                continue
            t, extra = shadow(max(0, total - used.get(node, 0)), running.get(node, []), need, now)
            if best is None or (t, extra, node) < best:
                best = (t, extra, node)
        if best is None or best[0] == float("inf"):
            return None
        return Reservation(entry.uid, best[2], best[0], now)

    def reclaim_victims(self, entry: PodEntry, holding: Iterable[PodEntry], demand: TenantDemand,
                        now: float) -> list[str]:
        """Running pods ``entry`` may evict: none unless its tenant is starved; else checkpointable pods
        of capped tenants holding more than their share (each one: its tenant keeps its share without
        it), of no higher priority, running at least ``min_runtime_s`` -- most over-served tenant first,
        newest pod first. A tenant due a turn may also take pods of any priority of tenants at or above
        their share not owed a turn, past ``turn_lease_s`` (lower priority first). The session evicts
        the fewest of them on one node (`Session.reclaim`)."""
        tenant = queue_of(entry)
        if entry.request is None or not self.starved(tenant, demand):
            return []
        prio = entry.request.priority
        holding = list(holding)
        spare = spares(holding)  # elastic jobs' workers beyond their minimum: shrunk, not stopped
        movable = [e for e in holding
                   if e.request is not None and queue_of(e) != tenant and not e.evicting and e.request.checkpointable
                   and (e.uid in spare or (not (e.request.gang_id and e.request.gang_min_members > 1)
                                           and now - e.since >= self.min_runtime_s))]
        evictable = [e for e in movable if _priority(e) <= prio]
        candidates = sorted((e for e in evictable if demand.capped(queue_of(e))),
                            key=lambda e: (-demand.attained(queue_of(e)), -e.since))
        fair = [e.uid for e in candidates
                if demand.running.get(queue_of(e), 0.0) - gpus_of(e) >= demand.share.get(queue_of(e), 0.0) - 1e-9]
        if not self.due_turn(tenant, demand):
            return fair
        # a turn: pods of tenants at or above their share not owed a turn, past the lease, even if their
        # tenant dips below its share (it is then owed, and gets its turn back); of any priority, lower
        # first (`gpuaware.quota.turns`: priority orders a tenant's own pods, not the tenants)
        owed = self.owed
        assert owed is not None
        over = {t: owed.owed(t) for t, s in demand.share.items()
                if t != tenant and owed.can_yield(t, demand.running.get(t, 0.0), s)}
        taken = set(fair)
        turn = sorted((e for e in movable if queue_of(e) in over and e.uid not in taken
                       and (e.uid in spare or now - e.since >= self.turn_lease_s)),
                      key=lambda e: (e.uid not in spare, _priority(e), over[queue_of(e)], e.since))
        return fair + [e.uid for e in turn]


@dataclass(frozen=True, slots=True)
class Reservation:
    """A node held for one waiting pod until ``shadow`` (world time): others go there only if they end first."""

    uid: str
    node: str
    shadow: float
    now: float
    """the world's time when it was made"""

    def admits(self, runtime_s: float) -> bool:
        return self.now + runtime_s <= self.shadow

