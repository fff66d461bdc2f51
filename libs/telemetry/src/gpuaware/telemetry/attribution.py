"""Who used the GPU: split each GPU's measured load among the pods on it, per window.

Where allocations come from: the binder's events (``PodBound`` adds the pod's slices on this node,
``PodFinished`` / ``PodPreempted`` remove them), kept by ``AllocationLedger``; or, in the digital
twin, the simulated fleet's assignments (``from_pod_shares``). Either way the agent holds, per
GPU, the pods and their shares (thousandths of the GPU) at every read.

How a GPU's reading is split (``attribute``): utilisation among the pods present, in proportion to
their weights, the allocated share by default; framebuffer in proportion to the memory each pod
was given (its share when no pod states memory). A pod alone on a GPU is charged everything the
GPU did, even beyond its share (time-slicing lets it burst), so ``gpu_seconds_used`` may exceed
``gpu_seconds_allocated``; that is the signal quota and forecasting want. Per-process readings
(NVML process utilisation, where a node can map processes to pods) plug in as ``weights`` and are
reported as ``attribution="process"``.

``UsageAccumulator`` integrates the split over time (each read stands for the ``dt`` seconds until
the next) and emits one ``PodGpuUsage`` per (pod, GPU) per window; summing ``gpu_seconds_used`` per
tenant accounts a shared GPU exactly, because the parts of every reading add up to the reading.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuaware.schemas import PodBound, PodGpuUsage

__all__ = [
    "AllocationLedger",
    "PodAlloc",
    "UsageAccumulator",
    "allocations_by_gpu",
    "attribute",
    "from_pod_shares",
    "tenant_of",
]


@dataclass(frozen=True, slots=True)
class PodAlloc:
    """A pod's share of one GPU."""

    namespace: str
    pod: str
    gpu_uuid: str
    milli: int
    tenant: str
    memory_mib: int = 0
    uid: str | None = None


def tenant_of(queue: str | None, namespace: str) -> str:
    """The tenant charged: the pod's queue, or its namespace when no queue was named."""
    return queue if queue and queue != "default" else namespace


def from_pod_shares(shares: Iterable[object]) -> list[PodAlloc]:
    """Allocations from ``gpuaware.gpu.PodShare`` objects (the simulated fleet's assignments)."""
    return [PodAlloc(namespace=s.namespace, pod=s.name, gpu_uuid=s.gpu_uuid, milli=s.milli,  # type: ignore[attr-defined]  # duck-typed gpu.PodShare: telemetry does not import gpuaware.gpu
                     tenant=s.namespace, memory_mib=s.memory_mib) for s in shares]  # type: ignore[attr-defined]  # duck-typed gpu.PodShare: telemetry does not import gpuaware.gpu


def allocations_by_gpu(allocs: Iterable[PodAlloc]) -> dict[str, tuple[PodAlloc, ...]]:
    out: dict[str, list[PodAlloc]] = {}
    for a in allocs:
        out.setdefault(a.gpu_uuid, []).append(a)
    return {u: tuple(ps) for u, ps in out.items()}


def attribute(util_pct: float | None, mem_used_mib: float | None, pods: Sequence[PodAlloc],
              weights: Sequence[float] | None = None) -> list[tuple[float | None, float | None]]:
    """Split one GPU reading among ``pods``: [(util % of the whole GPU, MiB)] per pod, in order.

    ``None`` in, ``None`` out (a MIG GPU reports no utilisation). The parts add up to the reading.
    """
    if not pods:
        return []
    w = [float(x) for x in weights] if weights is not None else [float(p.milli) for p in pods]
    if len(w) != len(pods) or any(x < 0 or not math.isfinite(x) for x in w):
        raise ValueError(f"need one non-negative weight per pod, got {w}")
    total = sum(w)
    share = [x / total for x in w] if total > 0 else [1.0 / len(pods)] * len(pods)
    mem_w = [float(p.memory_mib) for p in pods]
    mem_total = sum(mem_w)
    mem_share = [x / mem_total for x in mem_w] if mem_total > 0 and all(x > 0 for x in mem_w) else share
    return [(None if util_pct is None else util_pct * s, None if mem_used_mib is None else mem_used_mib * m)
            for s, m in zip(share, mem_share, strict=True)]


@dataclass(slots=True)
class _Acc:
    alloc: PodAlloc
    seconds: float = 0.0
    gpu_seconds_allocated: float = 0.0
    gpu_seconds_used: float = 0.0
    util_weighted: float = 0.0
    util_max: float = 0.0
    mem_weighted: float = 0.0
    mem_max: float = 0.0


