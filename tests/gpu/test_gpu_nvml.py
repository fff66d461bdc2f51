"""NVML backend against pynvml patched at the function level (see gpu_fakes.py)."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pynvml
import pytest
from gpu_fakes import FakeGpu, FakeMig, FakeNvml

from gpuaware.gpu import (
    EventKind,
    GpuBackend,
    GpuBackendUnavailable,
    ManualClock,
    NvmlBackend,
    parse_topo_matrix,
)
from gpuaware.gpu.nvml import DEFAULT_EVENT_MASK, format_cpu_list
from gpuaware.schemas import MigMode, ThrottleReason

T0 = 1_767_225_600.0
NV_GPU, NV_SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
DGX_BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
           "00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"]  # fmt: skip


def busy_a100() -> FakeGpu:
    """Everything supported, values as in the dcgm-exporter sample's GPU 0, in NVML units."""
    return FakeGpu(
        uuid="GPU-0000aaaa-0000-0000-0000-000000000000",
        bus_id=DGX_BUS[0],
        used_mib=78264,
        util=(98, 41),
        temp_c=56,
        mem_temp_c=47,
        power_mw=312_455,
        limit_mw=400_000,
        sm_mhz=1410,
        throttle=ThrottleReason.SW_POWER_CAP,
        ecc={(0, 0): 5, (1, 0): 0, (0, 1): 17, (1, 1): 2},
        retired=None,  # A100: NotSupported, rows are remapped instead
        remapped=(3, 1, 1, 0),
        pcie_replay=7,
        nvlinks=[(1, NV_SWITCH, "00000000:C1:00.0")] * 11 + [(0, NV_SWITCH, "00000000:C1:00.0")],
        numa=0,
    )


def old_card() -> FakeGpu:
    """A pre-Ampere card that reports little: NotSupported everywhere it can be."""
    return FakeGpu(
        uuid="GPU-0000bbbb-0000-0000-0000-000000000000",
        name="Tesla T4",
        bus_id=DGX_BUS[1],
        total_mib=15360,
        used_mib=0,
        util=None,
        mem_temp_c=None,
        ecc=None,
        retired=([0x1000, 0x2000], [0x3000]),
        remapped=None,
        pcie_replay=None,
        cc=(7, 5),
        numa=None,
        mig_mode=None,
    )


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return FakeNvml(monkeypatch, [busy_a100(), old_card()])


def test_no_driver_is_a_clear_permanent_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def init() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    with pytest.raises(GpuBackendUnavailable) as err:
        NvmlBackend("n1")
    text = str(err.value)
    assert "NVMLError_LibraryNotFound" in text
    assert "SimulatedFleet" in text and "dcgm-exporter" in text


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver"
)
def test_no_driver_on_this_machine_unpatched() -> None:
    with pytest.raises(GpuBackendUnavailable, match="LibraryNotFound"):
        NvmlBackend("n1")


@pytest.mark.parametrize(
    "gpu, column, expected",
    [
        (0, "util_pct", 98),  # c_nvmlUtilization_t.gpu
        (0, "mem_util_pct", 41),  # c_nvmlUtilization_t.memory
        (0, "mem_used_mib", 78264),  # c_nvmlMemory_t.used = 78264 * 2^20 bytes
        (0, "mem_total_mib", 81920),
        (0, "temperature_c", 56),
        (0, "mem_temperature_c", 47),  # field NVML_FI_DEV_MEMORY_TEMP (uiVal)
        (0, "power_w", 312.455),  # 312455 mW / 1000
        (0, "power_limit_w", 400.0),  # 400000 mW
        (0, "sm_clock_mhz", 1410),
        (0, "mem_clock_mhz", 1593),
        (0, "throttle_reasons", 0x4),  # SwPowerCap
        (0, "ecc_corrected_volatile", 5),  # (CORRECTED=0, VOLATILE=0)
        (0, "ecc_uncorrected_aggregate", 2),  # (UNCORRECTED=1, AGGREGATE=1)
        (0, "retired_pages", None),  # NotSupported on A100
        (0, "remapped_rows_correctable", 3),  # (corrRows, uncRows, isPending, failure) = (3, 1, 1, 0)
        (0, "remapped_rows_uncorrectable", 1),
        (0, "row_remap_pending", True),
        (0, "pcie_replay", 7),
        (0, "nvlink_up", 11),  # 11 of 12 links in state 1
        (0, "xid_last", 0),  # none since the agent started
        (0, "tensor_active_pct", None),  # NVML has no tensor activity (DCGM profiling)
        (1, "util_pct", None),  # NotSupported -> None, not a crash
        (1, "mem_temperature_c", None),  # field returned NOT_SUPPORTED in its nvmlReturn
        (1, "ecc_uncorrected_volatile", None),
        (1, "retired_pages", 3),  # 2 single-bit pages + 1 double-bit page
        (1, "remapped_rows_uncorrectable", None),
        (1, "row_remap_pending", None),
        (1, "pcie_replay", None),
        (1, "nvlink_up", None),  # no NVLink at all
        (1, "mem_total_mib", 15360),
    ],
)
def test_sample_values_and_units(nvml: FakeNvml, gpu: int, column: str, expected: object) -> None:
    frame = NvmlBackend("n1").sample(T0)
    assert frame.value(column, gpu) == (pytest.approx(expected) if isinstance(expected, float) else expected)


