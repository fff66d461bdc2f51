"""NVML backend over ``nvidia-ml-py`` (``import pynvml``): the direct view of a node's GPUs.

Every NVML call goes through ``pynvml.<function>`` looked up at call time, so tests replace single
functions (``monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", ...)``) and nothing here
needs a GPU. Units follow ``../shared/k8s/telemetry.md``: memory in bytes (-> MiB), power in
milliwatts (-> W), clocks in MHz, temperatures in degrees C.

What a call's failure means decides what happens:

* Not available here (``NotSupported``, ``NoPermission``, ``FunctionNotFound``, ``NotFound``,
  ``InvalidArgument``, ``NoData``): the value is ``None`` for that GPU, e.g. ECC on a consumer board,
  utilisation on a MIG-enabled GPU, retired pages on an A100 (it remaps rows instead).
* The GPU is gone (``GpuIsLost``, ``ResetRequired``): its row is all ``None`` from then on and a
  ``GPU_LOST`` event is raised once; the agent re-announces the inventory.
* NVML itself is gone (``Uninitialized``, ``DriverNotLoaded``, ``LibraryNotFound``, RM version
  mismatch): ``GpuBackendUnavailable``.
* Anything else (``Unknown``...): ``None`` for that value and a count in ``NvmlBackend.errors`` so
  the agent can export it; never silently.

XID and ECC events come from an NVML event set (``nvmlEventSetCreate`` /
``nvmlDeviceRegisterEvents`` / ``nvmlEventSetWait``): for ``nvmlEventTypeXidCriticalError``
``eventData`` is the XID number. Thermal and power-cap events are derived from the clock-event
reasons bitmask between samples (``FrameWatch``), because NVML has no event for them.

Topology: ``nvmlDeviceGetTopologyCommonAncestor`` gives the PCIe level of every GPU pair; NVLink is
not a level, so links come from each GPU's active NVLinks and their remote PCI bus ids (a GPU peer)
or remote device type (``SWITCH`` on NVSwitch boards, confirmed by ``nvmlDeviceGetP2PStatus`` with
``NVML_P2P_CAPS_INDEX_NVLINK``). Both feed ``Topology.from_nvml``, which yields the same islands as
parsing ``nvidia-smi topo -m``.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuaware.gpu.backend import Clock, system_clock
from gpuaware.gpu.errors import GpuBackendError, GpuBackendUnavailable
from gpuaware.gpu.events import EventKind, FrameWatch, GpuEvent
from gpuaware.gpu.frame import COLUMNS, GpuFrame
from gpuaware.gpu.topology import Topology
from gpuaware.schemas import GpuInfo, MigInstance, MigMode, MigProfile, NodeInventory

__all__ = ["DEFAULT_EVENT_MASK", "NvmlBackend", "format_cpu_list"]

log = logging.getLogger(__name__)

MIB = 1024 * 1024
NOT_MIG_SCOPED = 0xFFFFFFFF
_MIG_PROFILE = re.compile(r"\d+g\.\d+gb(?:\+[a-z]+)*")


def _errors(*names: str) -> tuple[type[Exception], ...]:
    return tuple(getattr(pynvml, f"NVMLError_{n}") for n in names if hasattr(pynvml, f"NVMLError_{n}"))


_ABSENT = _errors("NotSupported", "NoPermission", "FunctionNotFound", "NotFound", "InvalidArgument", "NoData")
_LOST = _errors("GpuIsLost", "ResetRequired")
_GONE = _errors("Uninitialized", "DriverNotLoaded", "LibraryNotFound", "LibRmVersionMismatch")


def _event_bit(name: str) -> int:
    return int(getattr(pynvml, name, 0))


XID = _event_bit("nvmlEventTypeXidCriticalError")
SBE = _event_bit("nvmlEventTypeSingleBitEccError")
DBE = _event_bit("nvmlEventTypeDoubleBitEccError")
_REMAP = _event_bit("nvmlEventTypeDramRetirementEvent") | _event_bit("nvmlEventTypeDramRetirementFailure")
_UNAVAILABLE = _event_bit("nvmlEventTypeGpuUnavailableError")
#: events registered by default: XIDs, ECC, DRAM retirement, poison and GPU-unavailable errors
#: (not PState/Clock changes, which the samples already carry and which fire constantly)
DEFAULT_EVENT_MASK = (
    XID
    | SBE
    | DBE
    | _REMAP
    | _UNAVAILABLE
    | _event_bit("nvmlEventTypeNonFatalPoisonError")
    | _event_bit("nvmlEventTypeFatalPoisonError")
)
_MAX_DRAIN = 256


def format_cpu_list(cpus: set[int] | frozenset[int]) -> str:
    """{0, 1, 2, 5} -> ``"0-2,5"`` (the ``nvidia-smi topo -m`` CPU Affinity format)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _bus_key(bus_id: str | None) -> tuple[int, ...] | None:
    """``00000000:07:00.0`` and ``0000:07:00.0`` name the same device."""
    if not bus_id:
        return None
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)$", bus_id.strip())
    return tuple(int(x, 16) for x in m.groups()) if m else None


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any
    uuid: str
    name: str
    bus_id: str
    memory_mib: int
    link_count: int
    lost: bool = False
    xid_last: int = 0
    mig_uuids: dict[str, int] = field(default_factory=dict)


