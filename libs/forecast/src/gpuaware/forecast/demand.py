"""GPU demand per queue, minute by minute, from the binder's pod events: the series the demand model
forecasts.

Demand is what Helios counts per virtual cluster (and what the demand model is trained on): the GPUs
of pods running plus pods pending, sampled at the end of each minute. A pod counts from its
``binder.pod.pending`` until it finishes, is preempted without being requeued, or fails to bind for
good; its GPUs are the caller's (``PodPending.gpu_milli_total`` / 1000: part of one GPU for a fractional
pod). Times are
the events' own (``submitted_at``, ``bound_at``, ``finished_at``, ``preempted_at``, ``failed_at``),
so a digital twin's accelerated clock gives virtual minutes and a real cluster wall-clock ones.

A pod may count under groups besides its queue (``pending(..., groups=...)``): the service keeps the
latency-sensitive classes' demand this way (``class_key``), the series placement keeps head-room
for. Group keys start with ``class:``, which no queue name (a DNS label) can.

``DemandBook.advance(t)`` closes every minute that ended by ``t`` and returns one row per closed
minute: the demand of every queue known so far and the cluster's total. Between events demand is a
known constant, not a gap, so a quiet hour yields sixty equal minutes; a jump longer than
``max_fill_minutes`` (a clock jump, a restart after days) starts the series again at the new minute
instead of inventing a day of rows. Events about unknown pods (a follower started mid-stream) and
repeats (at-least-once delivery) change nothing twice.
"""

from __future__ import annotations

import dataclasses
import math

from gpuaware.schemas import LATENCY_SENSITIVE

__all__ = ["CLASS_PREFIX", "LATENCY_SENSITIVE", "TOTAL", "DemandBook", "DemandRow", "class_key"]

TOTAL = ""
"""the queue key of the cluster's total"""
CLASS_PREFIX = "class:"
"""the key of a group of pods counted besides their queues (``class:latency-sensitive``)"""


def class_key(name: str) -> str:
    return f"{CLASS_PREFIX}{name}"


@dataclasses.dataclass(frozen=True)
class DemandRow:
    """One closed minute: its start and the demand (GPUs) per queue, ``TOTAL`` included."""

    start: float
    demand: dict[str, float]


@dataclasses.dataclass
class _Pod:
    queue: str
    gpus: float
    groups: tuple[str, ...] = ()


class DemandBook:
    def __init__(self, step_s: float = 60.0, max_fill_minutes: int = 24 * 60) -> None:
        if not step_s > 0:
            raise ValueError(f"step must be positive, got {step_s}")
        self.step_s = step_s
        self.max_fill = max_fill_minutes
        self.pods: dict[str, _Pod] = {}
        self.gone: set[str] = set()
        self.queues: dict[str, float] = {TOTAL: 0.0}
        self.open: float | None = None
        """start of the minute not yet closed"""
        self.restarts = 0

    # -- events -------------------------------------------------------------------------------------

    def pending(self, uid: str, queue: str, gpus: float, t: float, groups: tuple[str, ...] = ()) -> list[DemandRow]:
        """The pod asks for ``gpus`` from ``t`` on, counted in ``queue``, the total and each of ``groups``."""
        rows = self.advance(t)
        if gpus <= 0 or uid in self.gone:
            return rows
        old = self.pods.get(uid)
        if old is not None:  # a repeat, or a requeued attempt: counted once
            self._add(old, -1.0)
        pod = self.pods[uid] = _Pod(queue, gpus, groups)
        self._add(pod, 1.0)
        return rows

    def left(self, uid: str, t: float, *, requeued: bool = False) -> list[DemandRow]:
        """The pod finished, failed for good or was preempted (``requeued``: it is pending again)."""
        rows = self.advance(t)
        if requeued:
            return rows
        pod = self.pods.pop(uid, None)
        if pod is not None:
            self._add(pod, -1.0)
            self.gone.add(uid)
            if len(self.gone) > 4 * max(1024, len(self.pods)):  # only repeats need it; they come soon
                self.gone.clear()
        return rows

    def _add(self, pod: _Pod, sign: float) -> None:
        for key in (pod.queue, *pod.groups):
            self.queues[key] = max(0.0, self.queues.get(key, 0.0) + sign * pod.gpus)
            if abs(self.queues[key]) < 1e-9:
                self.queues[key] = 0.0
        self.queues[TOTAL] = max(0.0, self.queues[TOTAL] + sign * pod.gpus)

    # -- minutes ------------------------------------------------------------------------------------

    def advance(self, t: float) -> list[DemandRow]:
        """Close every minute that ended at or before ``t``; their rows, oldest first."""
        if not math.isfinite(t):
            return []
        start = math.floor(t / self.step_s) * self.step_s
        if self.open is None:
            self.open = start
            return []
        if start <= self.open:
            return []
        closed = round((start - self.open) / self.step_s)
        if closed > self.max_fill:
            self.restarts += 1
            self.open = start
            return []
        snapshot = dict(self.queues)
        rows = [DemandRow(self.open + k * self.step_s, snapshot) for k in range(closed)]
        self.open = start
        return rows