def test_frame_identity_and_protocol(nvml: FakeNvml) -> None:
    backend = NvmlBackend("n1")
    assert isinstance(backend, GpuBackend)
    frame = backend.sample(T0)
    assert frame.nodes == ("n1",) and frame.sampled_at == T0
    assert frame.gpu_uuid == (nvml.gpus[0].uuid, nvml.gpus[1].uuid)
    assert frame.gpu_index.tolist() == [0, 1]
    assert backend.errors == {}


def test_xid_event_through_the_event_set(nvml: FakeNvml) -> None:
    clock = ManualClock(T0)
    backend = NvmlBackend("n1", clock=clock)
    # every GPU registered for the default mask & what it supports (0xFFFF here)
    assert nvml.registered == {0: DEFAULT_EVENT_MASK & 0xFFFF, 1: DEFAULT_EVENT_MASK & 0xFFFF}
    nvml.events.append((1, pynvml.nvmlEventTypeXidCriticalError, 79, 0xFFFFFFFF, 0xFFFFFFFF))
    nvml.events.append((0, pynvml.nvmlEventTypeXidCriticalError, 43, 1, 0))  # MIG-scoped: GI 1, CI 0
    nvml.events.append((0, pynvml.nvmlEventTypeDoubleBitEccError, 0, 0xFFFFFFFF, 0xFFFFFFFF))
    clock.advance(5)
    events = backend.events(timeout=0.5)
    assert nvml.waits[:2] == [500, 0]  # wait for the first, then drain without blocking
    assert [(e.kind, e.gpu_index, e.code, e.gpu_instance_id, e.compute_instance_id) for e in events] == [
        (EventKind.XID, 1, 79, None, None),  # eventData IS the XID; 0xFFFFFFFF = not MIG-scoped
        (EventKind.XID, 0, 43, 1, 0),
        (EventKind.ECC_UNCORRECTED, 0, 1, None, None),
    ]
    assert events[0].at == T0 + 5 and not events[0].application_error and events[1].application_error
    frame = backend.sample(T0 + 6)
    assert (frame.value("xid_last", 0), frame.value("xid_last", 1)) == (43, 79)
    assert backend.events(timeout=0.0) == []  # Timeout -> nothing, no exception


def test_unsupported_event_types_are_not_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = busy_a100(), old_card()
    b.supported_events = 0  # e.g. a vGPU: no events at all
    nvml = FakeNvml(monkeypatch, [a, b])
    NvmlBackend("n1")
    assert list(nvml.registered) == [0]


def test_thermal_and_power_events_come_from_the_throttle_bits(nvml: FakeNvml) -> None:
    backend = NvmlBackend("n1")
    nvml.gpus[0].throttle = 0
    backend.sample(T0)  # baseline
    nvml.gpus[0].throttle = ThrottleReason.SW_THERMAL_SLOWDOWN | ThrottleReason.HW_THERMAL_SLOWDOWN
    backend.sample(T0 + 1)
    nvml.gpus[0].throttle |= ThrottleReason.SW_POWER_CAP
    backend.sample(T0 + 2)
    events = backend.events()
    # 0x0 -> 0x60: thermal bits 0x20|0x40 turned on; 0x60 -> 0x64: power cap bit 0x4
    assert [(e.kind, e.code, e.at) for e in events] == [
        (EventKind.THERMAL, 0x60, T0 + 1),
        (EventKind.POWER, 0x4, T0 + 2),
    ]


