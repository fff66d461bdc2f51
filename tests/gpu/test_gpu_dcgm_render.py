"""``render_dcgm_metrics``, the inverse of the dcgm-exporter parser: a simulated node written as
exporter text and read back through ``DcgmExporterBackend`` gives the same GPUs and values (within
the exporter's integer rounding), missing values are left out, and the text looks like the real
exporter's (HELP/TYPE, label layout, number formats)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpuaware.gpu import (
    COLUMNS,
    DcgmExporterBackend,
    EccErrorGrowth,
    FleetNode,
    FleetSpec,
    GpuFrame,
    ManualClock,
    PodLoad,
    PodRef,
    PowerCap,
    SimulatedFleet,
    ThermalRunaway,
    XidBurst,
    parse_dcgm_metrics,
    render_dcgm_metrics,
)
from gpuaware.gpu.dcgm_render import RENDERED
from gpuaware.schemas import GpuInfo, NodeInventory

T0 = 1_767_225_600.0
NOW = T0 + 7200.0

# how far a value may move through the text: int64 fields round to the unit (the exporter's
# integers), doubles are printed with %f (6 decimals; tensor activity is a ratio, so 1e-4 of a percent)
ROUNDED = {"util_pct": 0.5, "mem_util_pct": 0.5, "temperature_c": 0.5, "mem_temperature_c": 0.5,
           "power_w": 5e-7, "power_limit_w": 5e-7, "tensor_active_pct": 5e-5}
NOT_IN_DCGM = {"nvlink_up"}  # no dcgm-exporter field says how many NVLink links are up


def _fleet() -> SimulatedFleet:
    """An A100 node (remaps rows) and a V100 node (retires pages), busy, with every kind of fault."""
    spec = FleetSpec(nodes=(FleetNode("a100-node", "A100-80GB", 4), FleetNode("v100-node", "V100", 2)),
                     seed=11, occupancy=0.0, traces="synthetic")
    fleet = SimulatedFleet(spec, clock=ManualClock(NOW))
    for node, gpu, milli in (("a100-node", 0, 1000), ("a100-node", 1, 500), ("a100-node", 1, 300),
                             ("v100-node", 0, 1000)):
        fleet.assign((node, gpu), PodLoad(name=f"p-{node}-{gpu}-{milli}", namespace="t", milli=milli, trace=0,
                                          offset_s=3600.0))
    fleet.inject(EccErrorGrowth(("a100-node", 2), T0, corrected_per_hour=40, uncorrected_per_hour=3),
                 EccErrorGrowth(("v100-node", 1), T0, corrected_per_hour=50, uncorrected_per_hour=2),
                 XidBurst(("a100-node", 3), NOW - 30, xid=79, count=2),
                 PowerCap(("a100-node", 0), T0, cap_w=150.0),
                 ThermalRunaway(("v100-node", 0), NOW - 1200, degrees_per_minute=3.0))
    return fleet


def test_every_metric_column_has_a_field() -> None:
    assert {column for *_, column, _ in RENDERED} == set(COLUMNS) - NOT_IN_DCGM


@pytest.mark.parametrize("node", ["a100-node", "v100-node"])
def test_a_simulated_node_survives_the_round_trip(node: str) -> None:
    fleet = _fleet()
    inventory, frame = fleet.inventory(node), fleet.node(node).sample(NOW)
    text = render_dcgm_metrics(inventory, frame)

    backend = DcgmExporterBackend(text, node=node)
    got = backend.sample(NOW)
    assert got.gpu_uuid == frame.gpu_uuid and got.gpu_index.tolist() == frame.gpu_index.tolist()
    assert backend.dropped == 0 and got.dropped == 0
    for name, spec in COLUMNS.items():
        want_present = frame.present(name)
        if name in NOT_IN_DCGM:
            assert not got.present(name).any(), name
            continue
        assert got.present(name).tolist() == want_present.tolist(), name
        want = frame.column(name)[want_present].astype(np.float64)
        have = got.column(name)[want_present].astype(np.float64)
        tolerance = ROUNDED.get(name, 0.0)
        assert np.all(np.abs(have - want) <= tolerance + 1e-9), (name, want.tolist(), have.tolist())
        if spec.kind != "f" and name not in ROUNDED:
            assert have.tolist() == want.tolist(), name

    inv = backend.inventory()
    assert inv.node == node and inv.driver_version == inventory.driver_version
    assert [(g.uuid, g.index, g.pci_bus_id, g.model, g.memory_mib) for g in inv.gpus] == [
        (g.uuid, g.index, g.pci_bus_id, g.model, g.memory_mib) for g in inventory.gpus]


def test_the_round_trip_carries_real_signal() -> None:
    """The fleet state above is not all zeros: the round trip compares busy GPUs, faults and counters."""
    fleet = _fleet()
    a100 = fleet.node("a100-node").sample(NOW)
    v100 = fleet.node("v100-node").sample(NOW)
    rows = {r.gpu_index: r for r in a100.rows()}
    assert rows[0].util_pct and rows[1].util_pct and rows[2].util_pct == 0
    assert rows[0].power_limit_w == 150.0                 # the cap is the enforced limit
    assert rows[2].ecc_corrected_volatile == 80 and rows[2].ecc_uncorrected_volatile == 6  # 2 h x 40, 2 h x 3
    assert rows[2].remapped_rows_uncorrectable == 6 and rows[2].row_remap_pending is True
    assert rows[3].xid_last == 79
    v = {r.gpu_index: r for r in v100.rows()}
    assert v[1].retired_pages == 4 + 100 // 10            # uncorrected + corrected // 10 = 4 + 10
    assert v[1].remapped_rows_correctable is None          # a V100 retires pages, it does not remap rows
    assert v[0].throttle_reasons and v[0].throttle_reasons & 0x20   # thermal slowdown after 20 min of runaway
    parsed = {r["gpu_index"]: r for r in parse_dcgm_metrics(
        render_dcgm_metrics(fleet.inventory("v100-node"), v100)).rows()}
    assert parsed[1]["retired_pages"] == 14 and "remapped_rows_correctable" not in parsed[1]


def _inventory(n: int, node: str = "n1") -> NodeInventory:
    return NodeInventory(source="test", emitted_at=T0, node=node, driver_version="550.90.07", gpus=tuple(
        GpuInfo(uuid=f"GPU-{i}", index=i, model="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                pci_bus_id=f"00000000:0{i}:00.0", compute_capability="8.0") for i in range(n)))


def _frame(columns: dict[str, list], node: str = "n1") -> GpuFrame:
    n = len(next(iter(columns.values())))
    return GpuFrame.build(sampled_at=T0, nodes=(node,), bounds=(0, n), gpu_uuid=[f"GPU-{i}" for i in range(n)],
                          gpu_index=list(range(n)), columns=columns)


def test_missing_values_are_not_written() -> None:
    frame = _frame({"util_pct": [42.6, 0.0], "temperature_c": [None, 31.0], "mem_used_mib": [1000, None],
                    "mem_total_mib": [81920, 81920], "power_w": [None, None]})
    text = render_dcgm_metrics(_inventory(2), frame)
    assert "DCGM_FI_DEV_POWER_USAGE" not in text          # missing on every GPU: no family at all
    assert "DCGM_FI_DEV_SM_CLOCK" not in text             # a column the frame never had
    assert len(re.findall(r"^DCGM_FI_DEV_GPU_TEMP\{", text, re.M)) == 1
    assert len(re.findall(r"^DCGM_FI_DEV_FB_FREE\{", text, re.M)) == 1   # free needs used and total
    rows = {r["gpu_index"]: r for r in parse_dcgm_metrics(text).rows()}
    assert rows[0]["util_pct"] == 43                       # GPU_UTIL is an int64 field: 42.6 -> 43
    assert "temperature_c" not in rows[0] and rows[1]["temperature_c"] == 31
    assert rows[0]["mem_used_mib"] == 1000 and rows[0]["mem_total_mib"] == 81920   # 1000 + 80920 free
    assert "mem_used_mib" not in rows[1] and "mem_total_mib" not in rows[1]


def test_a_frame_of_several_nodes_is_cut_to_the_inventorys_node() -> None:
    a = _frame({"util_pct": [10.0, 20.0]}, node="n1")
    b = GpuFrame.build(sampled_at=T0, nodes=("n2",), bounds=(0, 1), gpu_uuid=["GPU-x"], gpu_index=[0],
                       columns={"util_pct": [90.0]})
    text = render_dcgm_metrics(_inventory(2), GpuFrame.concat([a, b]))
    assert [g.uuid for g in parse_dcgm_metrics(text).gpus] == ["GPU-0", "GPU-1"]
    with pytest.raises(ValueError, match="GPU-x"):
        render_dcgm_metrics(_inventory(1, node="n2"), b)


def test_pods_are_written_as_the_kubernetes_mapper_does() -> None:
    frame = _frame({"util_pct": [80.0, 0.0], "mem_used_mib": [30_000, 1], "mem_total_mib": [81920, 81920]})
    pods = {"GPU-0": [PodRef("ns-a", "a", "main"), PodRef("ns-b", "b", "")]}
    text = render_dcgm_metrics(_inventory(2), frame, pods=pods)
    assert len(re.findall(r'^DCGM_FI_DEV_GPU_UTIL\{gpu="0"', text, re.M)) == 2   # once per pod
    first = next(line for line in text.splitlines() if line.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0"'))
    assert first.endswith(',container="main",namespace="ns-a",pod="a"} 80')
    scrape = parse_dcgm_metrics(text)
    assert scrape.gpus[0].pods == (PodRef("ns-a", "a", "main"), PodRef("ns-b", "b", ""))
    assert scrape.gpus[1].pods == ()
    assert scrape.rows()[0]["util_pct"] == 80


def test_the_text_looks_like_the_real_exporters(dcgm_sample: str) -> None:
    fleet = _fleet()
    text = render_dcgm_metrics(fleet.inventory("a100-node"), fleet.node("a100-node").sample(NOW))

    def headers(t: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for line in t.splitlines():
            m = re.match(r"# (HELP|TYPE) (\S+) (.*)", line)
            if m:
                out.setdefault(m[2], []).append(f"{m[1]} {m[3]}")
        return out

    real, ours = headers(dcgm_sample), headers(text)
    shared = set(real) & set(ours)
    assert len(shared) >= 14                               # clocks, temps, power, util, FB, XID, remaps, tensor...
    assert {f: ours[f] for f in shared} == {f: real[f] for f in shared}

    def keys(t: str, family: str, gpu: str) -> list[str]:
        line = next(x for x in t.splitlines() if x.startswith(f'{family}{{gpu="{gpu}"'))
        return re.findall(r'(\w+)="', line)

    # the sample's idle GPU 2 carries no pod labels, as a GPU without pods here
    assert keys(text, "DCGM_FI_DEV_GPU_TEMP", "2") == keys(dcgm_sample, "DCGM_FI_DEV_GPU_TEMP", "2")
    assert re.search(r'^DCGM_FI_DEV_POWER_USAGE\{gpu="0".*\} \d+\.\d{6}$', text, re.M)   # double: %f
    assert re.search(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="0".*\} \d+$', text, re.M)             # int64: %d
    assert re.search(r'^DCGM_FI_PROF_PIPE_TENSOR_ACTIVE\{gpu="0".*\} 0\.\d{6}$', text, re.M)  # a ratio
