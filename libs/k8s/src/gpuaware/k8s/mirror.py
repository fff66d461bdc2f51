"""What the binder knows of a Kubernetes cluster, kept from the watches, in the contract's words.

Why pure: the binder's Kubernetes world must turn watch changes into exactly-once contract events
(a pending pod announced once per attempt, a finished pod once) and answer the world's questions
(is this pod still pending? how is it bound? what nodes exist?) from its cache. None of that needs a
cluster, so it lives here, fed by ``watch.Change``s, and is tested from recorded objects.

De-duplication ids follow the twin's: ``<cluster>/pending/<uid>/<attempt>``, ``<cluster>/finished/<uid>``,
``<cluster>/checkpoint-ack/<request id>/<status>``, so a re-announcement after a restart (the first
LIST sees every pending pod again) is stored once by the stream.

A controller replaces a pod it lost to a preemption with a new one (new uid, attempt 0); the mirror
counts preemptions per controller (``preempted``) and announces the replacement with its job's count
(``PodPending.job_preemptions``), so placement's and quota's caps on preemptions hold per job. The
count lives as long as the binder's process and for the ``max_jobs`` most recently preempted jobs.

A pod whose request cannot be translated (a bad annotation) is announced as nothing: it is reported
in ``refused`` (uid -> reason) for the shell to post a Warning Event on the pod, and is retried when
the pod changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from gpuaware.k8s.nodes import node_inventory
from gpuaware.k8s.objects import ASSIGNED
from gpuaware.k8s.translate import (
    ANNOTATION,
    EXTENDER_SCHEDULER_NAME,
    POD_GROUP_LABEL,
    TranslationError,
    controller_uid,
    pod_pending,
)
from gpuaware.k8s.watch import Change
from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointStatus,
    Event,
    GpuSlice,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    WorldGpu,
    WorldNode,
    WorldPod,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)

__all__ = ["KubeMirror"]

_FINISHED = {"Succeeded": PodOutcome.SUCCEEDED, "Failed": PodOutcome.FAILED}


def _ts(v: Any) -> float | None:
    if not v:
        return None
    return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()


@dataclass(slots=True)
class KubeMirror:
    cluster: str
    source: str
    claims: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """DRA claims and templates by ``<namespace>/<name>`` (the shell reads them when a pod names one)"""
    gangs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """GPUGang specs by ``<namespace>/<name>`` (read by the shell when a pod names a gang)"""
    pods: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    nodes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    announced: set[tuple[str, int]] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    extender_scheduler: str = EXTENDER_SCHEDULER_NAME
    """pods of this scheduler were placed by kube-scheduler with our extender: never announced as
    pending; their binding is reported (``<cluster>/bound/<decision>``) so every placement replica holds
    their GPUs, and their end like any pod's"""
    reported_bound: set[str] = field(default_factory=set)
    no_gang: set[str] = field(default_factory=set)
    """gangs named by pods that have no GPUGang (annotations alone describe them)"""
    pending_checkpoints: dict[str, str] = field(default_factory=dict)
    """pod uid -> checkpoint request id we are waiting on"""
    job_preemptions: dict[str, int] = field(default_factory=dict)
    """controller uid -> pods of it preempted so far (least recently preempted first)"""
    max_jobs: int = 65_536
    """the most controllers ``job_preemptions`` remembers (memory stays bounded in a long-lived binder)"""

    # -- nodes --------------------------------------------------------------------------------------

    def on_node(self, ch: Change) -> None:
        name = ch.obj["metadata"]["name"]
        if ch.kind == "deleted":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = ch.obj

    # -- pods ---------------------------------------------------------------------------------------

    def on_pod(self, ch: Change, now: float) -> list[tuple[Event, str]]:
        uid = ch.uid
        pod = ch.obj
        out: list[tuple[Event, str]] = []
        if ch.kind == "deleted":
            old = self.pods.pop(uid, None)
            if old is not None and (old.get("spec") or {}).get("nodeName") and uid not in self.finished:
                out.append(self._finished(old, PodOutcome.DELETED, now))
            self.refused.pop(uid, None)
            return out
        self.pods[uid] = pod
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in _FINISHED and uid not in self.finished:
            out.append(self._finished(pod, _FINISHED[phase], now))
        elif spec.get("schedulerName") == self.extender_scheduler:
            if spec.get("nodeName") and uid not in self.reported_bound:
                b = self.bound(uid, pod)
                if b is not None and b.slices:
                    self.reported_bound.add(uid)
                    b = msgspec.structs.replace(b, emitted_at=now, bound_at=b.bound_at or now)
                    out.append((b, f"{self.cluster}/bound/{b.decision_id or uid}"))
        elif not spec.get("nodeName") and phase in (None, "Pending"):
            ev = self.pending(uid, now)
            if ev is not None and (uid, ev.attempt) not in self.announced:
                self.announced.add((uid, ev.attempt))
                out.append((ev, f"{self.cluster}/pending/{uid}/{ev.attempt}"))
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        req = self.pending_checkpoints.get(uid)
        if req is not None and ASSIGNED.CHECKPOINT_DONE in ann:
            del self.pending_checkpoints[uid]
            raw = ann[ASSIGNED.CHECKPOINT_DONE].strip().lower()
            status = CheckpointStatus.COMPLETED if raw in ("true", "completed", "ok") else CheckpointStatus.FAILED
            ack = CheckpointAcknowledged(source=self.source, emitted_at=now, cluster=self.cluster, request_id=req,
                                         pod_uid=uid, namespace=pod["metadata"].get("namespace") or "default",
                                         status=status, acknowledged_at=now)
            out.append((ack, f"{self.cluster}/checkpoint-ack/{req}/{status.value}"))
        return out

    def pending(self, uid: str, now: float) -> PodPending | None:
        """The pod's pending event at its current attempt, or None (unknown, bound, untranslatable)."""
        pod = self.pods.get(uid)
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            return None
        job = controller_uid(pod)
        try:
            ev = pod_pending(pod, source=self.source, cluster=self.cluster, emitted_at=now,
                             claims=self._claims_of(pod), attempt=self.attempts.get(uid, 0),
                             gangs=self._in_ns(self.gangs, pod),
                             job_preemptions=self.job_preemptions.get(job, 0) if job else 0)
        except TranslationError as exc:
            self.refused[uid] = str(exc)
            return None
        self.refused.pop(uid, None)
        return ev

    def _claims_of(self, pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        return self._in_ns(self.claims, pod)

    @staticmethod
    def _in_ns(objs: Mapping[str, Mapping[str, Any]], pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        return {k.split("/", 1)[1]: v for k, v in objs.items() if k.startswith(ns + "/")}

    def missing_gang(self, uid: str) -> tuple[str, str] | None:
        """(namespace, gang) when the pod names a gang whose GPUGang is not read yet."""
        pod = self.pods.get(uid)
        if pod is None:
            return None
        meta = pod["metadata"]
        gang = (meta.get("annotations") or {}).get(ANNOTATION.GANG) or (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        ns = meta.get("namespace") or "default"
        if not gang or f"{ns}/{gang}" in self.gangs or f"{ns}/{gang}" in self.no_gang:
            return None
        return ns, gang

    def missing_claims(self, uid: str) -> list[tuple[str, str, bool]]:
        """(namespace, name, is_template) of the DRA claims the pod names that are not read yet."""
        pod = self.pods.get(uid)
        if pod is None:
            return []
        ns = pod["metadata"].get("namespace") or "default"
        out = []
        for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
            name = ref.get("resourceClaimName") or ref.get("resourceClaimTemplateName")
            if name and f"{ns}/{name}" not in self.claims:
                out.append((ns, name, "resourceClaimTemplateName" in ref))
        return out

    def preempted(self, uid: str) -> int:
        """Pod ``uid`` was evicted by a preemption: count it against its controller (none for a bare
        pod). Returns the controller's count (0 without one)."""
        pod = self.pods.get(uid)
        job = controller_uid(pod) if pod is not None else None
        if job is None:
            return 0
        n = self.job_preemptions.pop(job, 0) + 1
        self.job_preemptions[job] = n  # re-inserted: most recently preempted last
        while len(self.job_preemptions) > self.max_jobs:
            del self.job_preemptions[next(iter(self.job_preemptions))]
        return n

    def requeue(self, uid: str, now: float) -> PodPending | None:
        if self.state(uid) != "pending":
            return None
        self.attempts[uid] = self.attempts.get(uid, 0) + 1
        ev = self.pending(uid, now)
        if ev is not None:
            self.announced.add((uid, ev.attempt))
        return ev

    def _finished(self, pod: Mapping[str, Any], outcome: PodOutcome, now: float) -> tuple[Event, str]:
        meta = pod["metadata"]
        self.finished.add(meta["uid"])
        b = self.bound(meta["uid"], pod)
        ev = PodFinished(source=self.source, emitted_at=now, cluster=self.cluster, pod_uid=meta["uid"],
                         pod_name=meta["name"], namespace=meta.get("namespace") or "default", outcome=outcome,
                         finished_at=now, node=(pod.get("spec") or {}).get("nodeName"),
                         started_at=_ts((pod.get("status") or {}).get("startTime")),
                         slices=b.slices if b is not None else ())
        return ev, f"{self.cluster}/finished/{meta['uid']}"

    # -- the world's questions ------------------------------------------------------------------

    def state(self, uid: str) -> str:
        pod = self.pods.get(uid)
        if pod is None:
            return "finished" if uid in self.finished else "unknown"
        phase = (pod.get("status") or {}).get("phase")
        if phase in _FINISHED or uid in self.finished:
            return "finished"
        return "bound" if (pod.get("spec") or {}).get("nodeName") else "pending"

    def bound(self, uid: str, pod: Mapping[str, Any] | None = None) -> PodBound | None:
        """How the pod is bound, read back from the assignment annotations we wrote at bind time."""
        pod = pod or self.pods.get(uid)
        if pod is None:
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return None
        meta = pod["metadata"]
        ann = meta.get("annotations") or {}
        uuids = [u for u in (ann.get(ASSIGNED.GPU_UUIDS) or "").split(",") if u]
        milli = int(ann.get(ASSIGNED.GPU_MILLI) or 1000)
        mem = int(ann.get(ASSIGNED.GPU_MEMORY_MIB) or 0)
        index = {g.uuid: g.index for g in self._gpus(node)}
        slices = tuple(GpuSlice(gpu_uuid=u, gpu_index=index.get(u, i), gpu_milli=milli, memory_mib=mem,
                                mig_profile=ann.get(ASSIGNED.MIG_PROFILE)) for i, u in enumerate(uuids))
        cond: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"),
                    {})
        return PodBound(source=self.source, emitted_at=0.0, cluster=self.cluster, pod_uid=uid, pod_name=meta["name"],
                        namespace=meta.get("namespace") or "default", node=node, slices=slices,
                        bound_at=_ts(cond.get("lastTransitionTime")) or 0.0,
                        decision_id=ann.get(ASSIGNED.DECISION) or None,
                        queue=ann.get("gpuaware.io/queue") or "default")

    def _gpus(self, node: str) -> tuple[Any, ...]:
        obj = self.nodes.get(node)
        if obj is None:
            return ()
        try:
            return node_inventory(obj, source=self.source, cluster=self.cluster).gpus
        except TranslationError:
            return ()

    def world_nodes(self) -> list[WorldNode]:
        out = []
        for name in sorted(self.nodes):
            try:
                inv = node_inventory(self.nodes[name], source=self.source, cluster=self.cluster)
            except TranslationError:
                continue
            out.append(WorldNode(name=name, cpu_milli=inv.cpu_milli, memory_mib=inv.memory_mib,
                                 gpu_model=inv.gpus[0].model if inv.gpus else "", rack=inv.rack, zone=inv.zone,
                                 labels=inv.labels,
                                 gpus=tuple(WorldGpu(uuid=g.uuid, index=g.index, model=g.model,
                                                     memory_mib=g.memory_mib, numa_node=g.numa_node)
                                            for g in inv.gpus)))
        return out

    def snapshot(self, request: WorldSnapshotRequest, now: float) -> WorldSnapshotReply:
        nodes = self.world_nodes() if request.include_nodes else []
        pods: list[WorldPod] = []
        if request.include_pods:
            for uid in sorted(self.pods):
                if self.state(uid) != "bound":
                    continue
                b = self.bound(uid)
                assert b is not None
                pending = self.pending_of_bound(uid)
                pods.append(WorldPod(pod_uid=uid, pod_name=b.pod_name, namespace=b.namespace, node=b.node,
                                     slices=b.slices, bound_at=b.bound_at, decision_id=b.decision_id, queue=b.queue,
                                     priority=pending.priority if pending else 0,
                                     cpu_milli=pending.cpu_milli if pending else 0,
                                     memory_mib=pending.memory_mib if pending else 0,
                                     checkpointable=pending.checkpointable if pending else False,
                                     gang_id=pending.gang_id if pending else None))
        n0, p0, lim = request.node_offset, request.pod_offset, request.limit
        page_n, page_p = nodes[n0:n0 + lim], pods[p0:p0 + lim]
        return WorldSnapshotReply(
            source=self.source, emitted_at=now, cluster=self.cluster, world="kubernetes", at=now, generation=0,
            nodes=tuple(page_n), pods=tuple(page_p), total_nodes=len(nodes), total_pods=len(pods),
            pending_pods=sum(1 for u in self.pods if self.state(u) == "pending"),
            next_node_offset=n0 + lim if n0 + lim < len(nodes) else None,
            next_pod_offset=p0 + lim if p0 + lim < len(pods) else None)

    def pending_of_bound(self, uid: str) -> PodPending | None:
        pod = self.pods.get(uid)
        if pod is None:
            return None
        try:
            return pod_pending(pod, source=self.source, cluster=self.cluster, claims=self._claims_of(pod),
                               gangs=self._in_ns(self.gangs, pod))
        except TranslationError:
            return None