def test_a_lost_gpu_reports_nothing_and_raises_one_event(nvml: FakeNvml) -> None:
    backend = NvmlBackend("n1")
    nvml.gpus[1].raises["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_GPU_IS_LOST
    for t in range(3):
        frame = backend.sample(T0 + t)
        assert frame.value("mem_total_mib", 1) is None and frame.value("temperature_c", 1) is None
        assert frame.value("util_pct", 0) == 98  # the other GPU is unaffected
    events = backend.events()
    assert [(e.kind, e.gpu_index) for e in events] == [(EventKind.GPU_LOST, 1)]


def test_unexpected_errors_are_counted_not_swallowed(nvml: FakeNvml) -> None:
    nvml.gpus[0].raises["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_UNKNOWN
    backend = NvmlBackend("n1")
    frame = backend.sample(T0)
    assert frame.value("power_w", 0) is None
    assert backend.errors == {"nvmlDeviceGetPowerUsage": 1}


def test_driver_going_away_is_unavailable(nvml: FakeNvml) -> None:
    backend = NvmlBackend("n1")
    nvml.gpus[0].raises["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_UNINITIALIZED
    with pytest.raises(GpuBackendUnavailable, match="NVML stopped working"):
        backend.sample(T0)


def test_inventory(nvml: FakeNvml) -> None:
    inv = NvmlBackend("n1", clock=ManualClock(T0)).inventory()
    assert (inv.node, inv.source, inv.emitted_at) == ("n1", "agent/n1", T0)
    assert (inv.driver_version, inv.cuda_version) == ("550.90.07", "12.4")  # 12040 -> 12.4
    a100, t4 = inv.gpus
    assert (a100.model, a100.memory_mib, a100.pci_bus_id) == ("NVIDIA A100-SXM4-80GB", 81920, DGX_BUS[0])
    assert (a100.compute_capability, a100.tensor_cores, a100.fp8) == ("8.0", True, False)
    assert a100.nvlink_links == 11 and a100.numa_node == 0
    assert a100.power_limit_w == 400.0  # NVML's 400,000 mW
    assert a100.mig_mode is MigMode.DISABLED
    # profile names come as "MIG 1g.10gb": the prefix is stripped
    assert [p.name for p in a100.mig_profiles] == ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    assert (t4.compute_capability, t4.mig_mode, t4.nvlink_links) == ("7.5", MigMode.UNSUPPORTED, 0)
    assert t4.numa_node is None  # NotSupported and no topology hint


def test_mig_instances_and_pending_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = busy_a100(), busy_a100()
    a.mig_mode = (1, 1)
    a.util = None  # MIG-enabled GPUs do not report utilisation
    a.mig = [
        FakeMig("MIG-0000aaaa-0001", "3g.40gb", gi=1, ci=0, memory_mib=40192),
        None,  # an empty slot raises NotFound and is skipped
        FakeMig("MIG-0000aaaa-0002", "1g.10gb", gi=9, ci=0, memory_mib=9856),
    ]
    b.uuid, b.bus_id, b.mig_mode = "GPU-0000cccc-0000-0000-0000-000000000000", DGX_BUS[1], (0, 1)
    FakeNvml(monkeypatch, [a, b])
    backend = NvmlBackend("n1")
    g0, g1 = backend.inventory().gpus
    assert g0.mig_mode is MigMode.ENABLED
    assert [(m.uuid, m.profile, m.gpu_instance_id, m.memory_mib) for m in g0.mig_instances] == [
        ("MIG-0000aaaa-0001", "3g.40gb", 1, 40192),
        ("MIG-0000aaaa-0002", "1g.10gb", 9, 9856),
    ]
    assert g1.mig_mode is MigMode.PENDING  # [current 0, pending 1]: waits for a GPU reset
    assert backend.sample(T0).value("util_pct", 0) is None


def _fake_from_matrix(monkeypatch: pytest.MonkeyPatch, text: str) -> FakeNvml:
    """An NVML that answers like the machine the matrix was captured on."""
    topo = parse_topo_matrix(text)
    code_level = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
    n = len(topo.gpus)
    gpus = []
    for i in range(n):
        nv = topo.nvlink_links(i)  # NVSwitch boards: every link goes to a switch
        gpus.append(FakeGpu(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", bus_id=DGX_BUS[i],
                            nvlinks=[(1, NV_SWITCH, "00000000:C1:00.0")] * nv))  # fmt: skip
    # NV pairs hide their PCIe path in the matrix; SYS stands in for it
    levels = [[code_level.get(topo.link(i, j), 50) for j in range(n)] for i in range(n)]
    return FakeNvml(monkeypatch, gpus, levels=levels)


@pytest.mark.parametrize(
    "name",
    ["topo-dgx-a100.txt", "topo-dgx-h100.txt", "topo-hgx-a100-4gpu-raw-tabs.txt",
     "topo-pcie-4gpu.txt", "topo-pcie-4gpu-newformat.txt"],
)  # fmt: skip
def test_nvml_topology_gives_the_same_islands_as_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, k8s_facts: Path, name: str
) -> None:
    text = (k8s_facts / "topology" / name).read_text()
    _fake_from_matrix(monkeypatch, text)
    expected = parse_topo_matrix(text)
    topo = NvmlBackend("n1").topology()
    assert topo.nvlink_islands() == expected.nvlink_islands()
    assert topo.links == expected.links  # NV12/NV18 from switch links, PIX/SYS from common ancestors
    inv = NvmlBackend("n1").inventory()
    assert [g.nvlink_island for g in inv.gpus] == list(expected.island_ids("n1"))


def test_pairwise_nvlink_bridges_make_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 PCIe cards, NVLink bridges between 0-1 and 2-3 (2 links each), NODE/SYS otherwise
    bus = DGX_BUS[:4]
    gpus = [FakeGpu(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", bus_id=bus[i],
                    nvlinks=[(1, NV_GPU, bus[i ^ 1].replace("00000000:", "0000:"))] * 2) for i in range(4)]  # fmt: skip
    levels = [[0, 40, 50, 50], [40, 0, 50, 50], [50, 50, 0, 40], [50, 50, 40, 0]]
    FakeNvml(monkeypatch, gpus, levels=levels)
    topo = NvmlBackend("n1").topology()
    assert topo.nvlink_islands() == ((0, 1), (2, 3))
    assert topo.link(0, 1) == "NV2" and topo.link(0, 2) == "SYS" and topo.link(1, 0) == "NV2"


def test_switch_links_without_p2p_are_not_an_island(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t X \n"
    nvml = _fake_from_matrix(monkeypatch, text)
    nvml.p2p_nvlink_ok = False  # e.g. NVLink P2P disabled by regkey
    assert NvmlBackend("n1").topology().nvlink_islands() == ((0,), (1,))


def test_cpu_affinity_mask_words() -> None:
    assert format_cpu_list({0, 1, 2, 5, 64, 65}) == "0-2,5,64-65"


def test_cpu_affinity_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    g = busy_a100()
    g.cpus = [*range(0, 56), *range(112, 168)]  # the DGX H100 GPU0 row: 0-55,112-167
    FakeNvml(monkeypatch, [g])
    monkeypatch.setattr("os.cpu_count", lambda: 224)  # 224 CPUs -> 4 mask words of 64
    topo = NvmlBackend("n1").topology()
    assert topo.cpu_affinity == ("0-55,112-167",)
    assert len(topo.cpus(0)) == 112


def test_close_frees_the_event_set_and_shuts_down(nvml: FakeNvml) -> None:
    backend = NvmlBackend("n1")
    backend.close()
    backend.close()  # idempotent
    assert nvml.calls.count("nvmlEventSetFree") == 1 and nvml.calls.count("nvmlShutdown") == 1
    with pytest.raises(GpuBackendUnavailable, match="closed"):
        backend.sample(T0)