class NvmlBackend:
    """A ``GpuBackend`` over NVML for the node this process runs on."""

    def __init__(
        self,
        node: str | None = None,
        *,
        emitter: str | None = None,
        clock: Clock = system_clock,
        event_mask: int = DEFAULT_EVENT_MASK,
    ) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise GpuBackendUnavailable(
                "NVML is not available: nvmlInit() raised NVMLError_LibraryNotFound (libnvidia-ml.so.1 "
                "not found), so this machine has no NVIDIA driver or the container does not mount it. "
                "Use the simulated backend (SimulatedFleet) or scrape a dcgm-exporter "
                "(DcgmExporterBackend) instead."
            ) from exc
        except pynvml.NVMLError as exc:
            raise GpuBackendUnavailable(
                f"NVML is not available: nvmlInit() failed with {type(exc).__name__} ({exc}). "
                "Use the simulated backend (SimulatedFleet) or scrape a dcgm-exporter (DcgmExporterBackend)."
            ) from exc
        self._open = True
        self._clock = clock
        self.node = node or os.uname().nodename
        self._emitter = emitter or f"agent/{self.node}"
        self.errors: Counter[str] = Counter()
        """unexpected NVML errors per function name (exported by the agent)"""
        self._pending: list[GpuEvent] = []
        try:
            count = self._call(pynvml.nvmlDeviceGetCount) or 0
            self._gpus = [self._describe(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self._call(pynvml.nvmlShutdown)
            raise GpuBackendError(f"enumerating GPUs failed ({type(exc).__name__}: {exc}); retry") from exc
        self._by_uuid = {g.uuid: g for g in self._gpus}
        self._event_set: Any = None
        self._ecc_events = self._register_events(event_mask)
        self._watch = FrameWatch(xid=False, ecc=not self._ecc_events, remap=True, throttle=True)

    # --- NVML call discipline ---------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, gpu: _Gpu | None = None) -> Any:
        """One NVML call; None when the value is not available here (see the module docstring)."""
        try:
            return fn(*args)
        except _ABSENT:
            return None
        except _LOST as exc:
            if gpu is not None and not gpu.lost:
                gpu.lost = True
                self._pending.append(self._event(gpu, EventKind.GPU_LOST, 0, detail=str(exc)))
            return None
        except _GONE as exc:
            raise GpuBackendUnavailable(f"NVML stopped working ({type(exc).__name__}: {exc})") from exc
        except pynvml.NVMLError as exc:
            name = getattr(fn, "__name__", repr(fn))
            self.errors[name] += 1
            log.debug("NVML %s failed: %s", name, exc)
            return None

    def _field(self, gpu: _Gpu, field_id: int) -> float | None:
        values = self._call(pynvml.nvmlDeviceGetFieldValues, gpu.handle, [field_id], gpu=gpu)
        if not values:
            return None
        v = values[0]
        if v.nvmlReturn != pynvml.NVML_SUCCESS:
            return None
        attr = {
            pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
            pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
        }.get(v.valueType)
        return getattr(v.value, attr) if attr else None

    def _describe(self, index: int) -> _Gpu:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = self._call(pynvml.nvmlDeviceGetMemoryInfo, h)
        pci = self._call(pynvml.nvmlDeviceGetPciInfo, h)
        gpu = _Gpu(
            index=index,
            handle=h,
            uuid=pynvml.nvmlDeviceGetUUID(h),
            name=self._call(pynvml.nvmlDeviceGetName, h) or "unknown",
            bus_id=pci.busId if pci is not None else "unknown",
            memory_mib=int(mem.total // MIB) if mem is not None else 0,
            link_count=0,
        )
        gpu.link_count = self._link_count(gpu)
        return gpu

    def _link_count(self, gpu: _Gpu) -> int:
        """NVLink links of this GPU: the link-count field, else probe until NVML refuses a link."""
        n = self._field(gpu, pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)
        if n is not None:
            return int(n)
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
            except pynvml.NVMLError:
                return link
        return pynvml.NVML_NVLINK_MAX_LINKS

    def _event(self, gpu: _Gpu, kind: EventKind, code: int, **extra: Any) -> GpuEvent:
        return GpuEvent(
            node=self.node,
            gpu_uuid=gpu.uuid,
            gpu_index=gpu.index,
            kind=kind,
            at=self._clock(),
            code=code,
            **extra,
        )

    # --- inventory ----------------------------------------------------------------------------------
    def topology(self) -> Topology:
        n = len(self._gpus)
        levels: list[list[int | None]] = [[None] * n for _ in range(n)]
        for i, a in enumerate(self._gpus):
            for j in range(i + 1, n):
                b = self._gpus[j]
                level = self._call(pynvml.nvmlDeviceGetTopologyCommonAncestor, a.handle, b.handle)
                levels[i][j] = levels[j][i] = level
        remotes = [self._nvlink_remotes(g) for g in self._gpus]
        keys = [_bus_key(g.bus_id) for g in self._gpus]
        nvlinks = [[0] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                direct = sum(1 for kind, bus in remotes[i] if kind == "gpu" and bus == keys[j])
                switched_i = sum(1 for kind, _ in remotes[i] if kind == "switch")
                switched_j = sum(1 for kind, _ in remotes[j] if kind == "switch")
                if not direct and switched_i and switched_j and self._p2p_nvlink(i, j):
                    direct = min(switched_i, switched_j)
                nvlinks[i][j] = direct
        for i in range(n):  # symmetric on real systems; a link one side sees but not the other still counts
            for j in range(i):
                nvlinks[i][j] = nvlinks[j][i] = max(nvlinks[i][j], nvlinks[j][i])
        return Topology.from_nvml(levels, nvlinks, cpu_affinity=[self._cpu_affinity(g) for g in self._gpus])

    def _nvlink_remotes(self, gpu: _Gpu) -> list[tuple[str, tuple[int, ...] | None]]:
        """(``gpu`` | ``switch`` | ``other``, remote bus key) for every active NVLink of the GPU."""
        out: list[tuple[str, tuple[int, ...] | None]] = []
        for link in range(gpu.link_count):
            if self._call(pynvml.nvmlDeviceGetNvLinkState, gpu.handle, link, gpu=gpu) != 1:
                continue
            kind_code = self._call(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, gpu.handle, link, gpu=gpu)
            kind = {
                pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
                pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
                None: "gpu",  # older drivers: no remote type, a bus-id match decides
            }.get(kind_code, "other")
            pci = self._call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, gpu.handle, link, gpu=gpu)
            out.append((kind, _bus_key(pci.busId) if pci is not None else None))
        return out

    def _p2p_nvlink(self, i: int, j: int) -> bool:
        status = self._call(
            pynvml.nvmlDeviceGetP2PStatus,
            self._gpus[i].handle,
            self._gpus[j].handle,
            pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
        )
        return status is None or status == pynvml.NVML_P2P_STATUS_OK

    def _cpu_affinity(self, gpu: _Gpu) -> str | None:
        words = max(1, math.ceil((os.cpu_count() or 64) / 64))
        mask = self._call(pynvml.nvmlDeviceGetCpuAffinity, gpu.handle, words, gpu=gpu)
        if mask is None:
            return None
        cpus = {w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1}
        return format_cpu_list(cpus) if cpus else None

    def _numa_node(self, gpu: _Gpu, topo: Topology) -> int | None:
        fn = getattr(pynvml, "nvmlDeviceGetNumaNodeId", None)
        node = self._call(fn, gpu.handle, gpu=gpu) if fn is not None else None
        if node is not None and node >= 0:
            return int(node)
        return topo.numa_node(gpu.index)

    def _mig(self, gpu: _Gpu) -> tuple[MigMode, tuple[MigProfile, ...], tuple[MigInstance, ...]]:
        modes = self._call(pynvml.nvmlDeviceGetMigMode, gpu.handle, gpu=gpu)
        if modes is None:
            return MigMode.UNSUPPORTED, (), ()
        current, pending = int(modes[0]), int(modes[1])
        enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
        mode = MigMode.PENDING if pending != current else (MigMode.ENABLED if enabled else MigMode.DISABLED)
        profiles = []
        for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, gpu.handle, p, gpu=gpu)
            if info is None or not (1 <= info.sliceCount <= 8 and 1 <= info.instanceCount <= 8):
                continue
            m = _MIG_PROFILE.search(str(info.name))
            profiles.append(
                MigProfile(
                    name=m.group(0) if m else str(info.name),
                    profile_id=int(info.id),
                    slices=int(info.sliceCount),
                    memory_mib=int(info.memorySizeMB),
                    max_instances=int(info.instanceCount),
                )
            )
        instances = []
        if enabled:
            for k in range(self._call(pynvml.nvmlDeviceGetMaxMigDeviceCount, gpu.handle, gpu=gpu) or 0):
                mh = self._call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, gpu.handle, k, gpu=gpu)
                if mh is None:
                    continue  # an empty slot raises NotFound
                uuid = self._call(pynvml.nvmlDeviceGetUUID, mh, gpu=gpu)
                if not uuid:
                    continue
                name = self._call(pynvml.nvmlDeviceGetName, mh, gpu=gpu) or ""
                m = _MIG_PROFILE.search(name)
                mem = self._call(pynvml.nvmlDeviceGetMemoryInfo, mh, gpu=gpu)
                gi = self._call(pynvml.nvmlDeviceGetGpuInstanceId, mh, gpu=gpu)
                ci = self._call(pynvml.nvmlDeviceGetComputeInstanceId, mh, gpu=gpu)
                gpu.mig_uuids[uuid] = int(gi or 0)
                instances.append(
                    MigInstance(
                        uuid=uuid,
                        profile=m.group(0) if m else (name or "unknown"),
                        gpu_instance_id=int(gi or 0),
                        compute_instance_id=int(ci or 0),
                        memory_mib=int(mem.total // MIB) if mem is not None else 0,
                    )
                )
        return mode, tuple(profiles), tuple(instances)

    def inventory(self) -> NodeInventory:
        self._check_open()
        topo = self.topology()
        islands = topo.island_ids(self.node)
        gpus = []
        for g in self._gpus:
            cc = self._call(pynvml.nvmlDeviceGetCudaComputeCapability, g.handle, gpu=g)
            major, minor = (int(cc[0]), int(cc[1])) if cc else (0, 0)
            mode, profiles, instances = self._mig(g)
            up = sum(
                1
                for link in range(g.link_count)
                if self._call(pynvml.nvmlDeviceGetNvLinkState, g.handle, link, gpu=g) == 1
            )
            gpus.append(
                GpuInfo(
                    uuid=g.uuid,
                    index=g.index,
                    model=g.name,
                    memory_mib=g.memory_mib,
                    pci_bus_id=g.bus_id,
                    compute_capability=f"{major}.{minor}",
                    tensor_cores=major >= 7,
                    fp8=(major, minor) >= (8, 9),
                    nvlink_links=min(up, 36),
                    nvlink_island=islands[g.index],
                    numa_node=self._numa_node(g, topo),
                    mig_mode=mode,
                    mig_profiles=profiles,
                    mig_instances=instances,
                    power_limit_w=_milliwatts(self._call(pynvml.nvmlDeviceGetEnforcedPowerLimit, g.handle, gpu=g)),
                )
            )
        cuda = self._call(pynvml.nvmlSystemGetCudaDriverVersion)
        return NodeInventory(
            source=self._emitter,
            emitted_at=self._clock(),
            node=self.node,
            gpus=tuple(gpus),
            driver_version=self._call(pynvml.nvmlSystemGetDriverVersion),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        )

    # --- samples --------------------------------------------------------------------------------------
    def _row(self, g: _Gpu) -> dict[str, Any]:
        row: dict[str, Any] = {"xid_last": g.xid_last}
        if g.lost:
            return row
        h = g.handle

        def call(fn: Callable[..., Any], *args: Any) -> Any:
            return self._call(fn, h, *args, gpu=g)

        util = call(pynvml.nvmlDeviceGetUtilizationRates)
        if util is not None:
            row["util_pct"], row["mem_util_pct"] = util.gpu, util.memory
        mem = call(pynvml.nvmlDeviceGetMemoryInfo)
        if mem is not None:
            row["mem_used_mib"], row["mem_total_mib"] = mem.used // MIB, mem.total // MIB
        row["temperature_c"] = call(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
        row["mem_temperature_c"] = self._field(g, pynvml.NVML_FI_DEV_MEMORY_TEMP)
        power = call(pynvml.nvmlDeviceGetPowerUsage)
        row["power_w"] = power / 1000 if power is not None else None
        limit = call(pynvml.nvmlDeviceGetEnforcedPowerLimit)
        row["power_limit_w"] = limit / 1000 if limit is not None else None
        row["sm_clock_mhz"] = call(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
        row["mem_clock_mhz"] = call(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
        row["throttle_reasons"] = call(pynvml.nvmlDeviceGetCurrentClocksEventReasons)
        for column, err, counter in (
            ("ecc_corrected_volatile", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
            ("ecc_uncorrected_volatile", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
            ("ecc_corrected_aggregate", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC),
            (
                "ecc_uncorrected_aggregate",
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_AGGREGATE_ECC,
            ),
        ):
            row[column] = call(pynvml.nvmlDeviceGetTotalEccErrors, err, counter)
        retired = [
            call(pynvml.nvmlDeviceGetRetiredPages, cause)
            for cause in (
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
        ]
        if any(r is not None for r in retired):
            row["retired_pages"] = sum(len(r) for r in retired if r is not None)
        remap = call(pynvml.nvmlDeviceGetRemappedRows)
        if remap is not None:
            corr, unc, pending, _failure = remap
            row["remapped_rows_correctable"], row["remapped_rows_uncorrectable"] = corr, unc
            row["row_remap_pending"] = bool(pending)
        row["pcie_replay"] = call(pynvml.nvmlDeviceGetPcieReplayCounter)
        if g.link_count:
            states = [call(pynvml.nvmlDeviceGetNvLinkState, link) for link in range(g.link_count)]
            row["nvlink_up"] = sum(1 for s in states if s == 1)
        if g.lost:  # lost during this very sample: report nothing rather than half a row
            return {"xid_last": g.xid_last}
        return row

    def sample(self, now: float) -> GpuFrame:
        self._check_open()
        rows = [self._row(g) for g in self._gpus]
        frame = GpuFrame.build(
            sampled_at=now,
            nodes=(self.node,),
            bounds=(0, len(rows)),
            gpu_uuid=[g.uuid for g in self._gpus],
            gpu_index=[g.index for g in self._gpus],
            columns={name: [r.get(name) for r in rows] for name in COLUMNS},  # type: ignore[misc]  # None: missing
        )
        self._pending += self._watch.update(frame)
        return frame

    # --- events ---------------------------------------------------------------------------------------
    def _register_events(self, mask: int) -> bool:
        """Create the event set and register every GPU; True when ECC events are covered everywhere."""
        if not self._gpus or not mask:
            return False
        es = self._call(pynvml.nvmlEventSetCreate)
        if es is None:
            return False
        self._event_set = es
        ecc_everywhere = True
        for g in self._gpus:
            supported = self._call(pynvml.nvmlDeviceGetSupportedEventTypes, g.handle, gpu=g) or 0
            wanted = mask & int(supported)
            try:
                if wanted:
                    pynvml.nvmlDeviceRegisterEvents(g.handle, wanted, es)
            except pynvml.NVMLError as exc:
                if not isinstance(exc, _ABSENT):
                    self.errors["nvmlDeviceRegisterEvents"] += 1
                wanted = 0
            ecc_everywhere &= bool(wanted & DBE)
        return ecc_everywhere

    def _gpu_of(self, uuid: str) -> _Gpu | None:
        if uuid in self._by_uuid:
            return self._by_uuid[uuid]
        return next((g for g in self._gpus if uuid in g.mig_uuids), None)

    def events(self, timeout: float = 0.0) -> list[GpuEvent]:
        """Pending derived events plus NVML events, waiting up to ``timeout`` s for the first one."""
        self._check_open()
        out, self._pending = self._pending, []
        if self._event_set is None:
            return out
        wait_ms = max(0, int(timeout * 1000)) if not out else 0
        for _ in range(_MAX_DRAIN):
            try:
                data = pynvml.nvmlEventSetWait(self._event_set, wait_ms)
            except pynvml.NVMLError_Timeout:
                break
            except _GONE as exc:
                raise GpuBackendUnavailable(f"NVML stopped working ({type(exc).__name__}: {exc})") from exc
            except pynvml.NVMLError as exc:
                raise GpuBackendError(f"nvmlEventSetWait failed ({exc}); retry on the next call") from exc
            wait_ms = 0
            out.append(self._to_event(data))
        out += self._pending  # a GPU found lost while resolving an event
        self._pending = []
        return out

    def _to_event(self, data: Any) -> GpuEvent:
        uuid = self._call(pynvml.nvmlDeviceGetUUID, data.device) or "unknown"
        gpu = self._gpu_of(uuid)
        kind_bits = int(data.eventType)
        code = int(data.eventData)
        if kind_bits & XID:
            kind = EventKind.XID
            if gpu is not None:
                gpu.xid_last = code
        elif kind_bits & DBE:
            kind, code = EventKind.ECC_UNCORRECTED, 1
        elif kind_bits & SBE:
            kind, code = EventKind.ECC_CORRECTED, 1
        elif kind_bits & _REMAP:
            kind, code = EventKind.ROW_REMAP, kind_bits
        elif kind_bits & _UNAVAILABLE:
            kind, code = EventKind.GPU_LOST, kind_bits
        else:
            kind, code = EventKind.OTHER, kind_bits
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return GpuEvent(
            node=self.node,
            gpu_uuid=gpu.uuid if gpu is not None else uuid,
            gpu_index=gpu.index if gpu is not None else -1,
            kind=kind,
            at=self._clock(),
            code=code,
            gpu_instance_id=None if gi == NOT_MIG_SCOPED else gi,
            compute_instance_id=None if ci == NOT_MIG_SCOPED else ci,
            detail="" if gpu is not None else "event from a device not in the inventory",
        )

    # --- lifecycle ------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._open:
            raise GpuBackendUnavailable("NvmlBackend is closed")

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._event_set is not None:
            self._call(pynvml.nvmlEventSetFree, self._event_set)
            self._event_set = None
        self._call(pynvml.nvmlShutdown)


def _milliwatts(value: Any) -> float | None:
    """NVML reports power in milliwatts; None stays None."""
    return None if value is None else value / 1000
