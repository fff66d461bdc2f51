"""Kubernetes objects -> the contract's events: a Pod becomes ``PodPending`` (here), a Node
``NodeInventory`` (``nodes``), with the names and checks both share.

Why here and nowhere else: from the binder on, no service looks at a Kubernetes object. Objects are
taken as the API's JSON (plain dicts: what a watch with ``_preload_content=False``, the extender's
``Pod`` and ``ApiClient.sanitize_for_serialization`` all give), so one translation serves the
watcher, the extender and the tests' recorded payloads alike.

Pods, in the order the request is read:

- CPU and memory: the larger of the sum over containers and the largest init container (what the
  kubelet admits), requests first, limits when a container gives only limits.
- ``nvidia.com/gpu: N`` alone is N whole GPUs, nothing else asked (backward compatible, no annotation).
- HAMi's resources (``nvidia.com/gpucores`` percent of one GPU's compute, ``nvidia.com/gpumem`` MiB
  per GPU, ``nvidia.com/gpumem-percentage``) make a fraction of one GPU; HAMi's
  ``nvidia.com/use-gputype`` annotation names the allowed models.
- ``nvidia.com/mig-<profile>: 1`` (the device plugin's mixed strategy) asks for one MIG instance.
- DRA: each ``spec.resourceClaims`` entry is resolved through ``claims`` (claim or template name ->
  object); requests of the ``gpu.nvidia.com`` class count whole GPUs, of ``mig.nvidia.com`` one MIG
  instance whose profile is read from the CEL selector (``...profile == '1g.10gb'``).
- ``gpuaware.io/*`` annotations carry what Kubernetes has no field for (queue, gang, topology,
  checkpointable, ...); each is checked, and a bad one is refused with its name and value. A pod
  labelled ``scheduling.x-k8s.io/pod-group`` (scheduler-plugins' coscheduling) joins that gang.
- An elastic gang (torchrun's ``--nnodes=MIN:MAX``) declares its range with ``gang-min-members`` and
  ``gang-max-members`` (or its GPUGang's ``minMember`` / ``maxMember``): its controller creates the
  ``max`` workers, ``min`` of them are placed all-or-none and the rest as GPUs are idle. A maximum
  without a gang, or below the minimum, is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from kubernetes.utils.quantity import parse_quantity

from gpuaware.schemas import GpuCapabilities, PodPending, QosClass, TopologyPreference

__all__ = [
    "ANNOTATION",
    "EXTENDER_SCHEDULER_NAME",
    "GPU",
    "SCHEDULER_NAME",
    "TranslationError",
    "controller_uid",
    "gpu_resources",
    "pod_pending",
    "quantity",
]

SCHEDULER_NAME = "gpuaware"
EXTENDER_SCHEDULER_NAME = "gpuaware-extender"
"""the second kube-scheduler's name in extender mode (the chart's extender.kubeScheduler.schedulerName)"""
GPU = "nvidia.com/gpu"
GPU_CORES = "nvidia.com/gpucores"
GPU_MEM = "nvidia.com/gpumem"
GPU_MEM_PCT = "nvidia.com/gpumem-percentage"
MIG_PREFIX = "nvidia.com/mig-"
HAMI_USE_TYPE = "nvidia.com/use-gputype"
HAMI_REGISTER = "hami.io/node-nvidia-register"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

_P = "gpuaware.io/"


class ANNOTATION:
    """The pod annotations we read (prefix ``gpuaware.io/``)."""

    QUEUE = _P + "queue"
    GANG = _P + "gang"
    GANG_MIN_MEMBERS = _P + "gang-min-members"
    GANG_MAX_MEMBERS = _P + "gang-max-members"
    GPU_TYPES = _P + "gpu-types"
    TOPOLOGY = _P + "topology"
    CHECKPOINTABLE = _P + "checkpointable"
    DEFERRABLE = _P + "deferrable"
    EXPECTED_DURATION_S = _P + "expected-duration-s"
    MIN_COMPUTE_CAPABILITY = _P + "min-compute-capability"
    MIN_GPU_MEMORY_MIB = _P + "min-gpu-memory-mib"
    CAPABILITIES = _P + "capabilities"
    GPU_MILLI = _P + "gpu-milli"
    GPU_MEMORY_MIB = _P + "gpu-memory-mib"


_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\.me)?$")
_CEL_PROFILE = re.compile(r"""\.profile\s*==\s*['"]([^'"]+)['"]""")
_QOS = {"Guaranteed": QosClass.GUARANTEED, "Burstable": QosClass.BURSTABLE, "BestEffort": QosClass.BEST_EFFORT}
_TRUE = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
_CAPS = {"tensor-cores": "tensor_cores", "fp8": "fp8", "nvlink": "nvlink"}
_MAX_GANG_MEMBERS = 4096
"""the most members the contract carries (``PodPending.gang_max_members``)"""


class TranslationError(ValueError):
    """The object cannot become a contract event; the message names the field and the value."""


@contextmanager
def malformed_as_translation_error(what: str) -> Iterator[None]:
    """Objects from the API are input like any other: a field of the wrong JSON type anywhere (a list
    where a map belongs, a number for a name) becomes a `TranslationError` naming the object, never an
    AttributeError from deep inside (found by fuzzing, tests/k8s/test_k8s_fuzz.py)."""
    try:
        yield
    except TranslationError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError, IndexError, ArithmeticError) as exc:
        raise TranslationError(f"{what} is malformed ({type(exc).__name__}: {exc})") from None


def quantity(value: Any, what: str) -> Decimal:
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise TranslationError(f"{what}: {value!r} is not a Kubernetes quantity") from exc
    if not q.is_finite():  # the client's parser takes "INF" and "NaN": no resource is infinite
        raise TranslationError(f"{what}: {value!r} is not a finite quantity")
    return q


def _ts(value: Any) -> float:
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise TranslationError(f"metadata.creationTimestamp: {value!r} is not RFC 3339") from exc


def _container_resources(c: Mapping[str, Any]) -> dict[str, Any]:
    """requests, with limits filling what requests leave out (extended resources give only limits)."""
    res = c.get("resources") or {}
    out = dict(res.get("limits") or {})
    out.update(res.get("requests") or {})
    return out


def gpu_resources(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """The GPU-related resources the pod's containers ask for, summed over containers (init
    containers run one at a time: the largest counts when it asks more)."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or ():
        for k, v in _container_resources(c).items():
            if k.startswith("nvidia.com/"):
                total[k] = total.get(k, Decimal(0)) + quantity(v, f"container {c.get('name')!r} {k}")
    for c in spec.get("initContainers") or ():
        for k, v in _container_resources(c).items():
            if k.startswith("nvidia.com/"):
                total[k] = max(total.get(k, Decimal(0)), quantity(v, f"init container {c.get('name')!r} {k}"))
    return total


