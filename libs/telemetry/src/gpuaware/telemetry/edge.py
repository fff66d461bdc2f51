"""One node's edge aggregation: from a read of its GPUs to what goes on the bus, if anything.

``NodeEdge.observe`` is the whole per-read decision of the node agent, as a pure function of its
inputs and its own state (time is passed in, never read), so the agent's shell only reads the
backend, calls it and publishes what comes back:

* anomaly flags from the read and the backend's events (``AnomalyDetector``);
* which GPU rows to send (``AdaptiveSampler``): a ``GpuSampled`` with only those rows, their flags,
  ``seq`` +1 per message sent (a gap in ``seq`` still means a lost message), ``interval_s`` the
  longest heartbeat now in force among them;
* per-pod usage (``UsageAccumulator``): each read is charged for the time until the next one (at
  most ``max_gap_s``: an agent that stalled is not charged for the stall) to the window it falls
  in; when a read opens a new window, the finished one is returned as a ``PodUsageReported``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from gpuaware.gpu import GpuEvent, GpuFrame
from gpuaware.schemas import GpuSampled, PodUsageReported
from gpuaware.telemetry.adaptive import AdaptivePolicy, AdaptiveSampler, Decision
from gpuaware.telemetry.anomaly import AnomalyDetector
from gpuaware.telemetry.attribution import PodAlloc, UsageAccumulator

__all__ = ["EdgeOutput", "NodeEdge", "subset"]


@dataclass(frozen=True, slots=True)
class EdgeOutput:
    sampled: GpuSampled | None
    """the rows to send now, or None"""
    usage: PodUsageReported | None
    """a usage window that just closed, or None"""
    decision: Decision
    flags: np.ndarray


def subset(frame: GpuFrame, rows: np.ndarray) -> GpuFrame:
    """The given rows of a one-node frame (views where numpy allows)."""
    if len(rows) == len(frame):
        return frame
    return GpuFrame(
        frame.sampled_at, frame.nodes, np.array([0, len(rows)], dtype=np.int64),
        tuple(frame.gpu_uuid[int(i)] for i in rows), frame.gpu_index[rows],
        {name: col[rows] for name, col in frame.columns.items()}, 0,
    )


class NodeEdge:
    """Edge state of one node (see the module docstring)."""

    def __init__(self, node: str, *, source: str, cluster: str = "default", policy: AdaptivePolicy | None = None,
                 usage_window_s: float = 60.0, max_gap_s: float | None = None,
                 memory_full_frac: float = 0.95, attribution: str = "share") -> None:
        if usage_window_s <= 0:
            raise ValueError("usage_window_s must be positive")
        self.node = node
        self.source = source
        self.cluster = cluster
        self.sampler = AdaptiveSampler(policy)
        self.detector = AnomalyDetector(memory_full_frac=memory_full_frac)
        self.usage = UsageAccumulator(attribution)
        self.usage_window_s = usage_window_s
        self.max_gap_s = max_gap_s if max_gap_s is not None else 3 * self.sampler.policy.fast_s
        self.seq = 0
        self.sent_messages = 0
        self.sent_rows = 0
        self._window: float | None = None
        self._pending: tuple[float, dict[str, tuple[float | None, float | None]],
                             Mapping[str, Sequence[PodAlloc]]] | None = None

    @property
    def policy(self) -> AdaptivePolicy:
        return self.sampler.policy

    def observe(self, frame: GpuFrame, now: float, *, events: Sequence[GpuEvent] = (),
                allocations: Mapping[str, Sequence[PodAlloc]] | None = None,
                emitted_at: float | None = None) -> EdgeOutput:
        """Handle one read of the node's GPUs taken at ``now``."""
        emitted = now if emitted_at is None else emitted_at
        flags = self.detector.update(frame, events)
        decision = self.sampler.decide(frame, now, flags)
        usage = self._account(frame, now, allocations or {}, emitted)
        sampled = None
        if decision.any:
            rows = np.flatnonzero(decision.send)
            [msg] = subset(frame, rows).to_messages(source=self.source, interval_s=decision.interval_s,
                                                   emitted_at=emitted, seq=self.seq, cluster=self.cluster)
            sampled = msgspec.structs.replace(msg, anomaly_flags=tuple(flags[rows].tolist()))
            self.seq += 1
            self.sent_messages += 1
            self.sent_rows += len(rows)
        return EdgeOutput(sampled=sampled, usage=usage, decision=decision, flags=flags)

    def _account(self, frame: GpuFrame, now: float, allocations: Mapping[str, Sequence[PodAlloc]],
                 emitted: float) -> PodUsageReported | None:
        if self._pending is not None:
            then, held, allocs = self._pending
            self.usage.add(min(now - then, self.max_gap_s), held, allocs)
        window = math.floor(now / self.usage_window_s) * self.usage_window_s
        report = None
        if self._window is not None and window != self._window:
            report = self._report(self._window, emitted)
        self._window = window
        readings: dict[str, tuple[float | None, float | None]] = {}
        if allocations:
            for row, uuid in enumerate(frame.gpu_uuid):
                if allocations.get(uuid):
                    readings[uuid] = (frame.value("util_pct", row), frame.value("mem_used_mib", row))
        self._pending = (now, readings, dict(allocations))
        return report

    def _report(self, window_start: float, emitted: float) -> PodUsageReported | None:
        usage = self.usage.flush()
        if not usage:
            return None
        return PodUsageReported(source=self.source, emitted_at=emitted, cluster=self.cluster, node=self.node,
                                window_start=window_start, window_s=self.usage_window_s, usage=tuple(usage))

    def close(self, now: float) -> PodUsageReported | None:
        """Charge the last read (up to ``now``) and return the unfinished window's usage, if any."""
        if self._pending is not None:
            then, readings, allocs = self._pending
            self.usage.add(min(max(0.0, now - then), self.max_gap_s), readings, allocs)
            self._pending = None
        if self._window is None:
            return None
        return self._report(self._window, now)
