"""GPU events (XID, ECC, thermal, power) and how they are derived from consecutive samples.

Two sources, one type. NVML pushes XID and ECC events through an event set; the simulated fleet
schedules XID bursts. Everything else is a *change between two samples*: a throttle bit that turns
on (thermal slowdown, power cap), an ECC or remapped-row counter that grows, and for dcgm-exporter
the last-XID gauge taking a new value. ``FrameWatch`` computes those changes over whole frames with
numpy, so the same code serves one node and a 10,000-GPU fleet, and every backend reports a
thermal runaway the same way.

An event is a domain value, not a bus message: the node agent decides what to publish (an alert, a
health input, a forced inventory refresh after ``GPU_LOST``).
"""

from __future__ import annotations

from enum import StrEnum

import msgspec
import numpy as np

from gpuaware.gpu.frame import GpuFrame
from gpuaware.schemas import ThrottleReason

__all__ = [
    "APPLICATION_XIDS",
    "POWER_BITS",
    "THERMAL_BITS",
    "EventKind",
    "FrameWatch",
    "GpuEvent",
]

#: XIDs the NVIDIA device plugin treats as application errors (the GPU stays healthy);
#: every other critical XID marks the device unhealthy (k8s-device-plugin internal/rm/health.go)
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

THERMAL_BITS = ThrottleReason.SW_THERMAL_SLOWDOWN | ThrottleReason.HW_THERMAL_SLOWDOWN
POWER_BITS = ThrottleReason.SW_POWER_CAP | ThrottleReason.HW_POWER_BRAKE_SLOWDOWN


class EventKind(StrEnum):
    XID = "xid"
    """``code`` is the XID number"""
    ECC_CORRECTED = "ecc_corrected"
    """``code`` is how many new single-bit errors (1 per NVML event)"""
    ECC_UNCORRECTED = "ecc_uncorrected"
    """``code`` is how many new double-bit errors"""
    ROW_REMAP = "row_remap"
    """``code`` is how many rows were newly remapped (or a DRAM retirement event)"""
    THERMAL = "thermal"
    """thermal slowdown started; ``code`` is the throttle bits that turned on"""
    POWER = "power"
    """power capping / power brake started; ``code`` is the throttle bits that turned on"""
    GPU_LOST = "gpu_lost"
    """the GPU fell off the bus or needs a reset; refresh the inventory"""
    OTHER = "other"
    """an NVML event type without a finer kind; ``code`` is the NVML event type"""


class GpuEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Something happened to one GPU at ``at`` (Unix seconds)."""

    node: str
    gpu_uuid: str
    gpu_index: int
    kind: EventKind
    at: float
    code: int = 0
    gpu_instance_id: int | None = None
    """MIG GPU instance the event is scoped to; None = the whole GPU"""
    compute_instance_id: int | None = None
    detail: str = ""

    @property
    def application_error(self) -> bool:
        """An XID caused by the workload, not the hardware (the GPU is still healthy)."""
        return self.kind is EventKind.XID and self.code in APPLICATION_XIDS


class FrameWatch:
    """Turns the difference between consecutive frames of the same GPUs into events.

    The first frame (and any frame whose GPU list changed) is a baseline and yields nothing: a
    last-XID gauge already non-zero at start, or ECC counts accumulated before the agent started,
    are history that the sample columns carry, not news. Counters that go down (driver reload,
    volatile counts reset) re-baseline silently.
    """

    def __init__(self, *, xid: bool = False, ecc: bool = True, remap: bool = True, throttle: bool = True):
        self._xid, self._ecc, self._remap, self._throttle = xid, ecc, remap, throttle
        self._prev: GpuFrame | None = None

    def update(self, frame: GpuFrame) -> list[GpuEvent]:
        prev, self._prev = self._prev, frame
        if prev is None or prev.gpu_uuid != frame.gpu_uuid:
            return []
        events: list[GpuEvent] = []
        if self._throttle:
            cur, old = frame.column("throttle_reasons"), prev.column("throttle_reasons")
            new = np.where((cur >= 0) & (old >= 0), cur & ~old, 0)
            events += self._emit(frame, new & THERMAL_BITS, EventKind.THERMAL)
            events += self._emit(frame, new & POWER_BITS, EventKind.POWER)
        if self._ecc:
            for kind, names in (
                (EventKind.ECC_UNCORRECTED, ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate")),
                (EventKind.ECC_CORRECTED, ("ecc_corrected_volatile", "ecc_corrected_aggregate")),
            ):
                events += self._emit(frame, self._growth(prev, frame, names), kind)
        if self._remap:
            grow = self._growth(prev, frame, ("remapped_rows_uncorrectable",)) + self._growth(
                prev, frame, ("remapped_rows_correctable",)
            )
            events += self._emit(frame, grow, EventKind.ROW_REMAP)
        if self._xid:
            cur, old = frame.column("xid_last"), prev.column("xid_last")
            events += self._emit(frame, np.where((cur > 0) & (cur != old), cur, 0), EventKind.XID)
        return events

    @staticmethod
    def _growth(prev: GpuFrame, frame: GpuFrame, names: tuple[str, ...]) -> np.ndarray:
        """Per GPU: how much the first available counter of ``names`` grew (0 if not comparable)."""
        out = np.zeros(len(frame), dtype=np.int64)
        done = np.zeros(len(frame), dtype=bool)
        for name in names:
            cur, old = frame.column(name), prev.column(name)
            ok = (cur >= 0) & (old >= 0) & ~done
            out = np.where(ok & (cur > old), cur - old, out)
            done |= ok
        return out

    @staticmethod
    def _emit(frame: GpuFrame, codes: np.ndarray, kind: EventKind) -> list[GpuEvent]:
        rows = np.flatnonzero(codes)
        return [
            GpuEvent(
                node=frame.node_of(int(r)),
                gpu_uuid=frame.gpu_uuid[r],
                gpu_index=int(frame.gpu_index[r]),
                kind=kind,
                at=frame.sampled_at,
                code=int(codes[r]),
            )
            for r in rows
        ]
