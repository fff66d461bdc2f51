"""Turn-taking: a queue kept below its fair share for a while gets a turn, at the expense of queues
served beyond theirs.

Why: ordering and fair reclaim cannot serve a queue whose waiting jobs are all wider than its share.
Fair reclaim (``reclaim.fair_reclaim_plan``) only takes GPUs while the victim's queue stays at
least as well served as the asker will be, and a job wider than its share never meets that, so such a
queue would wait for a whole cluster to drain. Over time it can still get its share *on average*: its
job runs for a while, then yields. This is time-slicing as Gandiva and Themis do it, at checkpoint
granularity.

* Each queue's *owed service* (``OwedService``) is the decayed mean of (entitlement - held). It is
  ``DecayedUsage``'s exact integral (half-life 1 h by default, as the usage history's). It is
  positive while the queue gets less than its share lately, and negative while it gets more.
* A queue is *due* a turn when it holds less than its share now and its owed service has reached
  ``due`` times its share.
* A turn takes pods of queues that hold at least their share now and are not owed a turn: a queue
  exactly at its share yields too, or a tenant whose one long job fills its share would block a
  node for good. It takes pods of any priority, lower priority first: priority orders a queue's own
  pods, fair share orders the queues, as in KAI Scheduler's reclaim; otherwise a queue that marks its
  jobs high would never yield. It only takes pods that can checkpoint and have run for at least
  ``lease_s`` since they last started, and that reclaim's protections leave takeable (their queue's
  lease, the cap on preemptions per pod: ``reclaim.may_take``); then the most over-served queue
  first, and within a queue the least preempted, then the longest-running pod first. The binder
  checkpoints a victim before it stops it, so a turn costs the victim a restart, not its work.

``TurnTaking`` plans turns over a quota ledger; placement's fair-share order keeps its own
``OwedService`` over the pods it places (``gpuaware.placement.queue_order``). ``make bench-fairness``
compares it with the other policies (bench/results/fairness.md). Pure: ledger, shares and times in,
victims out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpuaware.quota.demand import GPU_MILLI, Allocation, Demand
from gpuaware.quota.fairshare import DecayedUsage
from gpuaware.quota.ledger import QuotaLedger
from gpuaware.quota.reclaim import may_take
from gpuaware.quota.tree import ANY_TYPE, RESOURCES

__all__ = ["OwedService", "TurnTaking"]


@dataclass(slots=True)
class OwedService:
    """Each queue's decayed mean of (share - held), in the units given (see the module docstring)."""

    half_life_s: float = 3600.0
    due: float = 0.1
    """a queue owed this fraction of its share (decayed mean shortfall / share) is due a turn"""
    _owed: DecayedUsage = field(init=False, repr=False)
    _shortfall: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.due <= 0:
            raise ValueError(f"due must be > 0, got {self.due}")
        self._owed = DecayedUsage(self.half_life_s, 1)

    def update(self, now: float, held: Mapping[str, float], shares: Mapping[str, float]) -> None:
        """Integrate the shortfall seen at the last update up to ``now``, then remember this one. Call
        it after every change (or before every decision)."""
        self._owed.advance(now, self._shortfall)
        self._shortfall = {q: np.array([shares.get(q, 0.0) - held.get(q, 0.0)]) for q in {*shares, *self._shortfall}}

    def owed(self, queue: str) -> float:
        """> 0 while the queue got less than its share lately, < 0 while it got more."""
        return float(self._owed.mean_recent(queue)[0])

    def is_due(self, queue: str, held: float, share: float) -> bool:
        """Below its share now, and owed at least ``due`` of it."""
        return share > 0 and held < share - 1e-9 and self.owed(queue) >= self.due * share

    def can_yield(self, queue: str, held: float, share: float) -> bool:
        """Not below its share now, and not owed a turn lately: a turn may take its pods."""
        return held >= share - 1e-9 and self.owed(queue) < self.due * share


@dataclass(slots=True)
class TurnTaking:
    """Owed service per leaf queue of a quota ledger, and the turns it earns. GPU milli throughout."""

    half_life_s: float = 3600.0
    due: float = 0.1
    """a queue owed this fraction of its share (decayed mean shortfall / share) is due a turn"""
    lease_s: float = 900.0
    """a pod runs at least this long after it (re)started before a turn takes it"""
    service: OwedService = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.lease_s < 0:
            raise ValueError(f"lease_s must be >= 0, got {self.lease_s}")
        self.service = OwedService(self.half_life_s, self.due)

    def update(self, ledger: QuotaLedger, asked: Mapping[str, float], now: float) -> dict[str, float]:
        """``OwedService.update`` with the ledger's holdings and the water-filled shares of ``asked``
        (GPU milli each leaf queue runs and waits for), which it returns."""
        shares = ledger.fair_shares({q: a for q, a in asked.items() if a > 0}, now)
        self.service.update(now, {q: _held(ledger, q) for q in {*shares, *asked}}, shares)
        return shares

    def owed(self, queue: str) -> float:
        return self.service.owed(queue)

    def due_queues(self, ledger: QuotaLedger, shares: Mapping[str, float]) -> list[str]:
        """Queues due a turn, most owed (relative to their share) first."""
        due = [(self.owed(q) / s, q) for q, s in shares.items() if self.service.is_due(q, _held(ledger, q), s)]
        return [q for _, q in sorted(due, key=lambda x: (-x[0], x[1]))]

    def plan(self, ledger: QuotaLedger, queue: str, d: Demand, shares: Mapping[str, float],
             now: float) -> list[Allocation] | None:
        """Pods to stop so that ``d`` of ``queue`` fits now, or None when no turn frees enough room."""
        if not self.service.is_due(queue, _held(ledger, queue), shares.get(queue, 0.0)):
            return None
        over = {q: self.owed(q) for q, s in shares.items()
                if q != queue and self.service.can_yield(q, _held(ledger, q), s)}
        cands = [a for a in ledger.running.values()
                 if a.queue in over and a.checkpointable
                 and now - a.started_at >= self.lease_s and may_take(ledger.tree, a, now)
                 and (d.gpu_type == ANY_TYPE or a.demand.gpu_type == d.gpu_type)]
        cands.sort(key=lambda a: (a.priority, over[a.queue], a.preemptions, a.started_at, a.uid))
        victims: list[Allocation] = []
        freed = np.zeros(len(RESOURCES), dtype=np.int64)
        for a in cands:
            if ledger.room(d, freed):
                break
            victims.append(a)
            freed += a.demand.vector
        return victims if victims and ledger.room(d, freed) else None


def _held(ledger: QuotaLedger, queue: str) -> float:
    return float(ledger.used(queue)[GPU_MILLI])
