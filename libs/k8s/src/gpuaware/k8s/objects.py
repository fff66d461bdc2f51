"""The objects we write to Kubernetes, built as the official client's models, and how to read its answers.

Why models: the ``kubernetes`` client serialises exactly what the apiserver accepts, and the tests
round-trip every object we build through its models (``ApiClient.sanitize_for_serialization`` then
``Model.from_dict``) so a field we spell wrong is caught here, not by a cluster.

- **Binding** (``pods/binding``): the pod's UID is always sent (the apiserver makes it a storage
  precondition, so a re-created pod of the same name is never bound by mistake); the GPU-assignment
  annotations travel in the Binding and are merged into the pod in the same write (Volcano does this).
- **GPU-assignment annotations**, so the node enforces the slice the platform decided:
  whole GPUs name their device UUIDs (``gpuaware.io/gpu-uuids``); a fraction of one GPU is written in
  HAMi-core's format (``hami.io/vgpu-devices-to-allocate: "<uuid>,NVIDIA,<MiB>,<core %>:;"``, one
  ``;``-terminated segment per container, the GPU in the first container asking for one) with HAMi's
  ``vgpu-node`` / ``bind-phase`` keys, so HAMi's device plugin and HAMi-core in the container limit it;
  a MIG profile names the device plugin's resource (``nvidia.com/mig-<profile>``) and the instance.
- **Bind answers**: 201 + ``Status: Success`` is success whatever the client's model thinks (the
  OpenAPI spec wrongly declares a ``V1Binding`` body: kubernetes-client/python #547, #825), 409
  "already assigned to node X" is success when X is our node and a conflict otherwise.
- **Events** (core/v1) with a reason and the "why pending" explanation placement computed; **Eviction**
  (policy/v1, PodDisruptionBudgets are the apiserver's to enforce: 429 means "not now");
  **Lease** (coordination.k8s.io/v1) for leader election in cluster mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpuaware.schemas import GpuSlice

__all__ = [
    "ASSIGNED",
    "POWER",
    "BindOutcome",
    "assignment_annotations",
    "bind_outcome",
    "binding",
    "event",
    "eviction",
    "lease",
    "power_down_patch",
    "power_up_patch",
    "to_json",
]

_P = "gpuaware.io/"


class ASSIGNED:
    """Annotations we write on a bound pod."""

    GPU_UUIDS = _P + "gpu-uuids"
    GPU_MILLI = _P + "assigned-gpu-milli"
    GPU_MEMORY_MIB = _P + "assigned-gpu-memory-mib"
    MIG_PROFILE = _P + "mig-profile"
    MIG_RESOURCE = _P + "mig-resource"
    MIG_INSTANCE = _P + "mig-instance-uuid"
    DECISION = _P + "decision-id"
    CHECKPOINT_REQUESTED = _P + "checkpoint-requested"
    CHECKPOINT_DEADLINE = _P + "checkpoint-deadline"
    CHECKPOINT_DONE = _P + "checkpoint-completed"
    CHECKPOINT_WORLD_SIZE = _P + "checkpoint-world-size"
    """a resize's checkpoint request: the job's worker count once it resumes (absent otherwise)"""
    HAMI_DEVICES = "hami.io/vgpu-devices-to-allocate"
    HAMI_NODE = "hami.io/vgpu-node"
    HAMI_TIME = "hami.io/vgpu-time"
    HAMI_BIND_PHASE = "hami.io/bind-phase"
    HAMI_BIND_TIME = "hami.io/bind-time"


class POWER:
    """What the binder writes on a node a node-power planner switches (an autoscaler or BMC tool acts on it)."""

    STATE = _P + "power"
    """``off``: cordoned by gpuaware to be switched off; ``on``: switched back on (uncordoned by gpuaware)"""
    CHANGED_AT = _P + "power-changed-at"
    """RFC 3339 time of the last change"""


def power_down_patch(at: str) -> dict[str, Any]:
    """A merge patch: cordon the node and mark it for switching off."""
    return {"spec": {"unschedulable": True}, "metadata": {"annotations": {POWER.STATE: "off", POWER.CHANGED_AT: at}}}


def power_up_patch(at: str) -> list[dict[str, Any]]:
    """A JSON patch: uncordon the node only if gpuaware cordoned it (the ``test`` fails otherwise, and the
    apiserver applies nothing: a node an operator cordoned stays cordoned)."""
    def path(key: str) -> str:
        return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")

    return [{"op": "test", "path": path(POWER.STATE), "value": "off"},
            {"op": "replace", "path": "/spec/unschedulable", "value": False},
            {"op": "replace", "path": path(POWER.STATE), "value": "on"},
            {"op": "add", "path": path(POWER.CHANGED_AT), "value": at}]


_ALREADY = re.compile(r'is already assigned to node "([^"]+)"')
_API = client.ApiClient


def to_json(model: Any) -> dict[str, Any]:
    """A client model as the API's JSON (camelCase keys, RFC 3339 times)."""
    return _API().sanitize_for_serialization(model)


