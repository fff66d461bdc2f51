"""Adaptive sampling: read every GPU every second, send a GPU's row only when it is news.

The agent *reads* the backend at the fast rate (an NVML read costs microseconds, so this is what
makes "back to fast at once on a change" possible) and *sends* per GPU:

* at once when a metric moved beyond its deadband since the row last sent (gauges), when any
  counter, bitmask or limit changed at all (ECC, XID, throttle reasons, power limit...), when a
  value appeared or vanished, or when a new anomaly flag came up; the GPU's heartbeat interval
  drops back to ``fast_s``;
* otherwise when its heartbeat is due; each heartbeat sent while nothing moves multiplies the
  interval by ``backoff``, up to ``slow_s``: 1, 2, 4, 8, 16, 30, 30 ... seconds.

On a stable GPU that is 14 rows in 5 minutes instead of 300, while a step change is sent on the
first read after it (within ``fast_s``). Deadbands are compared with the last *sent* value, not the
last read, so a slow drift is sent once it adds up to a deadband. ``AdaptivePolicy.fixed(1.0)`` is
the fixed-rate baseline (every GPU every read).

Sample configuration (agent settings)::

    GPUAWARE_TELEMETRY_AGENT_FAST_S=1.0
    GPUAWARE_TELEMETRY_AGENT_SLOW_S=30.0
    GPUAWARE_TELEMETRY_AGENT_UTIL_DEADBAND_PCT=10
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuaware.gpu import COLUMNS, GpuFrame

__all__ = ["AdaptivePolicy", "AdaptiveSampler", "Deadbands", "Decision", "SendReason"]


@dataclass(frozen=True, slots=True)
class Deadbands:
    """How far a gauge may move from its last sent value before it is news.

    Defaults sit well above the read-to-read noise of a steady GPU (NVML utilisation jitters by a few
    points, power by a few watts), so a stable GPU backs off instead of being woken by noise.
    """

    util_pct: float = 10.0
    """percentage points, for ``util_pct``, ``mem_util_pct`` and ``tensor_active_pct``"""
    temperature_c: float = 5.0
    """degrees, for GPU and memory temperature"""
    mem_used_frac: float = 0.05
    """fraction of ``mem_total_mib`` (4 GiB of an 80 GB GPU)"""
    power_frac: float = 0.10
    """fraction of ``power_limit_w`` (40 W of a 400 W board)"""
    clock_frac: float = 0.10
    """fraction of the last sent clock (SM and memory)"""


#: gauges compared with a deadband; every other metric column is compared exactly
_ABS = {"util_pct": "util_pct", "mem_util_pct": "util_pct", "tensor_active_pct": "util_pct",
        "temperature_c": "temperature_c", "mem_temperature_c": "temperature_c"}
_OF = {"mem_used_mib": ("mem_total_mib", "mem_used_frac"), "power_w": ("power_limit_w", "power_frac")}
_REL = {"sm_clock_mhz": "clock_frac", "mem_clock_mhz": "clock_frac"}


@dataclass(frozen=True, slots=True)
class AdaptivePolicy:
    fast_s: float = 1.0
    """read period, and the send rate while a GPU's metrics move"""
    slow_s: float = 30.0
    """longest heartbeat of a stable GPU"""
    backoff: float = 2.0
    """heartbeat interval multiplier after each heartbeat sent while stable"""
    deadbands: Deadbands = field(default_factory=Deadbands)

    def __post_init__(self) -> None:
        if not 0 < self.fast_s <= self.slow_s:
            raise ValueError(f"need 0 < fast_s <= slow_s, got fast_s={self.fast_s}, slow_s={self.slow_s}")
        if self.backoff < 1:
            raise ValueError(f"backoff must be >= 1, got {self.backoff}")

    @classmethod
    def fixed(cls, period_s: float = 1.0) -> AdaptivePolicy:
        """Every GPU at every read: the baseline adaptive sampling is measured against."""
        return cls(fast_s=period_s, slow_s=period_s, backoff=1.0)


class SendReason:
    """Why a row was sent (per GPU in ``Decision.reasons``); 0 = not sent."""

    NONE = 0
    FIRST = 1
    CHANGED = 2
    FLAGGED = 3
    HEARTBEAT = 4


