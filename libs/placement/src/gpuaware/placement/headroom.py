"""Forecast head-room: keep free the GPUs the latency-sensitive classes are forecast to need soon.

A serving replica or a notebook that arrives to a full cluster waits for a preemption (a checkpoint
handshake, an eviction) or for a departure; work that could have started a little later took its
place. The forecasting service predicts the latency-sensitive classes' demand (running + pending GPUs)
with a calibrated p90; this Permit plugin keeps the gap between that p90's peak over the next
``horizon_s`` and what those classes hold now free, by holding back only work that said it can wait:

* a pod of a latency-sensitive class, or one that is neither deferrable nor checkpointable, is never
  held back (head-room must not starve anyone who cannot wait or be moved);
* a deferrable or checkpointable pod is held back when placing it would leave fewer whole free GPUs
  than the room: it waits (``DENIED``, the reason says for what) and is tried again when capacity frees
  or the forecast shrinks the room.

``update`` is called with each new forecast (the peak p90, in GPUs) and what the classes hold then;
it returns True when the room shrank, so the caller can retry the pods held back. With no forecast
the room is 0 and nothing is held back.

Enable (the placement service does, unless ``GPUAWARE_PLACEMENT_FORECAST_HEADROOM=false``)::

    permits=(ForecastHeadroom(frozenset({"inference-critical", "interactive"})), ...)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.extensions import ALLOW, PermitVerdict
from gpuaware.placement.framework import CycleState, Decision
from gpuaware.placement.ledger import HOLDING, PodEntry
from gpuaware.placement.model import MILLI, PodRequest

__all__ = ["ForecastHeadroom"]

REASON = "forecast_headroom: GPUs kept free for the latency-sensitive classes' forecast demand"
"""one reason for every pod held back (the parked pod's reason on the bus is part of its message id, so
it carries no figures that change from one try to the next; ``room_milli`` has them)"""


class ForecastHeadroom:
    """The Permit plugin (see the module docstring)."""

    name: ClassVar[str] = "forecast-headroom"

    def __init__(self, classes: frozenset[str], horizon_s: float = 1800.0) -> None:
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be positive, got {horizon_s}")
        self.classes = classes
        self.horizon_s = horizon_s
        self.forecast_gpus = 0.0
        """the latency-sensitive classes' forecast demand: the p90's peak over the horizon, GPUs"""
        self.held_milli = 0
        """what those classes held when the forecast came (GPU thousandths)"""
        self.room_milli = 0
        self.held_back = 0
        """placements this plugin refused (a pod retried counts again; the parked pods' reasons on the
        bus name each pod)"""

    def latency_sensitive(self, pod: PodRequest) -> bool:
        return pod.priority_class in self.classes

    def may_wait(self, pod: PodRequest) -> bool:
        """Work that said it can wait or be moved, and is not latency-sensitive itself."""
        return (pod.deferrable or pod.checkpointable) and not self.latency_sensitive(pod)

    def held_by_classes(self, entries: Iterable[PodEntry]) -> int:
        """GPU thousandths the latency-sensitive classes hold (decided or bound) in ``entries``."""
        return sum(e.request.num_gpu * e.request.gpu_milli for e in entries
                   if e.phase in HOLDING and e.request is not None and self.latency_sensitive(e.request))

    @staticmethod
    def whole_gpus_free(snap: Snapshot) -> int:
        """Thousandths on GPUs with nothing on them: the room is kept in whole GPUs. Slivers left on shared
        GPUs do not count - a whole-GPU serving replica or one asking 8-12 GiB cannot use them, and counted
        they kept the room from ever binding (bench/results/headroom.md)."""
        return int((snap.gpu_free >= MILLI).sum()) * MILLI

    def update(self, forecast_gpus: float, held_milli: int) -> bool:
        """A new forecast: the room is its peak less what the classes hold now. True when it shrank."""
        before = self.room_milli
        self.forecast_gpus = max(0.0, float(forecast_gpus))
        self.held_milli = max(0, held_milli)
        self.room_milli = max(0, round(self.forecast_gpus * MILLI) - self.held_milli)
        return self.room_milli < before

    def certainly_denied(self, pod: PodRequest, snap: Snapshot) -> bool:
        """``permit`` would hold ``pod`` back wherever it went (a ``PermitGate``): the whole free GPUs now,
        less the whole GPUs it takes at least (none for a fraction, which may share a GPU), are already
        under the room. A retry pass skips it, so held-back work does not cost a cycle each pass."""
        if self.room_milli <= 0 or not pod.num_gpu or not self.may_wait(pod):
            return False
        takes = pod.num_gpu * MILLI if pod.gpu_milli >= MILLI else 0
        return self.whole_gpus_free(snap) - takes < self.room_milli

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        # the snapshot shows the cluster with this pod's GPUs already staged
        if self.room_milli <= 0 or not pod.num_gpu or not self.may_wait(pod):
            return ALLOW
        if self.whole_gpus_free(snap) >= self.room_milli:
            return ALLOW
        self.held_back += 1
        return PermitVerdict(False, REASON)