def _gpu_containers(pod: Mapping[str, Any]) -> list[bool]:
    out = []
    for c in (pod.get("spec") or {}).get("containers") or ():
        res = c.get("resources") or {}
        keys = set(res.get("limits") or {}) | set(res.get("requests") or {})
        out.append(any(k.startswith("nvidia.com/") for k in keys))
    return out


def assignment_annotations(node: str, slices: Sequence[GpuSlice], *, pod: Mapping[str, Any] | None = None,
                           decision_id: str = "", now: float = 0.0) -> dict[str, str]:
    """What the node needs to enforce `slices` (see the module docstring)."""
    out: dict[str, str] = {}
    if decision_id:
        out[ASSIGNED.DECISION] = decision_id
    if not slices:
        return out
    out[ASSIGNED.GPU_UUIDS] = ",".join(s.gpu_uuid for s in slices)
    mig = slices[0].mig_profile
    if mig is not None:
        out[ASSIGNED.MIG_PROFILE] = mig
        out[ASSIGNED.MIG_RESOURCE] = "nvidia.com/mig-" + mig.replace("+", ".")
        if slices[0].mig_instance_uuid:
            out[ASSIGNED.MIG_INSTANCE] = slices[0].mig_instance_uuid
        return out
    if len(slices) == 1 and slices[0].gpu_milli < 1000:
        s = slices[0]
        out[ASSIGNED.GPU_MILLI] = str(s.gpu_milli)
        out[ASSIGNED.GPU_MEMORY_MIB] = str(s.memory_mib)
        device = f"{s.gpu_uuid},NVIDIA,{s.memory_mib},{s.gpu_milli // 10}:"
        flags = _gpu_containers(pod) if pod is not None else [True]
        first = flags.index(True) if True in flags else 0
        out[ASSIGNED.HAMI_DEVICES] = "".join((device if i == first else "") + ";" for i in range(max(1, len(flags))))
        out[ASSIGNED.HAMI_NODE] = node
        out[ASSIGNED.HAMI_TIME] = str(int(now))
        out[ASSIGNED.HAMI_BIND_PHASE] = "allocating"
        out[ASSIGNED.HAMI_BIND_TIME] = str(int(now))
    return out


def binding(namespace: str, name: str, uid: str, node: str,
            annotations: Mapping[str, str] | None = None) -> client.V1Binding:
    return client.V1Binding(
        api_version="v1", kind="Binding",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid,
                                     annotations=dict(annotations) if annotations else None),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """``ok``: the pod is bound to our node; else ``reason`` (a short code) and ``message``; ``transient``
    says whether deciding again can help."""

    ok: bool
    reason: str = ""
    message: str = ""
    transient: bool = False
    node: str | None = None
    """the node the pod is bound to, when the apiserver said"""


