"""The GPU catalog: one record per GPU model, for placement, telemetry, the simulated fleet and the twin.

Why here, in the contract package, and not in ``gpuaware.gpu``: the catalog is data with no I/O,
and its readers sit on both sides of the layering. ``gpuaware.placement`` is pure (numpy, plus this
package) and must not import ``gpuaware.gpu``, whose package imports ``pynvml`` and
``prometheus_client`` (its ``__init__`` pulls in the NVML and dcgm-exporter backends). The records
reuse ``MigProfile`` from ``inventory``, so the MIG tables the agent announces and the ones the
simulator produces are the same objects. They are frozen dataclasses, not Structs: they never travel
on the wire (``GpuInfo`` does), and placement builds ad-hoc ones (``GpuModel("X")`` for a model it
has never heard of, or from a node's inventory).

One record holds what every reader needs:

* ``name``: the short name traces and node lists use (openb's ``V100M32``, ``A100``, ``T4``,
  ``G1``) and the catalog's key; ``nvml_name`` as ``nvmlDeviceGetName`` reports it; ``aliases``
  (``A100-80GB``, older drivers' names without the ``NVIDIA`` prefix). ``find_gpu_model`` takes any
  of them, also as node-label products (``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4``): case and
  spaces/dashes do not matter.
* ``memory_mib``: ONE figure per model, None when undisclosed (openb's G1/G2/G3).
* capability flags placement filters on (``tensor_cores``, ``fp8``, ``nvlink``, ``mig``; see
  ``CAPABILITIES``) and the physical envelope the simulated fleet needs (board power limit and idle
  draw, boost/idle SM clock, memory clock, compute capability, NVLink links, MIG profiles).

Memory figures, and where they come from. A driver of the R510 generation or later reports the whole
framebuffer as NVML's total (the reserved part shows separately: the dcgm-exporter sample's
FB_USED + FB_FREE + FB_RESERVED = 81,920 MiB on an A100 80GB); older drivers left the reserved part
out, which is where the FGD simulator's table (``MapGpuTypeMemoryMiB`` of
hkust-adsl/kubernetes-scheduler-simulator, the openb trace's companion) got 81,251 MiB for the same
A100, 15,109 for a T4 and 32,510 for a V100 32GB. The catalog uses what our telemetry agent reads
on a current driver, because placement takes a real node's memory from its inventory (which is that
figure) and the twin must look like a real node:

* A100 80GB 81,920, A100 40GB 40,960, H100 80GB HBM3 81,559: ``../shared/k8s/gpu-sharing/
  mig-profiles.yaml`` (``total_memory_mib``) and the GFD label sample (``nvidia.com/gpu.memory``).
* T4 15,360, V100 SXM2 32GB 32,768, L4 23,034: NVML totals on a current driver (as
  ``gpuaware.gpu`` has simulated them since it was written).
* every other model (P4, GTX 1080 Ti, RTX 2080 Ti, M40, P100, V100 16GB, A10, RTX 3090, K80): the
  FGD table (byte counts in its comments) or, for K80, the classic ``nvidia-smi`` reading, i.e. an
  older driver's figure, 250-700 MiB below what a current driver would say. No better public source
  was at hand; none of these is simulated with MIG, and openb pods ask no GPU memory, so the figure
  only bounds what a pod asking memory may take.

The placement evaluators' figures do not depend on these numbers (openb pods ask compute, not
memory; ``tests/sim`` and ``tests/placement`` pin the allocation figures).

Physical envelope: power limits, boost and memory clocks, compute capability and NVLink link counts
from NVIDIA's public spec sheets; MIG profiles from ``mig-profiles.json`` (NVIDIA MIG guide and
go-nvml mocks: ``memory_mib`` as NVML ``memorySizeMB``, ``profile_id`` as ``nvidia-smi mig -lgip``).
Idle draw and idle clock are measured for the A100 (the dcgm-exporter sample: 61 W, 210 MHz) and
typical idle ``nvidia-smi`` readings for the rest: good to tens of percent, which is all the
simulator's deliberately simple physics needs.

Undisclosed models (G1/G2/G3) carry no physics; ``stand_in`` names the disclosed model the simulated
fleet uses for them (``simulated_as``), so a twin of the openb cluster still produces telemetry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuaware.schemas.inventory import MigProfile

__all__ = [
    "CAPABILITIES",
    "GPU_CATALOG",
    "GpuModel",
    "find_gpu_model",
    "gpu_model",
    "simulated_as",
]

CAPABILITIES = frozenset({"tensor_cores", "fp8", "nvlink", "mig"})
"""Capabilities a pod may require of its GPUs (``GpuModel.has``)."""


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model. The first six fields are placement's view, in the order placement has always
    constructed them (``GpuModel(name, memory_mib, tensor_cores, fp8, nvlink, mig)``); the rest are
    the physical envelope, None or empty where unknown."""

    name: str
    """short name as traces and node lists use it (``A100``, ``V100M32``, ``G1``); the catalog key"""
    memory_mib: int | None = None
    """device memory, MiB; None when undisclosed"""
    tensor_cores: bool = False
    fp8: bool = False
    nvlink: bool = False
    """its usual board links GPUs over NVLink"""
    mig: bool = False
    nvml_name: str = ""
    """as ``nvmlDeviceGetName`` reports it; empty for an undisclosed model"""
    aliases: tuple[str, ...] = ()
    """other names that mean this model: short ones (``A100-80GB``), older drivers' NVML names"""
    compute_capability: str = ""
    power_limit_w: float | None = None
    """board power limit (TDP) in W"""
    idle_power_w: float | None = None
    sm_clock_max_mhz: int | None = None
    """boost SM clock"""
    sm_clock_idle_mhz: int | None = None
    mem_clock_mhz: int | None = None
    nvlink_links: int = 0
    """NVLink links per GPU on its usual board (0 = PCIe card)"""
    nvswitch: bool = False
    """every GPU of the board reaches every other over NVLink (one island per node)"""
    row_remapping: bool = False
    """Ampere and later remap rows; older GPUs retire pages instead"""
    slowdown_temp_c: float = 87.0
    """software thermal slowdown starts here; hardware slowdown 5 degrees above"""
    mig_profiles: tuple[MigProfile, ...] = field(default=(), repr=False)
    stand_in: str = ""
    """for a model without a physical envelope: the catalog model the simulated fleet uses instead"""

    def has(self, capability: str) -> bool:
        """Whether the model has one of ``CAPABILITIES``."""
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}; known: {', '.join(sorted(CAPABILITIES))}")
        return bool(getattr(self, capability))

    @property
    def simulatable(self) -> bool:
        """Whether the record has the whole physical envelope the simulated fleet needs."""
        return None not in (self.memory_mib, self.power_limit_w, self.idle_power_w, self.sm_clock_max_mhz,
                            self.sm_clock_idle_mhz, self.mem_clock_mhz) and bool(self.compute_capability)