def _cpu_mem(spec: Mapping[str, Any]) -> tuple[int, int]:
    def of(cs: Any) -> list[tuple[int, int]]:
        out = []
        for c in cs or ():
            r = _container_resources(c)
            cpu = quantity(r.get("cpu", 0), f"container {c.get('name')!r} cpu")
            mem = quantity(r.get("memory", 0), f"container {c.get('name')!r} memory")
            out.append((int(cpu * 1000), int(mem / (1 << 20))))
        return out

    main = of(spec.get("containers"))
    init = of(spec.get("initContainers"))
    cpu = max(sum(c for c, _ in main), max((c for c, _ in init), default=0))
    mem = max(sum(m for _, m in main), max((m for _, m in init), default=0))
    return cpu, mem


def _bool(ann: Mapping[str, str], key: str) -> bool:
    raw = ann.get(key)
    if raw is None:
        return False
    v = _TRUE.get(raw.strip().lower())
    if v is None:
        raise TranslationError(f"annotation {key}: {raw!r} is not true or false")
    return v


def _int(ann: Mapping[str, str], key: str, lo: int, hi: int | None = None) -> int | None:
    raw = ann.get(key)
    if raw is None:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise TranslationError(f"annotation {key}: {raw!r} is not an integer") from None
    if v < lo or (hi is not None and v > hi):
        raise TranslationError(f"annotation {key}: {v} is outside {lo}..{hi if hi is not None else 'inf'}")
    return v


