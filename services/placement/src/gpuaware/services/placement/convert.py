"""Wire <-> engine: schemas' messages to `gpuaware.placement`'s vocabulary and back.

The engine speaks node names, GPU *slots* (0..n-1 in NVML index order), milli-GPUs and GPU model
names; the contract speaks GPU uuids and indexes, aliases ("A100-80GB") and MIG profiles. The
choices made here:

- A node's GPU model is the model most of its GPUs have (nodes are homogeneous in practice);
  the model's memory and capabilities come from the inventory itself, not from a table.
- CPU or memory a node does not report (0) is not tracked: treated as unlimited rather than as none.
- A GPU type a pod asks for matches a model by name or as an alias whose words all appear in the
  model's name ("A100-80GB" matches "NVIDIA A100-SXM4-80GB"); a minimum compute capability narrows
  the allowed models the same way. A type that matches nothing stays as asked, so the pod is
  explained as `no_matching_gpu_type`.
- A MIG profile `<g>g.<m>gb` is decided as a `<g>/7` fraction of one MIG-capable GPU with `<m>` GiB
  (the node enforces the real instance; the decision names the profile).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from gpuaware.placement import (
    MILLI,
    Decided,
    GpuModel,
    NodeSpec,
    PodEntry,
    PodExplanation,
    PodRequest,
    RequestError,
    TypicalPods,
)
from gpuaware.schemas import (
    Explanation,
    GpuInfo,
    GpuSlice,
    MigMode,
    NodeClassVerdict,
    NodeInventory,
    PlacementDecided,
    PlannedPreemption,
    PodPending,
    PodUnschedulable,
    TopologyPreference,
    WorldNode,
    find_gpu_model,
)

UNTRACKED = 1 << 40
"""capacity used for CPU/memory a node does not report"""

_TOPOLOGY = {TopologyPreference.SAME_NVLINK_ISLAND: "nvlink", TopologyPreference.SAME_NUMA: "numa"}
_MIG = re.compile(r"^(\d+)g\.(\d+)gb$")
_NOISE = {"", "nvidia", "tesla", "geforce"}


def words(name: str) -> frozenset[str]:
    return frozenset(re.split(r"[^a-z0-9]+", name.lower())) - _NOISE


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major or 0), int(minor or 0)


# -- inventory ----------------------------------------------------------------------------------


def node_of(inv: NodeInventory) -> tuple[NodeSpec, tuple[GpuInfo, ...], GpuModel | None, tuple[int, int]]:
    """(node spec, GPUs by slot, its GPU model, the model's compute capability)."""
    gpus = tuple(sorted(inv.gpus, key=lambda g: g.index))
    if not gpus:
        spec = NodeSpec(inv.node, inv.cpu_milli or UNTRACKED, inv.memory_mib or UNTRACKED,
                        labels=tuple(sorted(inv.labels.items())), rack=inv.rack or "", zone=inv.zone or "")
        return spec, (), None, (0, 0)
    name = Counter(g.model for g in gpus).most_common(1)[0][0]
    same = [g for g in gpus if g.model == name]
    model = GpuModel(name, memory_mib=min(g.memory_mib for g in same) or None,
                     tensor_cores=all(g.tensor_cores for g in same), fp8=all(g.fp8 for g in same),
                     nvlink=all(g.nvlink_links > 0 for g in same),
                     mig=all(g.mig_mode != MigMode.UNSUPPORTED for g in same))
    islands: tuple[int, ...] = ()
    if any(g.nvlink_island for g in gpus):
        ids: dict[str, int] = {}
        islands = tuple(ids.setdefault(g.nvlink_island, len(ids)) if g.nvlink_island else -1 for g in gpus)
    numa: tuple[int, ...] = ()
    if any(g.numa_node is not None for g in gpus):
        numa = tuple(-1 if g.numa_node is None else g.numa_node for g in gpus)
    spec = NodeSpec(inv.node, inv.cpu_milli or UNTRACKED, inv.memory_mib or UNTRACKED, len(gpus), name,
                    labels=tuple(sorted(inv.labels.items())), rack=inv.rack or "", zone=inv.zone or "",
                    nvlink_islands=islands, numa_nodes=numa)
    return spec, gpus, model, min(_cc(g.compute_capability) for g in same)


def node_of_world(n: WorldNode) -> tuple[NodeSpec, tuple[GpuInfo, ...], GpuModel | None, tuple[int, int]]:
    """The same, from the world's snapshot (the twin or Kubernetes). A model the GPU catalog knows (by
    short name, alias or NVML name) takes its capabilities and compute capability from the catalog and
    keeps the world's name and, when reported, memory."""
    inv = NodeInventory(
        source="world", emitted_at=0.0, node=n.name, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib,
        rack=n.rack, zone=n.zone, labels=dict(n.labels),
        gpus=tuple(GpuInfo(uuid=g.uuid, index=g.index, model=g.model or n.gpu_model, memory_mib=g.memory_mib,
                           pci_bus_id="world", nvlink_island=g.nvlink_island, numa_node=g.numa_node)
                   for g in n.gpus))
    spec, gpus, model, cc = node_of(inv)
    if model is not None:
        known = find_gpu_model(model.name)  # short name, alias or NVML name
        if known is not None:  # the catalog's record under the world's name; memory as the world reports it
            model = replace(known, name=model.name, memory_mib=model.memory_mib or known.memory_mib)
            if known.compute_capability:
                cc = _cc(known.compute_capability)
    return spec, gpus, model, cc


# -- pods ---------------------------------------------------------------------------------------


def resolve_types(asked: Iterable[str], models: Iterable[str]) -> tuple[str, ...]:
    """The model names matching the asked types or aliases (empty when nothing was asked)."""
    asked = tuple(asked)
    if not asked:
        return ()
    models = tuple(models)
    out: dict[str, None] = {}
    for t in asked:
        tw = words(t)
        for m in models:
            if t == m or (tw and tw <= words(m)):
                out[m] = None
    return tuple(out) or asked


def pod_request(p: PodPending, models: Mapping[str, GpuModel] | None = None,
                capability: Mapping[str, tuple[int, int]] | None = None) -> PodRequest:
    """The engine's request for a pending pod (named by its uid). Raises RequestError."""
    num = p.num_gpu
    milli = 0 if num == 0 else (p.gpu_milli if num == 1 else MILLI)
    gpu_mem = p.gpu_memory_mib
    caps: set[str] = set()
    if p.capabilities.tensor_cores:
        caps.add("tensor_cores")
    if p.capabilities.fp8:
        caps.add("fp8")
    if p.capabilities.nvlink:
        caps.add("nvlink")
    if p.mig_profile is not None:
        m = _MIG.match(p.mig_profile)
        if m is None:
            raise RequestError(f"pod {p.pod_uid}: MIG profile {p.mig_profile!r} is not <g>g.<m>gb")
        caps.add("mig")
        milli = max(1, min(MILLI, round(MILLI * int(m.group(1)) / 7)))
        gpu_mem = max(gpu_mem, int(m.group(2)) * 1024)
    names = tuple(models or ())
    types = resolve_types(p.gpu_types, names)
    if p.capabilities.min_compute_capability and capability is not None:
        need = _cc(p.capabilities.min_compute_capability)
        pool = types or names
        types = tuple(t for t in pool if capability.get(t, (0, 0)) >= need) or ("<no model with compute capability "
                                                                                f"{p.capabilities.min_compute_capability}>",)
    return PodRequest(
        name=p.pod_uid, cpu_milli=p.cpu_milli, memory_mib=p.memory_mib, num_gpu=num, gpu_milli=milli,
        gpu_memory_mib=gpu_mem, gpu_types=types, capabilities=frozenset(caps),
        min_gpu_memory_mib=p.capabilities.min_memory_mib, qos=p.qos.value, priority=p.priority, queue=p.queue,
        gang_id=p.gang_id or "", gang_min_members=p.gang_min_members if p.gang_id else 0,
        gang_max_members=p.gang_max_members if p.gang_id else 0,
        topology=_TOPOLOGY.get(p.topology, ""), checkpointable=p.checkpointable,
        job_preemptions=p.job_preemptions, priority_class=p.priority_class, deferrable=p.deferrable)


def slices(pod: PodRequest, gpus: tuple[GpuInfo, ...], slots: Iterable[int], mig_profile: str | None) -> tuple[GpuSlice, ...]:
    out = []
    for s in slots:
        info = gpus[s]
        mem = pod.gpu_memory_mib or info.memory_mib * pod.gpu_milli // MILLI
        out.append(GpuSlice(gpu_uuid=info.uuid, gpu_index=info.index, gpu_milli=pod.gpu_milli,
                            memory_mib=min(mem, info.memory_mib), mig_profile=mig_profile))
    return tuple(out)


def observed_request(uid: str, cpu_milli: int, memory_mib: int, gpu_slices: Iterable[GpuSlice], *,
                     priority: int = 0, gang_id: str | None = None, checkpointable: bool = False) -> PodRequest:
    """What a pod holds, rebuilt from a decision or a binding (when the request itself is unknown)."""
    sl = tuple(gpu_slices)
    milli = max((s.gpu_milli for s in sl), default=0)
    if len(sl) > 1:
        milli = MILLI
    return PodRequest(uid, cpu_milli, memory_mib, len(sl), milli if sl else 0, priority=priority,
                      gang_id=gang_id or "", checkpointable=checkpointable)


# -- the planner's outcomes as messages ---------------------------------------------------------


def planned_preemptions(victims: Iterable[PodEntry], reason: str, grace_s: float) -> tuple[PlannedPreemption, ...]:
    """Ledger entries to evict, as the binder executes them (checkpoint first when the pod can)."""
    return tuple(PlannedPreemption(
        pod_uid=v.uid, pod_name=getattr(v.payload, "pod_name", v.uid),
        namespace=getattr(v.payload, "namespace", "default"), node=v.node, reason=reason,
        checkpoint_first=bool(v.request and v.request.checkpointable), grace_period_s=grace_s)
        for v in victims)


def decided_message(d: Decided, gpus: tuple[GpuInfo, ...], *, source: str, cluster: str, policy: str,
                    grace_s: float, now: float) -> PlacementDecided:
    """A planner decision as the wire says it: slices by GPU UUID, the preemption plan's victims (a
    victim that can checkpoint is asked to first, within `grace_s`)."""
    entry = d.entry
    assert entry.request is not None
    p: PodPending = entry.payload
    victims = planned_preemptions(d.victims, d.preemption_reason, grace_s)
    return PlacementDecided(
        source=source, emitted_at=now, cluster=cluster, decision_id=d.decision_id, pod_uid=entry.uid,
        pod_name=p.pod_name, namespace=p.namespace, node=d.node,
        slices=slices(entry.request, gpus, d.gpus, p.mig_profile), policy=policy, score=d.score, decided_at=now,
        gang_id=p.gang_id, queue=p.queue, attempt=entry.attempt, cpu_milli=entry.request.cpu_milli,
        memory_mib=entry.request.memory_mib, preemptions=victims, priority=entry.request.priority,
        checkpointable=p.checkpointable)


def unschedulable_message(p: PodPending, reason: str, message: str, why: PodExplanation | None, *, source: str,
                          cluster: str, now: float, attempt: int | None = None,
                          retry_after_s: float | None = None) -> PodUnschedulable:
    """Why a pod waits, with its request (a standby that takes over knows the parked pod)."""
    return PodUnschedulable(
        source=source, emitted_at=now, cluster=cluster, pod_uid=p.pod_uid, pod_name=p.pod_name,
        namespace=p.namespace, reason=str(reason), message=message,
        node_classes=explanation(why).node_classes if why is not None else (), retry_after_s=retry_after_s,
        attempt=p.attempt if attempt is None else attempt, pod=p)


# -- explanations -------------------------------------------------------------------------------


def explanation(e: PodExplanation, *, quota_admitted: bool | None = None, quota_reason: str = "") -> Explanation:
    return Explanation(
        schedulable=e.schedulable, summary=e.summary,
        node_classes=tuple(NodeClassVerdict(node_class=c.node_class, nodes=c.nodes, feasible=c.feasible,
                                            rejected=dict(c.rejected), best_node=c.best_node,
                                            best_score=None if c.best_score is None else round(c.best_score, 3))
                           for c in e.classes),
        best_node=e.best_node, best_score=None if e.best_score is None else round(e.best_score, 3),
        quota_admitted=quota_admitted, quota_reason=quota_reason)


# -- the request mix ----------------------------------------------------------------------------

PRIOR: dict[tuple[int, int, int, str], float] = {
    # a generic mix (whole GPUs, common shares, a few multi-GPU pods), used until pods are seen
    (8000, 1, 1000, ""): 30, (4000, 1, 500, ""): 12, (4000, 1, 250, ""): 10, (6000, 1, 470, ""): 8,
    (4000, 1, 320, ""): 8, (8000, 1, 810, ""): 6, (16000, 2, 1000, ""): 4, (32000, 4, 1000, ""): 3,
    (64000, 8, 1000, ""): 2, (4000, 0, 0, ""): 12,
}


def typical_from_file(path: str | Path) -> TypicalPods:
    """The request mix of an openb-format pod list (research traces stay outside the repository)."""
    counts: Counter[tuple[int, int, int, str]] = Counter()
    with Path(path).open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            cpu = int(row["cpu_milli"])
            num = int(row["num_gpu"])
            milli = int(row["gpu_milli"]) if num else 0
            counts[(cpu if cpu > 0 else 100, num, milli, row.get("gpu_spec") or "")] += 1
    if not counts:
        raise ValueError(f"{path}: no pods")
    return TypicalPods.from_counts(dict(counts))