def _mig(*rows: tuple[str, int, int, int, int]) -> tuple[MigProfile, ...]:
    """(name, profile id, compute slices, memory MiB, max instances) rows."""
    return tuple(
        MigProfile(name=n, profile_id=pid, slices=s, memory_mib=m, max_instances=k) for n, pid, s, m, k in rows
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


def _gpu(name: str, memory_mib: int | None, caps: str, nvml: str = "", *, aliases: tuple[str, ...] = (),
         cc: str = "", power_w: tuple[float, float] | None = None, sm_mhz: tuple[int, int] | None = None,
         mem_mhz: int | None = None, **more: object) -> GpuModel:  # fmt: skip
    """One row: ``caps`` is a space-separated subset of CAPABILITIES; power (limit, idle), SM (boost, idle)."""
    flags = set(caps.split())
    if flags - CAPABILITIES:
        raise ValueError(f"{name}: unknown capabilities {sorted(flags - CAPABILITIES)}")
    return GpuModel(
        name, memory_mib, "tensor_cores" in flags, "fp8" in flags, "nvlink" in flags, "mig" in flags,
        nvml_name=nvml, aliases=aliases, compute_capability=cc,
        power_limit_w=power_w[0] if power_w else None, idle_power_w=power_w[1] if power_w else None,
        sm_clock_max_mhz=sm_mhz[0] if sm_mhz else None, sm_clock_idle_mhz=sm_mhz[1] if sm_mhz else None,
        mem_clock_mhz=mem_mhz, **more,  # type: ignore[arg-type]  # more holds GpuModel's remaining keyword fields
    )  # fmt: skip


# name, memory MiB, capabilities, NVML name; then the physical envelope (see the module docstring).
GPU_CATALOG: dict[str, GpuModel] = {
    m.name: m
    for m in (
        _gpu("P4", 7611, "", "Tesla P4", cc="6.1", power_w=(75, 7), sm_mhz=(1531, 455), mem_mhz=3003),
        _gpu("1080", 11178, "", "NVIDIA GeForce GTX 1080 Ti", aliases=("GeForce GTX 1080 Ti",), cc="6.1",
             power_w=(250, 10), sm_mhz=(1582, 139), mem_mhz=5505),
        _gpu("2080", 11019, "tensor_cores", "NVIDIA GeForce RTX 2080 Ti", aliases=("GeForce RTX 2080 Ti",),
             cc="7.5", power_w=(250, 15), sm_mhz=(1545, 300), mem_mhz=7000),
        _gpu("M40", 11448, "", "Tesla M40", cc="5.2", power_w=(250, 16), sm_mhz=(1114, 405), mem_mhz=3004),
        _gpu("T4", 15360, "tensor_cores", "Tesla T4", cc="7.5", power_w=(70, 10), sm_mhz=(1590, 300),
             mem_mhz=5001, slowdown_temp_c=83.0),
        # placement has always treated openb's P100 as NVLink-capable (SXM2); FGD's label says PCIe
        _gpu("P100", 16280, "nvlink", "Tesla P100-SXM2-16GB", cc="6.0", power_w=(300, 28), sm_mhz=(1480, 405),
             mem_mhz=715, nvlink_links=4),
        _gpu("V100M16", 16160, "tensor_cores nvlink", "Tesla V100-SXM2-16GB", aliases=("V100-16GB",), cc="7.0",
             power_w=(300, 40), sm_mhz=(1530, 135), mem_mhz=877, nvlink_links=6),
        _gpu("V100M32", 32768, "tensor_cores nvlink", "Tesla V100-SXM2-32GB", aliases=("V100", "V100-32GB"),
             cc="7.0", power_w=(300, 40), sm_mhz=(1530, 135), mem_mhz=877, nvlink_links=6),
        _gpu("A10", 22731, "tensor_cores", "NVIDIA A10", cc="8.6", power_w=(150, 16), sm_mhz=(1695, 210),
             mem_mhz=6251, row_remapping=True),
        _gpu("3090", 24268, "tensor_cores", "NVIDIA GeForce RTX 3090", aliases=("GeForce RTX 3090",), cc="8.6",
             power_w=(350, 25), sm_mhz=(1695, 210), mem_mhz=9751, row_remapping=True),
        _gpu("A100", 81920, "tensor_cores nvlink mig", "NVIDIA A100-SXM4-80GB",
             aliases=("A100-80GB", "A100-SXM4-80GB"), cc="8.0", power_w=(400, 61), sm_mhz=(1410, 210),
             mem_mhz=1593, nvlink_links=12, nvswitch=True, row_remapping=True, mig_profiles=_A100_80_MIG),
        _gpu("A100-40GB", 40960, "tensor_cores nvlink mig", "NVIDIA A100-SXM4-40GB", aliases=("A100-SXM4-40GB",),
             cc="8.0", power_w=(400, 55), sm_mhz=(1410, 210), mem_mhz=1215, nvlink_links=12, nvswitch=True,
             row_remapping=True, mig_profiles=_A100_40_MIG),
        _gpu("H100", 81559, "tensor_cores fp8 nvlink mig", "NVIDIA H100 80GB HBM3", aliases=("H100-80GB",),
             cc="9.0", power_w=(700, 72), sm_mhz=(1980, 345), mem_mhz=2619, nvlink_links=18, nvswitch=True,
             row_remapping=True, mig_profiles=_H100_80_MIG),
        _gpu("L4", 23034, "tensor_cores fp8", "NVIDIA L4", cc="8.9", power_w=(72, 16), sm_mhz=(2040, 210),
             mem_mhz=6251, row_remapping=True, slowdown_temp_c=83.0),
        _gpu("K80", 11441, "", "Tesla K80", cc="3.7", power_w=(149, 26), sm_mhz=(875, 324), mem_mhz=2505),
        # openb's undisclosed types: memory unknown; simulated as the nearest plausible board
        _gpu("G1", None, "", stand_in="T4"),
        _gpu("G2", None, "", stand_in="V100M32"),
        _gpu("G3", None, "", stand_in="A100-40GB"),
    )
}  # fmt: skip
"""Short name -> record. Shared by every reader: never mutate it (build a new dict to vary it)."""


def _key(name: str) -> str:
    """Lookup key: case-insensitive, spaces and dashes alike (``Tesla-T4`` is ``Tesla T4``)."""
    return re.sub(r"[\s-]+", "-", name.strip().lower())


def _index() -> dict[str, GpuModel]:
    out: dict[str, GpuModel] = {}
    for m in GPU_CATALOG.values():
        for n in (m.name, m.nvml_name, *m.aliases):
            if not n:
                continue
            other = out.setdefault(_key(n), m)
            if other is not m:
                raise ValueError(f"GPU name {n!r} means both {other.name} and {m.name}")
    return out


_BY_NAME = _index()


def find_gpu_model(name: str) -> GpuModel | None:
    """The record for a short name, NVML name, alias or node-label product; None if unknown."""
    return GPU_CATALOG.get(name) or _BY_NAME.get(_key(name))


def gpu_model(name: str) -> GpuModel:
    """``find_gpu_model`` that raises ValueError naming the known models (a bad input: permanent)."""
    m = find_gpu_model(name)
    if m is None:
        raise ValueError(f"unknown GPU model {name!r}; known: {', '.join(sorted(GPU_CATALOG))} "
                         "(or their NVML names and aliases)")  # fmt: skip
    return m


def simulated_as(model: GpuModel) -> GpuModel:
    """The record whose physical envelope simulates ``model``: itself, or its stand-in. ValueError when
    neither has one (a model placement knows but nobody can simulate)."""
    if model.simulatable:
        return model
    stand_in = find_gpu_model(model.stand_in) if model.stand_in else None
    if stand_in is None or not stand_in.simulatable:
        raise ValueError(f"GPU model {model.name!r} has no physical envelope and no stand-in to simulate it with")
    return stand_in