def bind_outcome(status: int, body: bytes | str | Mapping[str, Any] | None, node: str) -> BindOutcome:
    """The apiserver's answer to a Binding for `node`, whichever way it came (raw 201 response or an
    ``ApiException``'s status and body)."""
    if isinstance(body, bytes | str):
        raw = body
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {"message": raw if isinstance(raw, str) else raw.decode("utf-8", "replace")}
    body = body or {}
    msg = str(body.get("message", ""))
    if status in (200, 201) and body.get("status", "Success") == "Success":
        return BindOutcome(True, node=node)
    if status == 409:
        m = _ALREADY.search(msg)
        if m is not None:
            if m.group(1) == node:
                return BindOutcome(True, "already_bound", msg, node=node)
            return BindOutcome(False, "bound_elsewhere", msg, transient=False, node=m.group(1))
        if "schedulingGates" in msg:
            return BindOutcome(False, "scheduling_gated", msg, transient=True)
        if "being deleted" in msg:
            return BindOutcome(False, "pod_deleting", msg, transient=False)
        return BindOutcome(False, "conflict", msg, transient=True)
    if status == 404:
        return BindOutcome(False, "unknown_pod", msg or "pod not found", transient=False)
    if status in (429, 500, 502, 503, 504):
        return BindOutcome(False, "apiserver_unavailable", msg or f"HTTP {status}", transient=True)
    return BindOutcome(False, f"http_{status}", msg or f"HTTP {status}", transient=False)


def _now(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def event(*, namespace: str, pod_name: str, pod_uid: str, reason: str, message: str, now: float,
          type_: str = "Normal", component: str = "gpuaware", host: str | None = None,
          action: str = "Scheduling") -> client.CoreV1Event:
    """A core/v1 Event about a pod (``kubectl describe pod`` shows it). Messages are cut to the
    apiserver's 1 KiB limit."""
    if type_ not in ("Normal", "Warning"):
        raise ValueError(f"event type {type_!r} is not Normal or Warning")
    t = _now(now)
    return client.CoreV1Event(
        api_version="v1", kind="Event",
        metadata=client.V1ObjectMeta(name=f"{pod_name}.{int(now * 1e6):x}", namespace=namespace),
        involved_object=client.V1ObjectReference(api_version="v1", kind="Pod", name=pod_name, namespace=namespace,
                                                 uid=pod_uid),
        reason=reason, message=message[:1024], type=type_, action=action, reporting_component=component,
        reporting_instance=host or component, source=client.V1EventSource(component=component, host=host),
        first_timestamp=t, last_timestamp=t, event_time=t, count=1)


def eviction(namespace: str, name: str, uid: str, grace_period_s: int | None = None) -> client.V1Eviction:
    """A policy/v1 Eviction with the pod's UID as precondition (never evict a re-created namesake)."""
    return client.V1Eviction(
        api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=client.V1DeleteOptions(grace_period_seconds=grace_period_s,
                                              preconditions=client.V1Preconditions(uid=uid)))


def lease(namespace: str, name: str, holder: str, *, duration_s: int, now: float, acquired: float | None = None,
          transitions: int = 0, resource_version: str | None = None) -> client.V1Lease:
    return client.V1Lease(
        api_version="coordination.k8s.io/v1", kind="Lease",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, resource_version=resource_version),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=duration_s,
                                acquire_time=_now(acquired if acquired is not None else now), renew_time=_now(now),
                                lease_transitions=transitions))


def checkpoint_annotations(deadline: float, now: float) -> dict[str, str]:
    """The checkpoint handshake: the victim is asked to checkpoint before `deadline` (RFC 3339); it
    answers by setting ``gpuaware.io/checkpoint-completed`` (read by the watcher)."""
    return {ASSIGNED.CHECKPOINT_REQUESTED: _now(now).isoformat().replace("+00:00", "Z"),
            ASSIGNED.CHECKPOINT_DEADLINE: _now(deadline).isoformat().replace("+00:00", "Z")}


def why_pending(reason: str, message: str, node_classes: Sequence[Any] = (), *, limit: int = 5) -> str:
    """The "why pending" explanation placement computed, as an Event message (kube-scheduler's
    ``0/N nodes are available: ...`` answered per node class): the headline, then the classes."""
    parts = [f"{reason}: {message}" if message else reason]
    for c in list(node_classes)[:limit]:
        rejected = ", ".join(f"{n} {r}" for r, n in sorted(c.rejected.items(), key=lambda kv: -kv[1]))
        parts.append(f"{c.node_class}: {c.feasible}/{c.nodes} feasible" + (f" ({rejected})" if rejected else ""))
    if len(node_classes) > limit:
        parts.append(f"and {len(node_classes) - limit} more node classes")
    return "; ".join(parts)