@dataclass(frozen=True, slots=True)
class Decision:
    send: np.ndarray
    """bool per GPU row of the frame"""
    reasons: np.ndarray
    """``SendReason`` per GPU row"""
    interval_s: float
    """the longest heartbeat interval among the GPUs sent (what ``GpuSampled.interval_s`` carries)"""

    @property
    def any(self) -> bool:
        return bool(self.send.any())


def _missing(name: str, col: np.ndarray) -> np.ndarray:
    return np.isnan(col) if COLUMNS[name].kind == "f" else col < 0


class AdaptiveSampler:
    """Per-GPU send decisions for the GPUs of one node, read after read (see the module docstring)."""

    def __init__(self, policy: AdaptivePolicy | None = None) -> None:
        self.policy = policy or AdaptivePolicy()
        self._uuids: tuple[str, ...] | None = None
        self._last: dict[str, np.ndarray] = {}
        self._flags = np.zeros(0, dtype=np.int64)
        self._sent_at = np.zeros(0)
        self._interval = np.zeros(0)

    def _reset(self, frame: GpuFrame) -> None:
        n = len(frame)
        self._uuids = frame.gpu_uuid
        self._last = {}
        self._flags = np.zeros(n, dtype=np.int64)
        self._sent_at = np.full(n, -np.inf)
        self._interval = np.full(n, self.policy.fast_s)

    def changed(self, frame: GpuFrame) -> np.ndarray:
        """Per GPU: did any metric move beyond its deadband since the row last sent?"""
        bands = self.policy.deadbands
        out = np.zeros(len(frame), dtype=bool)
        for name, spec in COLUMNS.items():
            cur, old = frame.column(name), self._last[name]
            cur_missing, old_missing = _missing(name, cur), _missing(name, old)
            moved = cur_missing != old_missing
            both = ~cur_missing & ~old_missing
            if name in _ABS:
                band: float | np.ndarray = getattr(bands, _ABS[name])
            elif name in _OF:
                ref, frac = _OF[name]
                scale = frame.column(ref).astype(np.float64)
                band = np.where(_missing(ref, frame.column(ref)), np.inf, scale * getattr(bands, frac))
            elif name in _REL:
                band = np.abs(old.astype(np.float64)) * getattr(bands, _REL[name])
            else:
                moved |= both & (cur != old)
                out |= moved
                continue
            if spec.kind == "f":
                diff = np.abs(np.where(both, cur - old, 0.0))
            else:
                diff = np.abs(np.where(both, cur, 0) - np.where(both, old, 0)).astype(np.float64)
            moved |= both & (diff > band)
            out |= moved
        return out

    def decide(self, frame: GpuFrame, now: float, flags: np.ndarray | None = None) -> Decision:
        """Which GPU rows of ``frame`` (read at ``now``) to send; updates the state as if they were sent."""
        p = self.policy
        n = len(frame)
        flags = np.zeros(n, dtype=np.int64) if flags is None else np.asarray(flags, dtype=np.int64)
        if self._uuids != frame.gpu_uuid:
            self._reset(frame)
        reasons = np.zeros(n, dtype=np.int8)
        first = ~np.isfinite(self._sent_at)
        reasons[first] = SendReason.FIRST
        if self._last:
            changed = self.changed(frame) & ~first
            reasons[changed] = SendReason.CHANGED
            flagged = ((flags & ~self._flags) != 0) & (reasons == 0)
            reasons[flagged] = SendReason.FLAGGED
        # a read may come a little early; half a read period of slack keeps heartbeats on schedule
        due = (now - self._sent_at >= self._interval - 0.5 * p.fast_s) & (reasons == 0)
        reasons[due] = SendReason.HEARTBEAT
        send = reasons != 0
        news = (reasons == SendReason.FIRST) | (reasons == SendReason.CHANGED) | (reasons == SendReason.FLAGGED)
        self._interval = np.where(news, p.fast_s,
                                  np.where(reasons == SendReason.HEARTBEAT,
                                           np.minimum(p.slow_s, self._interval * p.backoff), self._interval))
        self._sent_at = np.where(send, now, self._sent_at)
        self._flags = np.where(send, flags, self._flags)
        if not self._last:
            self._last = {name: frame.column(name).copy() for name in COLUMNS}
        else:
            for name in COLUMNS:
                self._last[name] = np.where(send, frame.column(name), self._last[name])
        interval = float(self._interval[send].max()) if send.any() else p.fast_s
        return Decision(send=send, reasons=reasons, interval_s=interval)
