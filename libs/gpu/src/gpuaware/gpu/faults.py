"""Faults the simulated fleet can be told to develop, each a pure function of time.

A fault names its GPU (UUID, ``(node, index)`` or the fleet-wide row number) and a start time; what
it does at any instant follows from the elapsed time alone, never from how often the fleet was
sampled, so a replay at another sampling rate sees the same counters and temperatures. When a GPU
gets a second fault of the same kind, the later injection replaces the earlier one (XID bursts
add up instead).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EccErrorGrowth", "Fault", "GpuRef", "PowerCap", "ThermalRunaway", "XidBurst"]

GpuRef = str | int | tuple[str, int]


@dataclass(frozen=True, slots=True)
class EccErrorGrowth:
    """ECC counters grow linearly from ``start``; uncorrected errors also remap rows (Ampere+) or
    retire pages (older GPUs) and raise ECC/row-remap events as the counters move."""

    gpu: GpuRef
    start: float
    corrected_per_hour: float = 0.0
    uncorrected_per_hour: float = 0.0


@dataclass(frozen=True, slots=True)
class XidBurst:
    """``count`` critical XIDs ``interval_s`` apart from ``start`` (79 = fallen off the bus,
    48 = double-bit ECC, 13/31/43 = application errors)."""

    gpu: GpuRef
    start: float
    xid: int = 79
    count: int = 3
    interval_s: float = 1.0


@dataclass(frozen=True, slots=True)
class ThermalRunaway:
    """Temperature climbs ``degrees_per_minute`` from ``start`` (for ``duration_s``, then the cooling
    recovers); past the model's slowdown temperature the thermal throttle bits are set and the SM
    clock drops."""

    gpu: GpuRef
    start: float
    degrees_per_minute: float = 3.0
    duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class PowerCap:
    """The enforced power limit drops to ``cap_w`` from ``start`` (for ``duration_s``): draw is held
    under the cap, the SW power-cap bit is set while demand exceeds it and the SM clock scales down."""

    gpu: GpuRef
    start: float
    cap_w: float
    duration_s: float | None = None


Fault = EccErrorGrowth | XidBurst | ThermalRunaway | PowerCap
