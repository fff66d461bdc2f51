"""One GPU catalog: every reader (placement, the GPU backends, the simulated fleet, the twin) sees the same
record for a model, every model any of them can produce resolves in it, and memory agrees everywhere."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

import gpuaware.gpu as gpu
import gpuaware.placement as placement
import gpuaware.placement.model as placement_model
from gpuaware.gpu import FleetNode, FleetSpec, ManualClock, SimulatedFleet
from gpuaware.schemas import CAPABILITIES, GPU_CATALOG, GpuModel, find_gpu_model, gpu_model, simulated_as
from gpuaware.sim.twin import Twin, default_cluster, gpu_memory_mib

T0 = 1_767_225_600.0
DISCLOSED = sorted(n for n, m in GPU_CATALOG.items() if m.memory_mib is not None)
UNDISCLOSED = sorted(n for n, m in GPU_CATALOG.items() if m.memory_mib is None)


def _fleet(models: list[str]) -> SimulatedFleet:
    nodes = tuple(FleetNode(f"n{k}", m, 2) for k, m in enumerate(models))
    return SimulatedFleet(FleetSpec(nodes, seed=1, occupancy=0.0, traces="synthetic"), clock=ManualClock(T0))


# --- the records -------------------------------------------------------------------------------------


def test_every_reader_holds_the_same_objects() -> None:
    assert placement.GPU_CATALOG is GPU_CATALOG and placement.GpuModel is GpuModel is gpu.GpuModel
    assert placement_model.CAPABILITIES is CAPABILITIES
    assert {m.nvml_name: m for m in GPU_CATALOG.values() if m.nvml_name} == dict(gpu.MODELS)


@pytest.mark.parametrize("name", sorted(GPU_CATALOG))
def test_records_are_consistent(name: str) -> None:
    m = GPU_CATALOG[name]
    assert m.name == name
    assert m.mig == bool(m.mig_profiles)  # MIG-capable exactly when profiles are known
    if m.memory_mib is None:  # undisclosed (openb's G1..G3): no identity, no physics, a stand-in
        assert not m.nvml_name and not m.simulatable and simulated_as(m).simulatable
        assert simulated_as(m) is GPU_CATALOG[m.stand_in]
    else:
        assert m.nvml_name and m.simulatable and simulated_as(m) is m and not m.stand_in
        assert m.nvlink == (m.nvlink_links > 0)
        assert all(p.memory_mib <= m.memory_mib for p in m.mig_profiles)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("A100", "A100"),  # openb / FGD short name
        ("A100-80GB", "A100"),  # the fleet's and the telemetry service's default alias
        ("NVIDIA A100-SXM4-80GB", "A100"),  # nvmlDeviceGetName
        ("NVIDIA-A100-SXM4-80GB", "A100"),  # GFD's nvidia.com/gpu.product label
        ("A100-SXM4-80GB", "A100"),  # an older driver's NVML name, as FGD's table lists it
        ("Tesla-T4", "T4"),  # FGD's label form: dashes for spaces
        ("tesla t4", "T4"),  # case does not matter
        ("V100", "V100M32"),
        ("Tesla V100-SXM2-16GB", "V100M16"),
        ("GeForce RTX 2080 Ti", "2080"),
        ("H100-80GB", "H100"),
        ("A100-40GB", "A100-40GB"),
        ("G2", "G2"),
    ],
)
def test_lookup_by_any_name(name: str, expected: str) -> None:
    assert find_gpu_model(name) is GPU_CATALOG[expected]
    assert gpu.model(name) is GPU_CATALOG[expected]


def test_unknown_model_is_none_or_a_permanent_error_naming_the_known() -> None:
    assert find_gpu_model("B200") is None and gpu.find_model("B200") is None
    with pytest.raises(ValueError, match=r"unknown GPU model 'B200'; known: .*A100.*V100M32"):
        gpu_model("B200")


@pytest.mark.parametrize(
    "name, memory_mib",
    [
        # what a current driver's NVML reports (reserved memory included): FB_USED + FB_FREE + FB_RESERVED of the
        # dcgm-exporter sample = 81,920; mig-profiles.yaml total_memory_mib for A100 40GB and H100
        ("A100", 81920),
        ("A100-40GB", 40960),
        ("H100", 81559),
        ("T4", 15360),
        ("V100M32", 32768),
        ("L4", 23034),
        # no current-driver figure at hand: FGD's table (an older driver's total, reserved memory left out)
        ("V100M16", 16160),
        ("P100", 16280),
        ("K80", 11441),
        # openb's undisclosed types
        ("G1", None),
        ("G3", None),
    ],
)
def test_one_memory_figure_per_model(name: str, memory_mib: int | None) -> None:
    assert GPU_CATALOG[name].memory_mib == memory_mib


def test_has_knows_only_the_capabilities() -> None:
    h100 = GPU_CATALOG["H100"]
    assert all(h100.has(c) for c in CAPABILITIES) and not GPU_CATALOG["T4"].has("nvlink")
    with pytest.raises(ValueError, match="unknown capability 'power_limit_w'"):
        h100.has("power_limit_w")


def test_placement_still_builds_ad_hoc_models() -> None:
    # placement's constructor order (name, memory, tensor cores, fp8, nvlink, mig) is the record's first six
    m = GpuModel("X", 1000, True, False, True, False)
    assert (m.memory_mib, m.has("tensor_cores"), m.has("nvlink"), m.simulatable) == (1000, True, True, False)


def test_placement_does_not_import_the_gpu_backends() -> None:
    code = "import sys, gpuaware.placement; print(sorted({'pynvml', 'prometheus_client'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- memory agrees everywhere ------------------------------------------------------------------------


@pytest.mark.parametrize("name", DISCLOSED)
def test_placement_and_telemetry_see_the_same_memory(name: str) -> None:
    record = GPU_CATALOG[name]
    cluster = placement.Cluster([placement.NodeSpec("n", 8000, 8000, 2, name)])
    fleet = _fleet([name])
    inventory = fleet.inventory("n0")
    frame = fleet.sample(T0)
    assert cluster.models[0].memory_mib == record.memory_mib  # what placement filters on
    assert gpu.MODELS[record.nvml_name].memory_mib == record.memory_mib  # what the GPU backends look up
    assert {g.memory_mib for g in inventory.gpus} == {record.memory_mib}  # what the agent announces
    assert {g.model for g in inventory.gpus} == {record.nvml_name}
    assert set(frame.column("mem_total_mib").tolist()) == {record.memory_mib}  # what it samples
    assert gpu_memory_mib(name) == record.memory_mib  # what the twin's truth accounts


# --- every model anyone produces resolves ------------------------------------------------------------


def test_every_catalog_model_can_be_simulated() -> None:
    fleet = _fleet(sorted(GPU_CATALOG))
    for k, name in enumerate(sorted(GPU_CATALOG)):
        reported = {g.model for g in fleet.inventory(f"n{k}").gpus}
        assert reported == {simulated_as(GPU_CATALOG[name]).nvml_name}
        assert all(find_gpu_model(r) is not None for r in reported)


def _twin_models(twin: Twin) -> set[str]:
    produced = {g.model for g in twin.gpus.values()}
    assert twin.fleet is not None
    produced |= {g.model for inv in twin.fleet.inventories() for g in inv.gpus}
    return produced


def test_every_model_the_twin_and_its_fleet_produce_resolves() -> None:
    twin = Twin(default_cluster(16), start=T0)
    produced = _twin_models(twin)
    assert {"H100", "A100", "V100M32", "T4", "L4", "NVIDIA A100-SXM4-80GB", "Tesla T4"} <= produced
    assert [m for m in produced if find_gpu_model(m) is None] == []
    # the truth and the telemetry agree on every GPU's memory
    assert twin.fleet is not None
    by_uuid = {g.uuid: g.memory_mib for inv in twin.fleet.inventories() for g in inv.gpus}
    assert {u: g.memory_mib for u, g in twin.gpus.items()} == by_uuid


def _openb_node_lists(shared_data: Path) -> list[Path]:
    lists = sorted((shared_data / "openb").glob("*node*.csv"))
    if not lists:
        pytest.skip(f"no openb node list (*node*.csv) under {shared_data / 'openb'}: set GPUAWARE_SHARED_DATA")
    return lists


def test_every_openb_node_model_resolves(shared_data: Path) -> None:
    models: set[str] = set()
    for path in _openb_node_lists(shared_data):
        with path.open(newline="") as fh:
            models |= {row["model"].strip() for row in csv.DictReader(fh) if row["model"].strip()}
    assert {"G2", "T4", "P100", "V100M16", "G3", "V100M32", "A10"} <= models
    assert sorted(m for m in models if find_gpu_model(m) is None) == []
    # and a twin of one node per openb model builds its fleet: the undisclosed ones on their stand-ins
    nodes = [placement.NodeSpec(f"openb-{m.lower()}", 64_000, 262_144, 2, m) for m in sorted(models)]
    twin = Twin(nodes, start=T0)
    assert [m for m in _twin_models(twin) if find_gpu_model(m) is None] == []
    assert {g.model: g.memory_mib for g in twin.gpus.values()}["G2"] == 0  # undisclosed: not accounted
