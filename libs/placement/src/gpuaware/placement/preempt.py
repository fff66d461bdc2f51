"""Preemption planning: which running pods to evict so that a more important pending pod fits.

Why here and not in the binder: choosing victims is a placement decision over the same snapshot
and the same filters as any other; the binder only *executes* the plan (checkpoint handshake, then
eviction, then the bind). The plan travels inside the decision (`PlacementDecided.preemptions`).

The rules follow kube-scheduler's DefaultPreemption, with one addition for GPU work:

1. Only pods of strictly lower priority may be evicted, and never members of a gang (evicting one
   member would strand the others) or pods already being evicted by another plan. A *spare* -- a
   worker of an elastic job beyond its minimum (elastic.py) -- may be evicted by any pod of at least
   its priority: evicting it shrinks the job, which keeps running.
2. A node is a candidate when the pod passes every filter of the profile with *all* its possible
   victims gone (a what-if snapshot; nothing in the cluster changes).
3. On each candidate, victims are *reprieved* one by one, most important first (then the ones with
   the most work to lose first): a victim stays when the pod still fits with it added back. What
   remains is a minimal set on that node (no victim can be dropped from it).
4. Among candidates the plan with the lowest cost wins, compared in this order: whether it stops a
   job (a victim that is not a spare: a plan that only shrinks comes first), then the highest victim
   priority, then **work lost** (GPU-seconds of progress of victims that cannot checkpoint; a
   checkpointable victim resumes where it stopped and loses nothing), then the workers its shrinks
   restart at a new world size (spares of the narrowest jobs first), then the sum of victim
   priorities, then the number of victims, then the node index (deterministic).
5. The pod's GPUs on the chosen node are picked among those the plan frees or finds free, GPU memory
   included (a victim gives back the memory it holds, so a plan for a sharing pod that needs memory
   evicts enough to free it): a sharing pod takes the tightest GPU that fits, a whole-GPU pod the first free ones (inside one NVLink
   island / NUMA node when it asks for that topology).

Costs: one vectorised what-if filter over the nodes that hold possible victims, then a reprieve
loop per candidate (at most `max_candidates`), each step a one-row filter call. Planning runs only
for pods that found no node, so it is off the hot path of ordinary decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuaware.placement.cluster import QUARANTINED, Snapshot
from gpuaware.placement.elastic import holding_by_gang, spares_of
from gpuaware.placement.framework import CycleState, Scheduler, rows_view, usable_gpus
from gpuaware.placement.ledger import Ledger, Phase
from gpuaware.placement.model import MILLI, PodRequest

__all__ = ["PreemptionPlan", "Victim", "plan_preemption"]


@dataclass(frozen=True, slots=True)
class Victim:
    """A running pod that a plan may evict, with what it holds on its node."""

    uid: str
    node: int
    gpus: tuple[int, ...]
    gpu_milli: int
    """per GPU, as reserved"""
    cpu_milli: int
    memory_mib: int
    priority: int
    checkpointable: bool = False
    running_s: float = 0.0
    """how long it has been running (the progress lost if it cannot checkpoint)"""
    gang: bool = False
    gpu_mem: int = 0
    """GPU memory it holds on each of its GPUs, MiB (`Allocation.gpu_mem`)"""
    spare: bool = False
    """a worker of an elastic job beyond its minimum: evicting it shrinks the job instead of stopping it"""
    restarts: int = 0
    """a spare: the workers of its job that restart at the new world size when it leaves (its job's width)"""

    @property
    def lost_gpu_s(self) -> float:
        """GPU-seconds of progress an eviction throws away (0 when the pod can checkpoint)."""
        if self.checkpointable:
            return 0.0
        return self.running_s * len(self.gpus) * self.gpu_milli / MILLI


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    pod: str
    node: int
    node_name: str
    gpus: tuple[int, ...]
    victims: tuple[Victim, ...]
    candidates: int
    """how many nodes could have held the pod with their victims gone"""

    @property
    def cost(self) -> tuple[int, int, float, int, int, int]:
        return _cost(self.victims)

    @property
    def shrinks_only(self) -> bool:
        """Every victim is a spare: the plan stops no job."""
        return all(v.spare for v in self.victims)


def _cost(victims: Sequence[Victim]) -> tuple[int, int, float, int, int, int]:
    return (int(any(not v.spare for v in victims)), max(v.priority for v in victims),
            round(sum(v.lost_gpu_s for v in victims), 3), sum(v.restarts for v in victims),
            sum(v.priority for v in victims), len(victims))


def _give_back(snap: Snapshot, rows: np.ndarray, victims: Iterable[Victim], pos: dict[int, int]) -> Snapshot:
    """`snap` restricted to `rows` with the victims' resources added back, GPU memory included
    (quarantined GPUs stay 0)."""
    view = rows_view(snap, rows)
    cpu = view.cpu_free.copy()
    mem = view.mem_free.copy()
    gpu = view.gpu_free.copy()
    gmem = view.gpu_mem_free.copy()
    for v in victims:
        r = pos[v.node]
        cpu[r] += v.cpu_milli
        mem[r] += v.memory_mib
        for g in v.gpus:
            if view.gpu_health[r, g] != QUARANTINED:
                gpu[r, g] += v.gpu_milli
            gmem[r, g] += v.gpu_mem
    return replace(view, cpu_free=cpu, mem_free=mem, gpu_free=gpu, gpu_mem_free=gmem)


def _fits(scheduler: Scheduler, pod: PodRequest, snap: Snapshot, node: int, victims: Sequence[Victim]) -> bool:
    rows = np.array([node])
    whatif = _give_back(snap, rows, victims, {node: 0})
    return scheduler.feasible(CycleState(), pod, whatif).size == 1


def _pick_gpus(pod: PodRequest, freed: Snapshot) -> tuple[int, ...]:
    """GPUs for the pod on the one-row what-if view `freed` (its victims gone): usable ones only."""
    if pod.num_gpu == 0:
        return ()
    ok = usable_gpus(pod, freed)[0]
    free_row = freed.gpu_free[0]
    if pod.is_gpu_share:
        fits = np.where(ok, free_row, np.iinfo(np.int64).max)
        return (int(np.argmin(fits)),)
    if pod.topology and pod.num_gpu > 1:
        group = freed.nvlink_island[0] if pod.topology == "nvlink" else freed.numa_node[0]
        for gid in np.unique(group[group >= 0]):
            idx = np.flatnonzero(ok & (group == gid))
            if idx.size >= pod.num_gpu:
                return tuple(int(i) for i in idx[: pod.num_gpu])
    return tuple(int(i) for i in np.flatnonzero(ok)[: pod.num_gpu])


def plan_preemption(pod: PodRequest, snap: Snapshot, scheduler: Scheduler, running: Iterable[Victim], *,
                    max_victims: int = 16, max_candidates: int = 64,
                    exclude: np.ndarray | None = None,
                    eligible: Callable[[Victim], bool] | None = None) -> PreemptionPlan | None:
    """The cheapest eviction plan that lets `pod` pass `scheduler`'s filters, or None.

    `running` are the pods placement sees holding resources (any priority; the rules above pick).
    `exclude` (bool over nodes) keeps nodes out of the plan, as for ordinary decisions. `eligible`
    replaces rule 1 (who may be evicted at all): quota's reclaim passes the pods it named, whatever
    their priority, and still never a gang member (a spare is not one: evicting it shrinks its job)."""
    if eligible is None:
        def eligible(v: Victim) -> bool:
            return (v.priority < pod.priority and not v.gang) or (v.spare and v.priority <= pod.priority)
    by_node: dict[int, list[Victim]] = {}
    for v in running:
        if eligible(v):
            by_node.setdefault(v.node, []).append(v)
    if exclude is not None:
        by_node = {n: vs for n, vs in by_node.items() if not exclude[n]}
    if not by_node:
        return None
    rows = np.array(sorted(by_node), dtype=np.int64)
    pos = {int(n): i for i, n in enumerate(rows)}
    everything_gone = _give_back(snap, rows, (v for vs in by_node.values() for v in vs), pos)
    ok = scheduler.feasible(CycleState(), pod, everything_gone)
    if ok.size == 0:
        return None
    candidates = [int(rows[i]) for i in ok]
    # the nodes whose victims matter least first, so the candidate cap drops the worst ones
    candidates.sort(key=lambda n: (max(v.priority for v in by_node[n]), n))
    best: tuple[tuple[int, int, float, int, int, int, int], int, list[Victim]] | None = None
    for node in candidates[:max_candidates]:
        # reprieve whole jobs before spares, then the most important (then the most work to lose) first
        order = sorted(by_node[node], key=lambda v: (v.spare, -v.priority, -v.lost_gpu_s, -v.restarts, v.uid))
        evict = list(order)
        for v in order:
            trial = [x for x in evict if x is not v]
            if _fits(scheduler, pod, snap, node, trial):
                evict = trial
        if not evict or len(evict) > max_victims:
            continue  # no victim needed means the pod fits (not our case); too many is not worth it
        key = (*_cost(evict), node)
        if best is None or key < best[0]:
            best = (key, node, evict)
    if best is None:
        return None
    _, node, evict = best
    freed = _give_back(snap, np.array([node]), evict, {node: 0})
    gpus = _pick_gpus(pod, freed)
    evict.sort(key=lambda v: v.uid)
    return PreemptionPlan(pod.name, node, snap.node_names[node], gpus, tuple(evict), len(candidates))


def running_victims(ledger: Ledger, now: float, *, min_run_s: float = 0.0, max_requeues: int | None = None,
                    stops: Mapping[str, int] | None = None) -> list[Victim]:
    """The ledger's bound pods that still hold GPUs in its cluster, as a plan may evict them (a pod
    already evicting, or evicted by a statement still open, is none).

    Two protections for the jobs a preemption stops, neither for spares (a shrink stops nothing): a pod
    bound less than `min_run_s` ago is none (a lease: it runs a while before anyone takes it back), and
    one already re-queued `max_requeues` times is none (a cap on how often one job is stopped; the
    pod's attempt counts its re-queues, and for an elastic job's worker `stops` counts its job's, whose
    workers come back in any order; a controller's replacement pod brings its job's count along,
    `PodRequest.job_preemptions`)."""
    allocations = ledger.cluster.allocations if ledger.cluster is not None else {}
    holding = holding_by_gang(ledger)  # one walk for both: which workers are spares, and their jobs' widths
    spare = spares_of(holding)
    width = {g: len(m) for g, m in holding.items()}
    out = []
    for e in ledger:
        if e.phase != Phase.BOUND or e.evicting or e.request is None:
            continue
        a = allocations.get(e.uid)
        if a is None:
            continue
        is_spare = e.uid in spare
        requeued = max((stops or {}).get(e.request.gang_id, 0) if e.request.elastic else e.attempt,
                       e.request.job_preemptions)
        if not is_spare and (now - e.since < min_run_s or (max_requeues is not None and requeued >= max_requeues)):
            continue
        out.append(Victim(e.uid, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, e.request.priority,
                          e.request.checkpointable, max(1.0, now - e.since),
                          bool(e.request.gang_id) and e.request.gang_min_members > 1 and not is_spare,
                          gpu_mem=a.gpu_mem, spare=is_spare,
                          restarts=width.get(e.request.gang_id, 0) if is_spare else 0))
    return out
