"""Backfill: hold a node for a starved tenant's wide pod; let only pods that end in time use it.

EASY backfilling, per node (as quota's backfill and Slurm do it): a pod wider than one GPU waits for
GPUs to free on one node at once, which never happens while one-GPU pods keep taking each freed GPU.
So each starved tenant's first waiting wide pod may get a *reservation* -- the node where it fits
soonest by the predicted ends of the pods running there (`FairShareOrder.reserve`) -- and a pod of
anyone else is placed there only if its predicted runtime ends before that time. A one-GPU pod gets
no reservation: it is first in line for the next GPU freed anywhere.

The planner's ``max_reservations`` bounds how many nodes are held at once (none by default: a held
node costs allocation, and the fair-share order alone kept tenants fair on the traces tried).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuaware.placement.ledger import HOLDING, RETRIED, Ledger, PodEntry
from gpuaware.placement.model import NodeSpec
from gpuaware.placement.queue_order import QueueSort, Reservation, queue_of

__all__ = ["Backfill"]

MOVE_FOR = 1.25
"""a held node moves to another only if that one frees more than this much sooner (as a ratio of
the wait): moving the hold every pass would let the backfill fill each node in turn"""


class Backfill:
    """The nodes held now, by the uid of the pod each is held for."""

    def __init__(self) -> None:
        self.held: dict[str, Reservation] = {}

    def renew(self, order: QueueSort, ledger: Ledger, specs: Mapping[str, NodeSpec],
              starved: Sequence[PodEntry], clock: Callable[[], float], limit: int) -> int:
        """Hold a node for each starved tenant's first waiting pod wider than one GPU, at most `limit`,
        on distinct nodes. A pod that held a node keeps it unless another frees more than `MOVE_FOR`
        sooner. `clock` is the world's. Returns how many pods got a node they did not hold before."""
        held, self.held = self.held, {}
        if limit <= 0:
            return 0
        heads: dict[str, PodEntry] = {}
        for e in starved:
            if e.phase in RETRIED and e.request is not None and e.request.num_gpu > 1:
                heads.setdefault(queue_of(e), e)
        if not heads:
            return 0
        holding = [e for e in ledger if e.phase in HOLDING and not e.evicting]
        now = clock()
        gpus = {n: s.num_gpu for n, s in specs.items()}
        models = {n: s.gpu_model for n, s in specs.items()}
        new = 0
        for head in list(heads.values())[:limit]:
            taken = {r.node for r in self.held.values()}
            free = {n: g for n, g in gpus.items() if n not in taken}
            before = held.get(head.uid)
            r = order.reserve(head, holding, free, models, now)
            if r is not None and before is not None and before.node in free and before.node != r.node:
                kept = order.reserve(head, holding, {before.node: free[before.node]}, models, now)
                if kept is not None and kept.shadow - now <= MOVE_FOR * (r.shadow - now):
                    r = kept
            if r is not None:
                self.held[head.uid] = r
                new += before is None
        return new

    def excluded(self, pod: str, order: QueueSort | None, ledger: Ledger) -> set[str]:
        """The held nodes `pod` may not use: held for another pod, which `pod` would outlast there.
        Holds whose pod was placed or left are dropped."""
        out: set[str] = set()
        for r in list(self.held.values()):
            if r.uid == pod or order is None:
                continue
            waiting = ledger.pods.get(r.uid)
            if waiting is None or waiting.phase not in RETRIED:
                del self.held[r.uid]
            elif not r.admits(order.runtime(pod)):
                out.add(r.node)
        return out
