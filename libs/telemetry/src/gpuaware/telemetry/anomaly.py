"""Anomaly flags computed at the edge, from every read and every backend event.

The agent sees each GPU every second even when it sends a row every 30; flags are how what it saw
in between reaches the bus. Two kinds of evidence, OR-ed into ``gpuaware.schemas.Anomaly`` bits:

* **levels** read off the current frame: thermal or power throttle bits set, framebuffer nearly
  full, a remap pending, fewer NVLink links up than the most seen;
* **changes** since the previous read: ECC counters, remapped rows / retired pages, PCIe replays
  that grew; plus the backend's events (XID split into critical and application errors, GPU lost,
  NVML's ECC events).

A new flag makes the adaptive sampler send the GPU's row at once, so a one-read pulse (an XID) is
never lost between heartbeats. Counters that go down (driver reload) re-baseline silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuaware.gpu import EventKind, GpuEvent, GpuFrame
from gpuaware.schemas import Anomaly, ThrottleReason

__all__ = ["AnomalyDetector", "flag_names"]

_THERMAL = ThrottleReason.SW_THERMAL_SLOWDOWN | ThrottleReason.HW_THERMAL_SLOWDOWN
_POWER = ThrottleReason.SW_POWER_CAP | ThrottleReason.HW_POWER_BRAKE_SLOWDOWN
_GROWTH = (
    (Anomaly.ECC_UNCORRECTED, ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate")),
    (Anomaly.ECC_CORRECTED, ("ecc_corrected_volatile", "ecc_corrected_aggregate")),
    (Anomaly.ROW_REMAP, ("remapped_rows_uncorrectable", "remapped_rows_correctable", "retired_pages")),
    (Anomaly.PCIE_REPLAY, ("pcie_replay",)),
)
_EVENT_FLAGS = {
    EventKind.ECC_UNCORRECTED: Anomaly.ECC_UNCORRECTED,
    EventKind.ECC_CORRECTED: Anomaly.ECC_CORRECTED,
    EventKind.ROW_REMAP: Anomaly.ROW_REMAP,
    EventKind.THERMAL: Anomaly.THERMAL,
    EventKind.POWER: Anomaly.POWER_CAPPED,
    EventKind.GPU_LOST: Anomaly.GPU_LOST,
}


def flag_names(flags: int) -> list[str]:
    """``0x21`` -> ``["THERMAL", "XID"]`` (for logs and tests)."""
    return [name for name, bit in vars(Anomaly).items() if name.isupper() and flags & bit]


class AnomalyDetector:
    """Flags per GPU row of one node's frames, read after read."""

    def __init__(self, *, memory_full_frac: float = 0.95) -> None:
        self.memory_full_frac = memory_full_frac
        self._prev: GpuFrame | None = None
        self._nvlink_max: np.ndarray | None = None

    def update(self, frame: GpuFrame, events: Sequence[GpuEvent] = ()) -> np.ndarray:
        n = len(frame)
        flags = np.zeros(n, dtype=np.int64)
        throttle = frame.column("throttle_reasons")
        known = throttle >= 0
        flags |= np.where(known & ((throttle & _THERMAL) != 0), Anomaly.THERMAL, 0)
        flags |= np.where(known & ((throttle & _POWER) != 0), Anomaly.POWER_CAPPED, 0)
        used, total = frame.column("mem_used_mib"), frame.column("mem_total_mib")
        full = (used >= 0) & (total > 0) & (used >= self.memory_full_frac * np.maximum(total, 1))
        flags |= np.where(full, Anomaly.MEMORY_FULL, 0)
        flags |= np.where(frame.column("row_remap_pending") == 1, Anomaly.ROW_REMAP, 0)

        nvlink = frame.column("nvlink_up")
        prev = self._prev if self._prev is not None and self._prev.gpu_uuid == frame.gpu_uuid else None
        if prev is None or self._nvlink_max is None:
            self._nvlink_max = nvlink.copy()
        else:
            flags |= np.where((nvlink >= 0) & (nvlink < self._nvlink_max), Anomaly.NVLINK_DOWN, 0)
            self._nvlink_max = np.maximum(self._nvlink_max, nvlink)
            for bit, names in _GROWTH:
                for name in names:
                    cur, old = frame.column(name), prev.column(name)
                    flags |= np.where((cur >= 0) & (old >= 0) & (cur > old), bit, 0)
        self._prev = frame

        if events:
            row_of = {u: i for i, u in enumerate(frame.gpu_uuid)}
            for ev in events:
                row = row_of.get(ev.gpu_uuid)
                if row is None:
                    continue
                if ev.kind is EventKind.XID:
                    flags[row] |= Anomaly.XID_APPLICATION if ev.application_error else Anomaly.XID
                elif ev.kind in _EVENT_FLAGS:
                    flags[row] |= _EVENT_FLAGS[ev.kind]
        return flags