def _dra(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> tuple[int, str | None]:
    """(whole GPUs, MIG profile) asked through DRA ResourceClaims (v1 ``exactly`` or v1beta1 flat)."""
    gpus, mig = 0, None
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        key = ref.get("resourceClaimName") or ref.get("resourceClaimTemplateName")
        if not key:
            continue
        obj = claims.get(key)
        if obj is None:
            raise TranslationError(f"spec.resourceClaims {ref.get('name')!r}: claim {key!r} is not known (yet)")
        spec = obj.get("spec") or {}
        spec = spec.get("spec", spec)  # a template wraps the claim's spec
        for req in (spec.get("devices") or {}).get("requests") or ():
            one = req.get("exactly") or req
            cls = one.get("deviceClassName")
            count = int(one.get("count") or 1) if one.get("allocationMode", "ExactCount") == "ExactCount" else 0
            if one.get("allocationMode") == "All":
                raise TranslationError(f"claim {key!r} request {req.get('name')!r}: allocationMode All is not supported")
            if cls == DRA_GPU_CLASS:
                gpus += count
            elif cls == DRA_MIG_CLASS:
                found = [m.group(1) for s in one.get("selectors") or ()
                         if (m := _CEL_PROFILE.search((s.get("cel") or {}).get("expression", "")))]
                if not found or count != 1 or mig is not None:
                    raise TranslationError(f"claim {key!r} request {req.get('name')!r}: one MIG device with a "
                                           "profile selector (device.attributes[...].profile == '<profile>') is needed")
                mig = found[0]
    return gpus, mig


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the object that controls the pod (its ``ownerReferences`` entry with ``controller:
    true``: a Job, a JobSet's Job, a PyTorchJob, a ReplicaSet), or None for a bare pod. A controller
    replaces a pod it lost with a new one under a new uid; this is what the two have in common."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    if not isinstance(refs, list | tuple):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid"):
            return str(ref["uid"])
    return None


def pod_pending(pod: Mapping[str, Any], *, source: str, cluster: str = "default", emitted_at: float = 0.0,
                claims: Mapping[str, Mapping[str, Any]] | None = None, attempt: int = 0,
                gangs: Mapping[str, Mapping[str, Any]] | None = None, job_preemptions: int = 0) -> PodPending:
    """The pending-pod event for a Pod (API JSON). ``gangs``: GPUGang specs by name (the pod's
    namespace), whose ``minMember`` / ``maxMember`` / ``queue`` / ``topology`` apply where the pod's
    annotations are silent; ``job_preemptions``: how often the pod's controller lost a pod to a
    preemption before (the binder counts them). Raises ``TranslationError`` naming what is wrong."""
    with malformed_as_translation_error("pod object"):
        return _pod_pending(pod, source=source, cluster=cluster, emitted_at=emitted_at, claims=claims,
                            attempt=attempt, gangs=gangs, job_preemptions=job_preemptions)


def _pod_pending(pod: Mapping[str, Any], *, source: str, cluster: str, emitted_at: float,
                 claims: Mapping[str, Mapping[str, Any]] | None, attempt: int,
                 gangs: Mapping[str, Mapping[str, Any]] | None, job_preemptions: int) -> PodPending:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    # PodGroup compatibility: scheduler-plugins' coscheduling label names the gang as well
    gang = ann.get(ANNOTATION.GANG) or (meta.get("labels") or {}).get(POD_GROUP_LABEL) or None
    gang_spec: Mapping[str, Any] = (gangs or {}).get(gang or "", {}) if gang else {}
    if gang_spec:
        ann = {**{k: str(v) for k, v in ((ANNOTATION.GANG_MIN_MEMBERS, gang_spec.get("minMember")),
                                        (ANNOTATION.GANG_MAX_MEMBERS, gang_spec.get("maxMember")),
                                        (ANNOTATION.QUEUE, gang_spec.get("queue")),
                                        (ANNOTATION.TOPOLOGY, gang_spec.get("topology"))) if v is not None},
               **ann}
    for k in ("uid", "name"):
        if not meta.get(k):
            raise TranslationError(f"metadata.{k} is missing")
    res = gpu_resources(pod)
    num = int(res.get(GPU, 0))
    if res.get(GPU, 0) != num:
        raise TranslationError(f"{GPU}: {res[GPU]} is not a whole number of GPUs")
    milli, gpu_mem, mig = 1000, 0, None
    if GPU_CORES in res:
        milli = int(res[GPU_CORES] * 10)
        if not 0 < milli <= 1000:
            raise TranslationError(f"{GPU_CORES}: {res[GPU_CORES]} is not a percentage in 1..100")
    if GPU_MEM in res:
        gpu_mem = int(res[GPU_MEM])
    if GPU_MEM_PCT in res and GPU_CORES not in res and GPU_MEM not in res:
        milli = int(res[GPU_MEM_PCT] * 10)  # memory share = compute share when only a share is asked
    migs = {k[len(MIG_PREFIX):]: v for k, v in res.items() if k.startswith(MIG_PREFIX)}
    if migs:
        if len(migs) > 1 or next(iter(migs.values())) != 1 or num:
            raise TranslationError(f"only one MIG instance per pod is supported, asked {dict(migs)} and {GPU}: {num}")
        mig = next(iter(migs))
        num = 1
    if claims is not None or spec.get("resourceClaims"):
        dra_gpus, dra_mig = _dra(pod, claims or {})
        if dra_mig is not None:
            if num or mig or dra_gpus:
                raise TranslationError("a MIG device through DRA cannot be combined with other GPU requests")
            num, mig = 1, dra_mig
        num += dra_gpus
    if mig is not None and not _MIG_PROFILE.match(mig):
        raise TranslationError(f"MIG profile {mig!r} is not <g>g.<m>gb")
    # gpuaware.io annotations override what resources said
    m = _int(ann, ANNOTATION.GPU_MILLI, 1, 1000)
    if m is not None:
        milli = m
    m = _int(ann, ANNOTATION.GPU_MEMORY_MIB, 0)
    if m is not None:
        gpu_mem = m
    if num == 0 and (milli < 1000 or gpu_mem) and (GPU_CORES in res or GPU_MEM in res or GPU_MEM_PCT in res):
        num = 1  # HAMi: a fraction without nvidia.com/gpu means one (shared) GPU
    types: list[str] = []
    for key in (ANNOTATION.GPU_TYPES, HAMI_USE_TYPE):
        types += [t.strip() for t in (ann.get(key) or "").split(",") if t.strip()]
    caps: dict[str, Any] = {}
    for c in (ann.get(ANNOTATION.CAPABILITIES) or "").split(","):
        c = c.strip()
        if c:
            if c not in _CAPS:
                raise TranslationError(f"annotation {ANNOTATION.CAPABILITIES}: unknown capability {c!r} "
                                       f"(known: {', '.join(_CAPS)})")
            caps[_CAPS[c]] = True
    if (mm := _int(ann, ANNOTATION.MIN_GPU_MEMORY_MIB, 0)) is not None:
        caps["min_memory_mib"] = mm
    if (cc := ann.get(ANNOTATION.MIN_COMPUTE_CAPABILITY)) is not None:
        caps["min_compute_capability"] = cc
    topo = ann.get(ANNOTATION.TOPOLOGY, TopologyPreference.NONE.value)
    try:
        topology = TopologyPreference(topo)
    except ValueError:
        raise TranslationError(f"annotation {ANNOTATION.TOPOLOGY}: {topo!r} is not one of "
                               f"{', '.join(t.value for t in TopologyPreference)}") from None
    duration = ann.get(ANNOTATION.EXPECTED_DURATION_S)
    min_members, max_members = _gang_range(ann, gang)
    cpu, mem = _cpu_mem(spec)
    qos = (pod.get("status") or {}).get("qosClass")
    try:
        return msgspec.convert(dict(
            source=source, emitted_at=emitted_at, cluster=cluster, pod_uid=meta["uid"], pod_name=meta["name"],
            namespace=meta.get("namespace") or "default", submitted_at=_ts(meta.get("creationTimestamp")),
            cpu_milli=cpu, memory_mib=mem, num_gpu=num, gpu_milli=milli if num else 1000, gpu_memory_mib=gpu_mem,
            gpu_types=tuple(dict.fromkeys(types)), capabilities=msgspec.convert(caps, GpuCapabilities),
            mig_profile=mig, gang_id=gang, gang_min_members=min_members, gang_max_members=max_members,
            topology=topology, queue=ann.get(ANNOTATION.QUEUE) or "default", priority=int(spec.get("priority") or 0),
            priority_class=spec.get("priorityClassName") or "",
            checkpointable=_bool(ann, ANNOTATION.CHECKPOINTABLE), deferrable=_bool(ann, ANNOTATION.DEFERRABLE),
            qos=_QOS.get(qos, QosClass.BEST_EFFORT) if qos else _qos_of(spec),
            expected_duration_s=float(duration) if duration is not None else None, attempt=attempt,
            job_preemptions=job_preemptions,
        ), PodPending)
    except (msgspec.ValidationError, ValueError) as exc:
        if isinstance(exc, TranslationError):
            raise
        raise TranslationError(f"pod {meta.get('namespace')}/{meta['name']}: {exc}") from exc


def _gang_range(ann: Mapping[str, str], gang: str | None) -> tuple[int, int]:
    """(fewest, most members) of the pod's gang; most is 0 for a gang fixed at its minimum. An
    elastic range needs a gang and a maximum no smaller than the minimum."""
    fewest = _int(ann, ANNOTATION.GANG_MIN_MEMBERS, 1) or 1
    most = _int(ann, ANNOTATION.GANG_MAX_MEMBERS, 1, _MAX_GANG_MEMBERS)
    if most is None:
        return fewest, 0
    if not gang:
        raise TranslationError(f"annotation {ANNOTATION.GANG_MAX_MEMBERS}: {most} needs a gang (annotation "
                               f"{ANNOTATION.GANG} or label {POD_GROUP_LABEL})")
    if most < fewest:
        raise TranslationError(f"gang {gang!r}: most members {most} ({ANNOTATION.GANG_MAX_MEMBERS} or GPUGang "
                               f"spec.maxMember) is below its fewest {fewest} ({ANNOTATION.GANG_MIN_MEMBERS} or "
                               "GPUGang spec.minMember)")
    return fewest, most


def _qos_of(spec: Mapping[str, Any]) -> QosClass:
    """Kubernetes' rule for pods without status.qosClass yet (cpu and memory only)."""
    containers = list(spec.get("containers") or ()) + list(spec.get("initContainers") or ())
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or (r in req and quantity(req[r], r) != quantity(lim[r], r)):
                guaranteed = False
    if not any_set:
        return QosClass.BEST_EFFORT
    return QosClass.GUARANTEED if guaranteed else QosClass.BURSTABLE


# -- nodes ---------------------------------------------------------------------------------------


def is_ours(pod: Mapping[str, Any], scheduler_name: str = SCHEDULER_NAME) -> bool:
    """A pod this scheduler must place: ours by name, not yet bound, not finished or being deleted."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (spec.get("schedulerName") == scheduler_name and not spec.get("nodeName")
            and not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"))
