"""What the simulated fleet (and the DCGM backend, which is not told) needs to know about GPU models.

Each entry is the physical envelope a real board shows: the memory NVML reports, board power limit
and idle draw, boost/idle SM clock, memory clock, NVLink links per GPU, compute capability, and the
MIG GPU-instance profiles. MIG numbers come from ``../shared/k8s/gpu-sharing/mig-profiles.json``
(NVIDIA MIG guide + go-nvml mocks: ``memory_mib`` as NVML ``memorySizeMB``, ``profile_id`` as the
``nvidia-smi mig -lgip`` ID); power and clocks from the public spec sheets, and the idle values are
what the dcgm-exporter sample shows for an idle A100 (61 W, 210 MHz).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuaware.schemas import MigProfile

__all__ = ["MODELS", "GpuModel", "mig_compute_slices", "model"]


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    """as NVML names it (``nvmlDeviceGetName``)"""
    memory_mib: int
    power_limit_w: float
    idle_power_w: float
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    mem_clock_mhz: int
    compute_capability: str
    nvlink_links: int = 0
    """NVLink links per GPU on its usual board (0 = PCIe card)"""
    nvswitch: bool = False
    """every GPU of the board reaches every other over NVLink (one island per node)"""
    tensor_cores: bool = True
    fp8: bool = False
    row_remapping: bool = True
    """Ampere and later remap rows; older GPUs retire pages instead"""
    slowdown_temp_c: float = 87.0
    """software thermal slowdown starts here; hardware slowdown 5 degrees above"""
    mig_profiles: tuple[MigProfile, ...] = ()


def _mig(*rows: tuple[str, int, int, int, int]) -> tuple[MigProfile, ...]:
    return tuple(
        MigProfile(name=n, profile_id=pid, slices=s, memory_mib=m, max_instances=k)
        for n, pid, s, m, k in rows
    )


_A100_80_MIG = _mig(
    ("1g.10gb", 19, 1, 9856, 7),
    ("1g.10gb+me", 20, 1, 9856, 1),
    ("1g.20gb", 15, 1, 19968, 4),
    ("2g.20gb", 14, 2, 19968, 3),
    ("3g.40gb", 9, 3, 40192, 2),
    ("4g.40gb", 5, 4, 40192, 1),
    ("7g.80gb", 0, 7, 80384, 1),
)
_A100_40_MIG = _mig(
    ("1g.5gb", 19, 1, 4864, 7),
    ("1g.5gb+me", 20, 1, 4864, 1),
    ("1g.10gb", 15, 1, 9856, 4),
    ("2g.10gb", 14, 2, 9856, 3),
    ("3g.20gb", 9, 3, 19968, 2),
    ("4g.20gb", 5, 4, 19968, 1),
    ("7g.40gb", 0, 7, 40192, 1),
)
_H100_80_MIG = _mig(
    ("1g.10gb", 19, 1, 9984, 7),
    ("1g.10gb+me", 20, 1, 9984, 1),
    ("1g.20gb", 15, 1, 20096, 4),
    ("2g.20gb", 14, 2, 20096, 3),
    ("3g.40gb", 9, 3, 40448, 2),
    ("4g.40gb", 5, 4, 40448, 1),
    ("7g.80gb", 0, 7, 81152, 1),
)


def _entry(name: str, memory_mib: int, power_w: float, idle_w: float, sm_mhz: tuple[int, int], mem_mhz: int,
           cc: str, **more: object) -> GpuModel:  # fmt: skip
    return GpuModel(name, memory_mib, power_w, idle_w, sm_mhz[0], sm_mhz[1], mem_mhz, cc, **more)  # type: ignore[arg-type]


MODELS: Mapping[str, GpuModel] = {
    m.name: m
    for m in (
        _entry("NVIDIA A100-SXM4-80GB", 81920, 400, 61, (1410, 210), 1593, "8.0",
               nvlink_links=12, nvswitch=True, mig_profiles=_A100_80_MIG),
        _entry("NVIDIA A100-SXM4-40GB", 40960, 400, 55, (1410, 210), 1215, "8.0",
               nvlink_links=12, nvswitch=True, mig_profiles=_A100_40_MIG),
        _entry("NVIDIA H100 80GB HBM3", 81559, 700, 72, (1980, 345), 2619, "9.0",
               nvlink_links=18, nvswitch=True, fp8=True, mig_profiles=_H100_80_MIG),
        _entry("NVIDIA L4", 23034, 72, 16, (2040, 210), 6251, "8.9", fp8=True, slowdown_temp_c=83.0),
        _entry("Tesla T4", 15360, 70, 10, (1590, 300), 5001, "7.5", row_remapping=False, slowdown_temp_c=83.0),
        _entry("Tesla V100-SXM2-32GB", 32768, 300, 40, (1530, 135), 877, "7.0",
               nvlink_links=6, row_remapping=False),
    )
}  # fmt: skip

_ALIASES = {
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "A100": "NVIDIA A100-SXM4-80GB",
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H100": "NVIDIA H100 80GB HBM3",
    "L4": "NVIDIA L4",
    "T4": "Tesla T4",
    "V100-32GB": "Tesla V100-SXM2-32GB",
    "V100": "Tesla V100-SXM2-32GB",
}


def model(name: str) -> GpuModel:
    """A catalog entry by NVML name or short alias (``A100-80GB``, ``H100``, ``L4``, ``T4``...)."""
    key = _ALIASES.get(name, name)
    try:
        return MODELS[key]
    except KeyError:
        known = sorted({*MODELS, *_ALIASES})
        raise ValueError(f"unknown GPU model {name!r}; known: {', '.join(known)}") from None


_SLICES = re.compile(r"^(\d+)g\.")


def mig_compute_slices(profile: str) -> int | None:
    """``3g.40gb`` -> 3 (of the 7 compute slices of an A100/H100); None if not a MIG profile name."""
    m = _SLICES.match(profile)
    return int(m.group(1)) if m else None
