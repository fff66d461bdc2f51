"""Chargeback: fractional GPU-seconds and GPU-memory-seconds per pod, queue and tenant.

Why it looks like this: a pod's charge is one interval, from its ``bound`` event to its
``finished`` or ``preempted`` event, times what it held (thousandths of a GPU, MiB of GPU memory).
An interval is keyed by the pod uid *and* its bind time, so a redelivered event changes nothing
(the service stores the same key with ``ON CONFLICT DO NOTHING``) and a pod preempted and bound
again is two intervals. A report over ``[since, until)`` charges only the overlap, with intervals
still open counted up to ``until``; the same arithmetic runs here and in SQL (the service's report
query is tested against this one).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Interval", "charge", "rows_to_csv"]


@dataclass(frozen=True, slots=True)
class Interval:
    pod_uid: str
    queue: str
    tenant: str
    gpu_milli: int
    gpu_memory_mib: int
    started_at: float
    ended_at: float | None = None
    outcome: str = ""


def charge(intervals: Iterable[Interval], since: float, until: float, by: str = "tenant") -> list[dict]:
    """Rows ``{key, pods, gpu_seconds, gpu_memory_gib_seconds}`` by ``tenant``, ``queue`` or ``pod``,
    largest first. A 500-milli pod held for 3,600 s inside the window charges 1,800 GPU-seconds."""
    if by not in ("tenant", "queue", "pod"):
        raise ValueError(f"by must be tenant, queue or pod, got {by!r}")
    if until < since:
        raise ValueError(f"until {until} is before since {since}")
    acc: dict[str, list[float]] = {}
    pods: dict[str, set[str]] = {}
    for iv in intervals:
        end = until if iv.ended_at is None else min(iv.ended_at, until)
        secs = end - max(iv.started_at, since)
        if secs <= 0:
            continue
        key = {"tenant": iv.tenant, "queue": iv.queue, "pod": iv.pod_uid}[by]
        row = acc.setdefault(key, [0.0, 0.0])
        row[0] += iv.gpu_milli / 1000.0 * secs
        row[1] += iv.gpu_memory_mib / 1024.0 * secs
        pods.setdefault(key, set()).add(iv.pod_uid)
    rows = [{by: k, "pods": len(pods[k]), "gpu_seconds": round(v[0], 3), "gpu_memory_gib_seconds": round(v[1], 3)}
            for k, v in acc.items()]
    return sorted(rows, key=lambda r: (-r["gpu_seconds"], r[by]))


def rows_to_csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()
