"""Windows the collector closes and the ``GpuRolledUp`` messages it publishes for them.

Which windows are closed is decided on *event time*: the newest ``sampled_at`` the collector has
stored (its watermark) minus a grace period that covers the slowest heartbeat and the pipeline's
lag. Wall-clock time would publish empty windows while a backlog drains after an outage, and
nothing at all for a replayed or simulated day. ``WindowClock`` remembers the last window
published, so each closes once per collector (several collectors publish the same message id, so
the stream keeps one).

The statistics themselves come from the database (time-weighted, see tsdb migration 0008); this
module only shapes them into the contract: ``Stats`` need mean <= max and p95 <= max, which float
rounding of a weighted mean may break by an ulp, so both are clamped to the max.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaware.schemas import GpuRolledUp, GpuRollup, RollupWindow, Stats

__all__ = ["WIDTH_S", "WindowClock", "rollup_messages", "rollup_msg_id"]

WIDTH_S = {RollupWindow.MINUTE: 60.0, RollupWindow.HOUR: 3600.0}


class WindowClock:
    """Closed windows of one width, from an event-time watermark."""

    def __init__(self, width_s: float, grace_s: float) -> None:
        if width_s <= 0 or grace_s < 0:
            raise ValueError("width must be positive and grace non-negative")
        self.width_s = width_s
        self.grace_s = grace_s
        self.last_start: float | None = None
        """start of the last window returned by ``due``"""

    def due(self, watermark: float, *, max_windows: int = 60) -> list[float]:
        """Starts of the windows closed by ``watermark`` and not returned before, oldest first.

        The first call returns only the latest closed window (a restarted collector does not
        republish history); at most ``max_windows`` are returned at once (a long gap)."""
        closed_end = math.floor((watermark - self.grace_s) / self.width_s) * self.width_s
        latest = closed_end - self.width_s
        if not math.isfinite(latest) or latest < 0:
            return []
        if self.last_start is None:
            starts = [latest]
        else:
            k = round((latest - self.last_start) / self.width_s)
            starts = [self.last_start + (i + 1) * self.width_s for i in range(max(0, k))][-max_windows:]
        if starts:
            self.last_start = starts[-1]
        return starts


def rollup_msg_id(window: RollupWindow, node: str, window_start: float) -> str:
    """Deterministic message id: every collector publishing the same window publishes it once."""
    return f"rollup/{window.value}/{node}/{int(window_start)}"


def _stats(mean: float | None, mx: float | None, p95: float | None) -> Stats | None:
    if mx is None or mean is None:
        return None
    p = mx if p95 is None else p95
    return Stats(mean=min(float(mean), float(mx)), max=float(mx), p95=min(float(p), float(mx)))


def rollup_messages(rows: Iterable[Any], *, window: RollupWindow, window_start: float,
                    gpu_index: Mapping[str, int], source: str, emitted_at: float,
                    cluster: str = "default") -> list[GpuRolledUp]:
    """One ``GpuRolledUp`` per node from ``gpuaware.tsdb.WindowRollup`` rows (GPUs without a known
    index are given 0: they were stored before their inventory was)."""
    by_node: dict[str, list[GpuRollup]] = {}
    for r in rows:
        if r.samples < 1:
            continue
        by_node.setdefault(r.node, []).append(GpuRollup(
            gpu_uuid=r.gpu_uuid, gpu_index=gpu_index.get(r.gpu_uuid, 0), samples=int(r.samples),
            util_pct=_stats(r.util_mean, r.util_max, r.util_p95),
            mem_util_pct=_stats(r.mem_util_mean, r.mem_util_max, r.mem_util_p95),
            mem_used_mib=_stats(r.mem_used_mean, r.mem_used_max, r.mem_used_p95),
            temperature_c=_stats(r.temp_mean, r.temp_max, r.temp_p95),
            power_w=_stats(r.power_mean, r.power_max, r.power_p95),
            tensor_active_pct=_stats(r.tensor_mean, r.tensor_max, r.tensor_p95),
            throttled_pct=None if r.throttled_pct is None else min(100.0, max(0.0, float(r.throttled_pct))),
            ecc_uncorrected_delta=int(r.ecc_uncorrected_delta or 0),
            remapped_rows_delta=int(r.remapped_rows_delta or 0),
            pcie_replay_delta=int(r.pcie_replay_delta or 0),
            xid_last=r.xid_last if r.xid_last else None,
            anomaly_flags=int(r.anomaly_flags or 0)))
    return [GpuRolledUp(source=source, emitted_at=emitted_at, cluster=cluster, node=node, window=window,
                        window_start=window_start, gpus=tuple(gpus))
            for node, gpus in sorted(by_node.items())]
