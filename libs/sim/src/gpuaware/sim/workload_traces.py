"""Workloads from traces: the Alibaba openb pod list and the Philly trace as ``SimPod``s (see
``workload_gen`` for what a ``SimPod`` is and for the generator)."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gpuaware.sim.traces import TraceError, TracePod
from gpuaware.sim.workload_gen import MILLI, PodClass, SimPod, split_gang

__all__ = ["from_openb", "load_philly"]

_OPENB_CLASS = {"LS": PodClass.INFERENCE, "BE": PodClass.TRAINING}
_OPENB_QOS = {"LS": "guaranteed", "BE": "best-effort", "Burstable": "burstable", "Guaranteed": "guaranteed"}
_OPENB_PRIORITY = {"LS": 1000, "BE": 0, "Burstable": 100, "Guaranteed": 1000}


@dataclass(frozen=True, slots=True)
class _Window:
    start: float
    end: float = field(default=math.inf)


def from_openb(trace_pods: Iterable[TracePod], *, window_start: float | None = None,
               window_s: float | None = None, namespace: str = "openb", gpu_only: bool = False,
               max_pods: int = 0) -> tuple[SimPod, ...]:
    """openb pods alive in ``[window_start, window_start + window_s)``, times relative to its start.

    A pod created before the window and deleted inside or after it arrives at 0 with the rest of its
    life; a pod without a deletion time runs past the end (``duration_s=None``). Pods without a
    creation time count as created at the trace's start. ``qos`` picks the class and priority:
    LS (latency-sensitive) -> inference / 1000, BE (best effort) -> training / 0.
    """
    pods = list(trace_pods)
    starts = [p.creation_time or 0.0 for p in pods]
    first = min(starts, default=0.0)
    w = _Window(first if window_start is None else window_start)
    if window_s is not None:
        w = _Window(w.start, w.start + window_s)
    out: list[SimPod] = []
    for p, created in zip(pods, starts, strict=True):
        r = p.request
        if gpu_only and r.num_gpu == 0:
            continue
        deleted = p.deletion_time
        if created >= w.end or (deleted is not None and deleted <= w.start):
            continue
        arrival = max(0.0, created - w.start)
        duration = None if deleted is None else max(0.0, deleted - max(created, w.start))
        qos = r.qos or ""
        out.append(SimPod(
            uid=r.name, name=r.name, namespace=namespace, arrival_s=arrival, duration_s=duration,
            klass=_OPENB_CLASS.get(qos, PodClass.BATCH) if r.num_gpu else PodClass.BATCH,
            queue="default", cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, num_gpu=r.num_gpu,
            gpu_milli=r.gpu_milli if r.num_gpu else MILLI, gpu_memory_mib=r.gpu_memory_mib,
            gpu_types=r.gpu_types, priority=_OPENB_PRIORITY.get(qos, 0),
            qos=_OPENB_QOS.get(qos, "best-effort"),
        ))
    out.sort(key=lambda s: (s.arrival_s, s.uid))
    return tuple(out[:max_pods] if max_pods else out)


def load_philly(path: Path | str, *, window_start: float | None = None, window_s: float | None = 86400.0,
                gpus_per_node: int = 8, max_pods: int = 0, uid_prefix: str = "philly",
                checkpointable: bool = True) -> tuple[SimPod, ...]:
    """Jobs of the Pollux artifact's ``traces/philly.csv`` submitted in a window (seconds after the
    trace's first submission; None = from the first one).

    Every job is a training job of its virtual cluster (tenant ``vc-<id>``); a job wider than a
    node becomes a gang of whole-node pods. CPU and memory follow a DGX-like 8 cores and 64 GiB
    per GPU. Rows are validated like the openb loaders: a bad row raises TraceError.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, None, "file not found")
    rows: list[tuple[float, float, int, str, int]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        need = {"timestamp", "duration", "num_gpus", "cluster"}
        if reader.fieldnames is None or not need <= set(reader.fieldnames):
            raise TraceError(path, 1, f"missing column(s) {sorted(need - set(reader.fieldnames or ()))}")
        for row in reader:
            line = reader.line_num
            try:
                submit = datetime.fromisoformat(row["timestamp"]).timestamp()
                duration = float(row["duration"])
                gpus = int(row["num_gpus"])
            except ValueError as exc:
                raise TraceError(path, line, str(exc)) from None
            if duration < 0 or gpus < 1:
                raise TraceError(path, line, f"duration {duration} / num_gpus {gpus} out of range")
            rows.append((submit, duration, gpus, row["cluster"], line))
    if not rows:
        raise TraceError(path, None, "no jobs")
    rows.sort()
    first = rows[0][0]
    lo = first + (window_start or 0.0)
    hi = math.inf if window_s is None else lo + window_s
    out: list[SimPod] = []
    for submit, duration, gpus, vc, line in rows:
        if not lo <= submit < hi:
            continue
        widths = split_gang(gpus, gpus_per_node)
        job = f"{uid_prefix}-{line:06d}"
        for member, width in enumerate(widths):
            suffix = f"-{member}" if len(widths) > 1 else ""
            out.append(SimPod(
                uid=f"{job}{suffix}", name=f"{job}{suffix}", namespace=f"vc-{vc}", queue=f"vc-{vc}",
                arrival_s=submit - lo, duration_s=duration, klass=PodClass.TRAINING, cpu_milli=8000 * width,
                memory_mib=65536 * width, num_gpu=width, priority=100, priority_class="batch-training",
                checkpointable=checkpointable, qos="burstable",
                gang_id=job if len(widths) > 1 else None, gang_min_members=len(widths),
                topology="same-nvlink-island" if width > 1 else "none",
            ))
        if max_pods and len(out) >= max_pods:
            break
    return tuple(out)