class UsageAccumulator:
    """Integrates per-pod usage of one node's GPUs over a window (see the module docstring)."""

    def __init__(self, attribution: str = "share") -> None:
        self.attribution = attribution
        self._acc: dict[tuple[str, str, str], _Acc] = {}

    def add(self, dt: float, readings: Mapping[str, tuple[float | None, float | None]],
            allocations: Mapping[str, Sequence[PodAlloc]],
            weights: Mapping[str, Sequence[float]] | None = None) -> None:
        """One read standing for ``dt`` seconds: ``readings`` maps GPU UUID -> (util %, MiB used)."""
        if dt <= 0:
            return
        for uuid, pods in allocations.items():
            if not pods or uuid not in readings:
                continue
            util, mem = readings[uuid]
            parts = attribute(util, mem, pods, None if weights is None else weights.get(uuid))
            for pod, (u, m) in zip(pods, parts, strict=True):
                key = (pod.namespace, pod.pod, uuid)
                acc = self._acc.get(key)
                if acc is None or acc.alloc != pod:
                    acc = self._acc[key] = _Acc(pod) if acc is None else _replace_alloc(acc, pod)
                acc.seconds += dt
                acc.gpu_seconds_allocated += pod.milli / 1000.0 * dt
                if u is not None:
                    acc.gpu_seconds_used += u / 100.0 * dt
                    acc.util_weighted += u * dt
                    acc.util_max = max(acc.util_max, u)
                if m is not None:
                    acc.mem_weighted += m * dt
                    acc.mem_max = max(acc.mem_max, m)

    def __len__(self) -> int:
        return len(self._acc)

    def flush(self) -> list[PodGpuUsage]:
        """The window's usage, one entry per (pod, GPU) seen, and a fresh start."""
        out = []
        for (namespace, pod, uuid), a in sorted(self._acc.items()):
            out.append(PodGpuUsage(
                namespace=namespace, pod=pod, gpu_uuid=uuid, tenant=a.alloc.tenant, gpu_milli=a.alloc.milli,
                seconds=a.seconds, gpu_seconds_allocated=a.gpu_seconds_allocated,
                gpu_seconds_used=a.gpu_seconds_used,
                util_pct_avg=min(100.0, a.util_weighted / a.seconds) if a.seconds else 0.0,
                util_pct_max=min(100.0, a.util_max),
                mem_used_mib_avg=a.mem_weighted / a.seconds if a.seconds else 0.0,
                mem_used_mib_max=a.mem_max, pod_uid=a.alloc.uid, attribution=self.attribution))
        self._acc = {}
        return out


def _replace_alloc(acc: _Acc, pod: PodAlloc) -> _Acc:
    """The pod's share changed within the window (a resize): keep the sums, report the latest share."""
    acc.alloc = pod
    return acc


class AllocationLedger:
    """The pods holding GPUs of one node, from the binder's events.

    Events of other nodes are ignored. A release may overtake the binding it ends (two consumers,
    a replay): released pod UIDs are remembered (a bounded set) so a late ``PodBound`` does not
    resurrect a finished pod.
    """

    def __init__(self, node: str, *, remember: int = 100_000) -> None:
        self.node = node
        self._pods: dict[str, tuple[PodAlloc, ...]] = {}
        self._released: dict[str, None] = {}
        self._remember = remember
        self.version = 0
        """bumped on every change, so readers can cache ``by_gpu()``"""

    def bound(self, event: PodBound) -> bool:
        """Apply a binding; True if this node's allocations changed."""
        if event.node != self.node or event.pod_uid in self._released:
            return False
        tenant = tenant_of(event.queue, event.namespace)
        allocs = tuple(PodAlloc(namespace=event.namespace, pod=event.pod_name, gpu_uuid=s.gpu_uuid,
                                milli=s.gpu_milli, tenant=tenant, memory_mib=s.memory_mib, uid=event.pod_uid)
                       for s in event.slices)
        if self._pods.get(event.pod_uid) == allocs:
            return False
        self._pods[event.pod_uid] = allocs
        self.version += 1
        return True

    def released(self, pod_uid: str) -> bool:
        """Apply a finish or a preemption; True if this node's allocations changed."""
        self._released[pod_uid] = None
        if len(self._released) > self._remember:
            del self._released[next(iter(self._released))]
        if self._pods.pop(pod_uid, None) is None:
            return False
        self.version += 1
        return True

    def by_gpu(self) -> dict[str, tuple[PodAlloc, ...]]:
        return allocations_by_gpu(a for allocs in self._pods.values() for a in allocs)

    def __len__(self) -> int:
        return len(self._pods)
