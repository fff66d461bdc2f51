"""A fake NVML installed at the pynvml *function* level, returning what the real bindings return.

Handles are real ``c_nvmlDevice_t`` pointers (distinct addresses), utilisation/memory/PCI/event
data are the real ctypes structures, power is in milliwatts and memory in bytes, errors are the
real ``NVMLError`` subclasses (telemetry.md, nvidia-ml-py 13.615). A function the backend calls but
the fake does not provide falls through to the real, uninitialised library and fails loudly.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import pynvml
import pytest

MIB = 1024 * 1024


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeMig:
    uuid: str
    profile: str  # e.g. "3g.40gb"
    gi: int
    ci: int
    memory_mib: int


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    bus_id: str = "00000000:07:00.0"
    total_mib: int = 81920
    used_mib: int = 0
    util: tuple[int, int] | int | None = (0, 0)  # (gpu %, memory %), or an NVML error code
    temp_c: int | None = 30
    mem_temp_c: int | None = 32  # field NVML_FI_DEV_MEMORY_TEMP; None = NotSupported in the field
    power_mw: int = 61_000
    limit_mw: int = 400_000
    sm_mhz: int = 210
    mem_mhz: int = 1593
    throttle: int = 0
    ecc: dict[tuple[int, int], int] | None = field(
        default_factory=lambda: {(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0}
    )
    retired: tuple[list[int], list[int]] | None = None  # (SBE pages, DBE pages); None = NotSupported (A100)
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    pcie_replay: int | None = 0
    # per link: (state, remote device type, remote bus id)
    nvlinks: list[tuple[int, int, str]] = field(default_factory=list)
    cc: tuple[int, int] = (8, 0)
    numa: int | None = 0
    cpus: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    mig_mode: tuple[int, int] | None = (0, 0)
    mig: list[FakeMig | None] = field(default_factory=list)  # None = empty slot (NotFound)
    supported_events: int = 0xFFFF
    raises: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code


# GPU-instance profiles NVML reports for an A100-80GB (mig-profiles.json), by profile index
A100_PROFILES = {0: ("MIG 1g.10gb", 19, 1, 7, 9856), 1: ("MIG 2g.20gb", 14, 2, 3, 19968),
                 2: ("MIG 3g.40gb", 9, 3, 2, 40192), 4: ("MIG 7g.80gb", 0, 7, 1, 80384)}  # fmt: skip


class FakeNvml:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], *, levels=None) -> None:
        self.gpus = gpus
        self.levels = levels  # levels[i][j] for nvmlDeviceGetTopologyCommonAncestor
        self.events: list[tuple[int, int, int, int, int]] = []  # (gpu, type, data, gi, ci)
        self.registered: dict[int, int] = {}
        self.waits: list[int] = []
        self.calls: list[str] = []
        self.p2p_nvlink_ok = True
        self._handles = [
            ctypes.cast(ctypes.c_void_p(0x1000 * (i + 1)), pynvml.c_nvmlDevice_t) for i in range(len(gpus))
        ]
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, self._wrap(name, getattr(self, name)))

    def _wrap(self, name, fn):
        def call(*args, **kwargs):
            self.calls.append(name)
            if args:
                where = self._locate(args[0])
                if where is not None and name in self.gpus[where[0]].raises:
                    raise nvml_error(self.gpus[where[0]].raises[name])
            return fn(*args, **kwargs)

        call.__name__ = name
        return call

    # --- handle bookkeeping ---
    def _locate(self, handle) -> tuple[int, int | None] | None:
        try:
            addr = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            return None
        if addr is None or addr % 0x1000 not in range(0, 0x100):
            return None
        gpu, mig = addr // 0x1000 - 1, addr % 0x1000
        if not 0 <= gpu < len(self.gpus):
            return None
        return gpu, (mig - 1 if mig else None)

    def _gpu(self, handle) -> FakeGpu:
        return self.gpus[self._locate(handle)[0]]

    def _mig_of(self, handle) -> FakeMig | None:
        g, m = self._locate(handle)
        return self.gpus[g].mig[m] if m is not None else None

    # --- the NVML surface ---
    def nvmlInit(self):
        return None

    def nvmlShutdown(self):
        return None

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self._handles[i]

    def nvmlSystemGetDriverVersion(self):
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetUUID(self, h):
        mig = self._mig_of(h)
        return mig.uuid if mig else self._gpu(h).uuid

    def nvmlDeviceGetName(self, h):
        mig = self._mig_of(h)
        return f"{self._gpu(h).name} MIG {mig.profile}" if mig else self._gpu(h).name

    def nvmlDeviceGetPciInfo(self, h):
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu(h).bus_id.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        mig = self._mig_of(h)
        g = self._gpu(h)
        total = (mig.memory_mib if mig else g.total_mib) * MIB
        used = 0 if mig else g.used_mib * MIB
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, h):
        g = self._gpu(h)
        if g.util is None:
            raise nvml_error(NOT_SUPPORTED)
        return pynvml.c_nvmlUtilization_t(gpu=g.util[0], memory=g.util[1])

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(h).temp_c

    def nvmlDeviceGetFieldValues(self, h, ids):
        g = self._gpu(h)
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for k, fid in enumerate(ids):
            values[k].fieldId = fid
            value = {pynvml.NVML_FI_DEV_MEMORY_TEMP: g.mem_temp_c,
                     pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: len(g.nvlinks) if g.nvlinks else None}.get(fid)  # fmt: skip
            if value is None:
                values[k].nvmlReturn = NOT_SUPPORTED
            else:
                values[k].nvmlReturn = pynvml.NVML_SUCCESS
                values[k].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[k].value.uiVal = value
        return values

    def nvmlDeviceGetPowerUsage(self, h):
        return self._gpu(h).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._gpu(h).limit_mw

    def nvmlDeviceGetClockInfo(self, h, kind):
        g = self._gpu(h)
        return {pynvml.NVML_CLOCK_SM: g.sm_mhz, pynvml.NVML_CLOCK_MEM: g.mem_mhz}[kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._gpu(h).throttle

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        g = self._gpu(h)
        if g.ecc is None:
            raise nvml_error(NOT_SUPPORTED)
        return g.ecc[(error_type, counter)]

    def nvmlDeviceGetRetiredPages(self, h, cause):
        g = self._gpu(h)
        if g.retired is None:
            raise nvml_error(NOT_SUPPORTED)
        return list(g.retired[cause])

    def nvmlDeviceGetRemappedRows(self, h):
        g = self._gpu(h)
        if g.remapped is None:
            raise nvml_error(NOT_SUPPORTED)
        return g.remapped

    def nvmlDeviceGetPcieReplayCounter(self, h):
        g = self._gpu(h)
        if g.pcie_replay is None:
            raise nvml_error(NOT_SUPPORTED)
        return g.pcie_replay

    def _link(self, h, link):
        g = self._gpu(h)
        if link >= len(g.nvlinks):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT if g.nvlinks else NOT_SUPPORTED)
        return g.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._link(h, link)[0]

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._link(h, link)[1]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._link(h, link)[2].encode()
        return info

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        return pynvml.NVML_P2P_STATUS_OK if self.p2p_nvlink_ok else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        i, j = self._locate(h1)[0], self._locate(h2)[0]
        return self.levels[i][j] if self.levels is not None else pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetCpuAffinity(self, h, words):
        mask = (ctypes.c_ulonglong * words)()
        for c in self._gpu(h).cpus:
            mask[c // 64] |= 1 << (c % 64)
        return mask

    def nvmlDeviceGetNumaNodeId(self, h):
        g = self._gpu(h)
        if g.numa is None:
            raise nvml_error(NOT_SUPPORTED)
        return g.numa

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._gpu(h).cc

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu(h)
        if g.mig_mode is None:
            raise nvml_error(NOT_SUPPORTED)
        return list(g.mig_mode)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h, profile, version=2):
        if profile not in A100_PROFILES:
            raise nvml_error(NOT_SUPPORTED)
        name, pid, slices, count, mem = A100_PROFILES[profile]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount, info.memorySizeMB = pid, slices, count, mem
        info.name = name.encode()
        return info

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(self._gpu(h).mig)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, k):
        g = self._locate(h)[0]
        if self.gpus[g].mig[k] is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return ctypes.cast(ctypes.c_void_p(0x1000 * (g + 1) + k + 1), pynvml.c_nvmlDevice_t)

    def nvmlDeviceGetGpuInstanceId(self, mh):
        return self._mig_of(mh).gi

    def nvmlDeviceGetComputeInstanceId(self, mh):
        return self._mig_of(mh).ci

    # --- events ---
    def nvmlEventSetCreate(self):
        return ctypes.c_void_p(0xE5)

    def nvmlDeviceGetSupportedEventTypes(self, h):
        return self._gpu(h).supported_events

    def nvmlDeviceRegisterEvents(self, h, mask, es):
        self.registered[self._locate(h)[0]] = mask

    def nvmlEventSetWait(self, es, timeout_ms):
        self.waits.append(timeout_ms)
        if not self.events:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        gpu, kind, data, gi, ci = self.events.pop(0)
        ev = pynvml.c_nvmlEventData_t()
        ev.device = self._handles[gpu]
        ev.eventType, ev.eventData, ev.gpuInstanceId, ev.computeInstanceId = kind, data, gi, ci
        return ev

    def nvmlEventSetFree(self, es):
        return None
