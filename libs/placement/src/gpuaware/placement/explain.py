"""Why a pod is pending: each node's first failing check, counted per node class.

kube-scheduler answers "0/5000 nodes are available: 4980 Insufficient nvidia.com/gpu, 20 node(s) had
untolerated taint"; we answer the same question per *node class* (GPU model x count, with or without
NVLink), so a 1,213-node cluster explains itself in a few lines: "312 nodes: insufficient_gpu_memory;
40 nodes: no_matching_gpu_type".

Each node counts once, under the first check it fails, in this order:

    static (the node could never hold the pod)      dynamic (it cannot now)
    too_few_gpus          GPUs on the node < asked  insufficient_cpu / insufficient_memory   free < asked
    no_matching_gpu_type  model not allowed         unhealthy_gpus        fits only if quarantined GPUs
    missing_gpu_capability                                                were usable
    insufficient_gpu_memory  model memory < asked   insufficient_gpu      not enough free GPU compute
    insufficient_cpu / insufficient_memory (capacity)  topology_unsatisfiable  free GPUs not on one island
    topology_unsatisfiable (GPUs per island < asked)   rejected_by_policy    another filter of the profile

A pod is *resolvable* when some node passes every static check; its headline `reason` is the most
common static reason when it is not, else the most common dynamic reason among the nodes that could
hold it (the actionable one: "the A100 nodes exist but are full"). The dynamic checks restate the
framework's own filters (ResourcesFit, GpuFit), so a node passing them is feasible unless a custom
filter of the profile says otherwise, which is reported as `rejected_by_policy`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuaware.placement.cluster import DEGRADED, QUARANTINED, Snapshot
from gpuaware.placement.framework import CycleState, Scheduler, usable_gpus
from gpuaware.placement.model import MILLI, PodRequest

TOO_FEW_GPUS = "too_few_gpus"
NO_MATCHING_GPU_TYPE = "no_matching_gpu_type"
MISSING_GPU_CAPABILITY = "missing_gpu_capability"
INSUFFICIENT_GPU_MEMORY = "insufficient_gpu_memory"
INSUFFICIENT_CPU = "insufficient_cpu"
INSUFFICIENT_MEMORY = "insufficient_memory"
TOPOLOGY_UNSATISFIABLE = "topology_unsatisfiable"
UNHEALTHY_GPUS = "unhealthy_gpus"
INSUFFICIENT_GPU = "insufficient_gpu"
REJECTED_BY_POLICY = "rejected_by_policy"

ScoresFn = Callable[[PodRequest, Snapshot], tuple[np.ndarray, np.ndarray]]
"""(feasible node indices, their scores on 0..100) — e.g. `CachedScheduler.scores` normalised."""


@dataclass(frozen=True, slots=True)
class ClassVerdict:
    node_class: str
    nodes: int
    feasible: int
    rejected: dict[str, int]
    best_node: str | None = None
    best_score: float | None = None


@dataclass(frozen=True, slots=True)
class PodExplanation:
    schedulable: bool
    resolvable: bool
    reason: str
    """headline reason code ("" when schedulable)"""
    summary: str
    classes: tuple[ClassVerdict, ...]
    feasible: int
    best_node: str | None = None
    best_score: float | None = None


def node_class_names(snap: Snapshot) -> list[str]:
    """`8xA100/nvlink`, `2xT4`, `cpu-only` per node."""
    out = []
    has_link = np.asarray((snap.nvlink_island >= 0).any(axis=1))
    for i in range(snap.num_nodes):
        k = int(snap.gpu_count[i])
        if k == 0:
            out.append("cpu-only")
            continue
        name = f"{k}x{snap.models[int(snap.model_idx[i])].name}"
        out.append(name + "/nvlink" if has_link[i] else name)
    return out


def _group_max(group: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """Per node, the most `usable` GPUs sharing one group id (island / NUMA node)."""
    best = np.zeros(group.shape[0], dtype=np.int64)
    for gid in np.unique(group[group >= 0]):
        best = np.maximum(best, (usable & (group == gid)).sum(axis=1))
    return best


def node_reasons(pod: PodRequest, snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """(reason code per node, "" = passes; static[N] True where the reason is static)."""
    n = snap.num_nodes
    reason = np.full(n, "", dtype=object)
    static = np.zeros(n, dtype=bool)
    unmarked = np.ones(n, dtype=bool)  # reason == "", kept as bools (comparing objects is slow)

    def mark(mask: np.ndarray, code: str, is_static: bool) -> None:
        fresh = mask & unmarked
        reason[fresh] = code
        unmarked[fresh] = False
        if is_static:
            static[fresh] = True

    if pod.num_gpu > 0:
        mark(snap.gpu_count == 0, TOO_FEW_GPUS, True)
        models = snap.models
        need_mem = max(pod.min_gpu_memory_mib, pod.gpu_memory_mib)
        per_model = []
        for m in models:
            if pod.gpu_types and m.name not in pod.gpu_types:
                per_model.append(NO_MATCHING_GPU_TYPE)
            elif not all(m.has(c) for c in pod.capabilities):
                per_model.append(MISSING_GPU_CAPABILITY)
            elif need_mem and (m.memory_mib is None or m.memory_mib < need_mem):
                per_model.append(INSUFFICIENT_GPU_MEMORY)
            else:
                per_model.append("")
        codes = np.array([*per_model, ""], dtype=object)[snap.model_idx]
        for code in (NO_MATCHING_GPU_TYPE, MISSING_GPU_CAPABILITY, INSUFFICIENT_GPU_MEMORY):
            mark(codes == code, code, True)
        mark(snap.gpu_count < pod.num_gpu, TOO_FEW_GPUS, True)
    mark(snap.cpu_capacity < pod.cpu_milli, INSUFFICIENT_CPU, True)
    mark(snap.mem_capacity < pod.memory_mib, INSUFFICIENT_MEMORY, True)
    grouped = pod.num_gpu > 1 and pod.topology in ("nvlink", "numa") and pod.gpu_milli >= MILLI
    group = None
    if grouped:
        group = snap.nvlink_island if pod.topology == "nvlink" else snap.numa_node
        mark(_group_max(group, snap.gpu_present) < pod.num_gpu, TOPOLOGY_UNSATISFIABLE, True)
    mark(snap.cpu_free < pod.cpu_milli, INSUFFICIENT_CPU, False)
    mark(snap.mem_free < pod.memory_mib, INSUFFICIENT_MEMORY, False)
    if pod.num_gpu > 0:
        free = snap.gpu_free
        healed = np.where(snap.gpu_health == QUARANTINED, MILLI, free)
        if not pod.tolerates_failure:  # degraded GPUs are not this pod's: they count as unhealthy
            free = np.where(snap.gpu_health == DEGRADED, 0, free)
        if pod.is_gpu_share:
            fits = np.asarray((free >= pod.gpu_milli).any(axis=1))
            fits_healed = np.asarray((healed >= pod.gpu_milli).any(axis=1))
        else:
            fits = np.asarray((free >= MILLI).sum(axis=1) >= pod.num_gpu)
            fits_healed = np.asarray((healed >= MILLI).sum(axis=1) >= pod.num_gpu)
        mark(~fits & fits_healed, UNHEALTHY_GPUS, False)
        mark(~fits, INSUFFICIENT_GPU, False)
        usable = usable_gpus(pod, snap)  # compute and GPU memory (held by pods asking more than their share)
        mem_fits = np.asarray(usable.any(axis=1) if pod.is_gpu_share else usable.sum(axis=1) >= pod.num_gpu)
        mark(fits & ~mem_fits, INSUFFICIENT_GPU_MEMORY, False)
        if grouped:
            assert group is not None
            mark(_group_max(group, free >= MILLI) < pod.num_gpu, TOPOLOGY_UNSATISFIABLE, False)
    return reason, static


def _summary(total: int, feasible: int, counts: Counter[str]) -> str:
    parts = ", ".join(f"{c} {r}" for r, c in counts.most_common())
    head = f"{feasible}/{total} nodes available"
    return f"{head}: {parts}" if parts else head


def explain(pod: PodRequest, snap: Snapshot, scheduler: Scheduler | None = None, *,
            scores: ScoresFn | None = None, classes: Sequence[str] | None = None,
            max_classes: int = 50) -> PodExplanation:
    """Explain `pod` against `snap`. `scheduler` adds its other filters (as rejected_by_policy);
    `scores` adds the best node and score per class; `classes` (node class per node) saves
    recomputing them for every pod of a cluster."""
    reason, static = node_reasons(pod, snap)
    if scheduler is not None:
        ok = np.zeros(snap.num_nodes, dtype=bool)
        ok[scheduler.feasible(CycleState(), pod, snap)] = True
        reason[(reason == "") & ~ok] = REJECTED_BY_POLICY
    passing = reason == ""
    names = list(classes) if classes is not None else node_class_names(snap)
    best_node = best_score = None
    best_by_class: dict[str, tuple[str, float]] = {}
    if scores is not None and passing.any():
        nodes, vals = scores(pod, snap)
        order = np.argsort(-vals, kind="stable")
        for j in order:
            i = int(nodes[j])
            cls = names[i]
            if cls not in best_by_class:
                best_by_class[cls] = (snap.node_names[i], float(vals[j]))
        if nodes.size:
            j = int(order[0])
            best_node, best_score = snap.node_names[int(nodes[j])], float(vals[j])
    # counted in C, in node order (so ties keep the order of first appearance, as most_common does)
    sizes: Counter[str] = Counter(names)
    per_class: dict[str, Counter[str]] = {}
    for (cls, why), count in Counter(zip(names, reason.tolist(), strict=True)).items():
        counts = per_class.get(cls)
        if counts is None:
            counts = per_class[cls] = Counter()
        counts[why] = count
    verdicts = []
    for cls, size in sizes.most_common(max_classes):
        counts = per_class[cls]
        feasible = counts.pop("", 0)
        best = best_by_class.get(cls)
        verdicts.append(ClassVerdict(cls, size, feasible, dict(counts.most_common()),
                                     best[0] if best else None, best[1] if best else None))
    feasible = int(passing.sum())
    all_counts = Counter(reason[~passing].tolist())
    resolvable = bool((~static).any())
    if feasible:
        headline = ""
    elif not resolvable:
        headline = Counter(reason[static]).most_common(1)[0][0]
    else:
        headline = Counter(reason[~static]).most_common(1)[0][0]
    return PodExplanation(feasible > 0, resolvable, headline, _summary(snap.num_nodes, feasible, all_counts),
                          tuple(verdicts), feasible, best_node, best_score)
