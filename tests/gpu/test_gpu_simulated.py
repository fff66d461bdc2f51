"""The simulated fleet: deterministic, trace-driven, attributable to pods, faults visible, fast."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest

from gpuaware.gpu import (
    COLUMNS,
    EccErrorGrowth,
    EventKind,
    FleetNode,
    FleetSpec,
    GpuBackend,
    ManualClock,
    PodLoad,
    PowerCap,
    SimulatedFleet,
    ThermalRunaway,
    UtilTrace,
    XidBurst,
    load_gentd26,
    load_helios,
    parse_topo_matrix,
)
from gpuaware.schemas import GpuSampled, MigMode, ThrottleReason

T0 = 1_767_225_600.0
BUSY = UtilTrace("const:busy", np.array([90.0], dtype=np.float32), 60.0, "duty")
IDLE = UtilTrace("const:idle", np.array([0.0], dtype=np.float32), 60.0, "duty")


def small(seed: int = 11, **kw) -> SimulatedFleet:
    return SimulatedFleet(FleetSpec.uniform(3, 4, seed=seed, traces="synthetic", **kw), clock=ManualClock(T0))


def same(a, b) -> bool:
    return a.gpu_uuid == b.gpu_uuid and all(
        np.array_equal(a.column(c), b.column(c), equal_nan=COLUMNS[c].kind == "f") for c in COLUMNS
    )


# --- determinism ------------------------------------------------------------------------------------------
def test_same_seed_same_samples_whatever_the_call_order() -> None:
    times = [T0, T0 + 1, T0 + 3600.5, T0 + 86_400 * 3]
    a, b = small(), small()
    forward = [a.sample(t) for t in times]
    backward = [b.sample(t) for t in reversed(times)][::-1]
    assert all(same(x, y) for x, y in zip(forward, backward, strict=True))
    assert [i.gpus for i in a.inventories()] == [i.gpus for i in b.inventories()]
    assert a.assignments() == b.assignments()


def test_a_different_seed_is_a_different_fleet() -> None:
    a, b = small(seed=1), small(seed=2)
    assert a.uuids != b.uuids
    assert not np.array_equal(a.sample(T0).column("util_pct"), b.sample(T0).column("util_pct"))


def test_noise_changes_from_second_to_second_but_replays() -> None:
    fleet = small()
    one, two = fleet.sample(T0).column("temperature_c"), fleet.sample(T0 + 1).column("temperature_c")
    assert not np.array_equal(one, two)
    assert np.array_equal(fleet.sample(T0).column("temperature_c"), one)


# --- traces ------------------------------------------------------------------------------------------------
def fleet_with(traces: list[UtilTrace], nodes: int = 1, gpus: int = 4, **kw) -> SimulatedFleet:
    spec = FleetSpec.uniform(nodes, gpus, seed=3, traces=traces, occupancy=0.0, **kw)
    return SimulatedFleet(spec, clock=ManualClock(T0))


def test_duty_trace_is_replayed_verbatim() -> None:
    fleet = small(occupancy=0.0)
    trace = fleet.bank.traces[5]
    fleet.assign(("gpu-node-000", 2), PodLoad("replay", trace=trace.name, offset_s=0.0))
    for t in T0 + np.arange(0, 7200, 97.0):
        # one whole-GPU pod at offset 0: util(t) = trace[floor(t / 60) mod 1440]
        assert fleet.sample(t).value("util_pct", 2) == pytest.approx(trace.at(t), abs=1e-4)
        assert fleet.sample(t).value("util_pct", 1) == 0.0  # no pod there


def test_gentd26_duty_cycles_are_replayed(shared_data: Path) -> None:
    traces = load_gentd26(shared_data)
    trace = max(traces, key=lambda t: float(np.mean(t.values)))  # the busiest pod, so the check has teeth
    fleet = fleet_with(list(traces))
    fleet.assign(("gpu-node-000", 0), PodLoad("sd-serving", trace=trace.name, offset_s=0.0))
    steps = T0 + 57.0 * np.arange(1441)  # one sample per trace step over the whole ~22.8 h
    replayed = np.array([fleet.sample(t).value("util_pct", 0) for t in steps])
    expected = np.array([trace.at(t) for t in steps])
    np.testing.assert_allclose(replayed, expected, atol=1e-4)
    assert replayed.mean() == pytest.approx(float(trace.values.mean()), abs=1e-3)


def test_helios_allocation_share_drives_occupancy(shared_data: Path) -> None:
    (vc,) = load_helios(shared_data, ("vc3sl",))
    fleet = fleet_with([vc], nodes=50, gpus=8, noise_pct=0.0)
    for r in range(fleet.n_gpus):
        fleet.assign(r, PodLoad(f"train-{r}", trace=vc.name, offset_s=0.0))
    for t in T0 + np.array([0.0, 6 * 3600, 13 * 86_400 + 600]):
        share = vc.at(t)
        busy = np.mean(fleet.sample(t).column("util_pct") > 0)
        # 400 GPUs each busy iff its seeded rank < share: binomial, 4 sigma <= 0.1
        assert busy == pytest.approx(share, abs=0.1)


# --- pods ----------------------------------------------------------------------------------------------------
def test_usage_is_attributable_to_pods() -> None:
    a = UtilTrace("const:60", np.array([60.0], dtype=np.float32), 60.0, "duty")
    b = UtilTrace("const:30", np.array([30.0], dtype=np.float32), 60.0, "duty")
    fleet = fleet_with([a, b])
    gpu = fleet.uuids[1]
    fleet.assign(gpu, PodLoad("infer-a", "team-a", milli=500, trace="const:60", memory_mib=10_000))
    fleet.assign(gpu, PodLoad("infer-b", "team-b", milli=500, trace="const:30", memory_mib=20_000))
    # 60 % * 0.5 + 30 % * 0.5 = 45 %
    assert fleet.sample(T0).value("util_pct", 1) == pytest.approx(45.0)
    truth = fleet.pod_utilization(T0)
    assert truth == {
        ("team-a", "infer-a", gpu): pytest.approx(30.0),
        ("team-b", "infer-b", gpu): pytest.approx(15.0),
    }
    # duty-cycle pods hold their memory: 10000*(0.9+0.06) + 20000*(0.9+0.03) + 1 MiB driver = 28,201
    assert fleet.sample(T0).value("mem_used_mib", 1) == 28_201
    assert [p.name for p in fleet.assignments("gpu-node-000")[gpu]] == ["infer-a", "infer-b"]
    assert fleet.release("infer-a", "team-a") == 1
    assert fleet.sample(T0).value("util_pct", 1) == pytest.approx(15.0)


def test_bad_assignments_are_refused() -> None:
    fleet = small(occupancy=0.0)
    with pytest.raises(ValueError, match="milli"):
        fleet.assign(0, PodLoad("p", milli=0))
    with pytest.raises(KeyError, match="no GPU 9"):
        fleet.assign(("gpu-node-000", 9), PodLoad("p"))
    with pytest.raises(ValueError, match="no MIG profile"):
        SimulatedFleet(FleetSpec((FleetNode("m", mig={0: ("5g.50gb",)}),), traces="synthetic")).inventory("m")


# --- faults ---------------------------------------------------------------------------------------------------
@pytest.fixture
def busy() -> SimulatedFleet:
    fleet = fleet_with([BUSY, IDLE])
    for r in range(4):
        fleet.assign(r, PodLoad(f"p{r}", trace="const:busy", offset_s=0.0))
    return fleet


def test_ecc_growth_shows_in_counters_and_events(busy: SimulatedFleet) -> None:
    node = busy.node("gpu-node-000")
    busy.inject(
        EccErrorGrowth(("gpu-node-000", 1), start=T0 + 60, corrected_per_hour=100, uncorrected_per_hour=2)
    )
    before = node.sample(T0)
    after = node.sample(T0 + 60 + 1800)  # half an hour of growth: 50 corrected, 1 uncorrected
    assert before.value("ecc_uncorrected_volatile", 1) == 0
    assert (after.value("ecc_corrected_volatile", 1), after.value("ecc_uncorrected_aggregate", 1)) == (50, 1)
    assert (after.value("remapped_rows_uncorrectable", 1), after.value("row_remap_pending", 1)) == (1, True)
    assert after.value("retired_pages", 1) is None  # A100 remaps rows, it does not retire pages
    assert after.value("ecc_corrected_volatile", 0) == 0  # only the faulty GPU
    events = {(e.kind, e.gpu_index, e.code) for e in node.events()}
    assert events == {
        (EventKind.ECC_UNCORRECTED, 1, 1),
        (EventKind.ECC_CORRECTED, 1, 50),
        (EventKind.ROW_REMAP, 1, 1),
    }


def test_xid_burst(busy: SimulatedFleet) -> None:
    node = busy.node("gpu-node-000")
    busy.inject(XidBurst(("gpu-node-000", 3), start=T0 + 10, xid=79, count=3, interval_s=2.0))
    assert node.sample(T0 + 5).value("xid_last", 3) == 0
    assert node.sample(T0 + 15).value("xid_last", 3) == 79
    busy.clock.advance(20)
    events = node.events()
    assert [(e.kind, e.gpu_index, e.code, e.at) for e in events] == [
        (EventKind.XID, 3, 79, T0 + 10), (EventKind.XID, 3, 79, T0 + 12), (EventKind.XID, 3, 79, T0 + 14)
    ]  # fmt: skip
    assert node.events() == []  # each event once
    assert busy.node("gpu-node-000").events() == []  # a new backend starts at the clock's now


def test_thermal_runaway(busy: SimulatedFleet) -> None:
    node = busy.node("gpu-node-000")
    busy.inject(ThermalRunaway(("gpu-node-000", 0), start=T0, degrees_per_minute=3.0, duration_s=1800))
    start = node.sample(T0)
    hot = node.sample(T0 + 1200)  # +60 degrees after 20 minutes: past 87 (SW) and 92 (HW) slowdown
    assert hot.value("temperature_c", 0) == pytest.approx(start.value("temperature_c", 0) + 60, abs=2)
    bits = hot.value("throttle_reasons", 0)
    assert bits & ThrottleReason.SW_THERMAL_SLOWDOWN and bits & ThrottleReason.HW_THERMAL_SLOWDOWN
    assert hot.value("sm_clock_mhz", 0) < 1410 == hot.value("sm_clock_mhz", 1)
    assert [(e.kind, e.gpu_index) for e in node.events()] == [(EventKind.THERMAL, 0)]
    cooled = node.sample(T0 + 1800 + 1)  # the fault lasted 30 minutes
    assert cooled.value("temperature_c", 0) == pytest.approx(start.value("temperature_c", 0), abs=2)


def test_power_capping(busy: SimulatedFleet) -> None:
    node = busy.node("gpu-node-000")
    busy.inject(PowerCap(("gpu-node-000", 2), start=T0, cap_w=150.0, duration_s=600))
    normal = node.sample(T0 - 1)
    capped = node.sample(T0 + 1)
    # 90 % busy A100 wants 61 + (320 - 61) * 0.9 = 294 W; capped at 150 W
    assert normal.value("power_w", 2) == pytest.approx(294, abs=5) and normal.value("power_limit_w", 2) == 400
    assert capped.value("power_w", 2) <= 150 and capped.value("power_limit_w", 2) == 150
    assert capped.value("throttle_reasons", 2) & ThrottleReason.SW_POWER_CAP
    assert capped.value("sm_clock_mhz", 2) == pytest.approx(1410 * 150 / 294, abs=15)
    assert [(e.kind, e.gpu_index, e.code) for e in node.events()] == [
        (EventKind.POWER, 2, ThrottleReason.SW_POWER_CAP)
    ]
    assert node.sample(T0 + 601).value("power_limit_w", 2) == 400


def test_idle_gpus_look_idle(busy: SimulatedFleet) -> None:
    busy.release("p3")
    f = busy.sample(T0)
    # the dcgm-exporter sample's idle A100: 61 W, 210 MHz SM clock, GPU_IDLE; 1 MiB used
    idle = (f.value("power_w", 3), f.value("sm_clock_mhz", 3), f.value("throttle_reasons", 3))
    assert idle == (61.0, 210, ThrottleReason.GPU_IDLE)
    assert f.value("mem_used_mib", 3) == 1 and f.value("util_pct", 3) == 0.0


# --- inventory ------------------------------------------------------------------------------------------------
def test_inventory_topology_and_mig(k8s_facts: Path) -> None:
    pcie = parse_topo_matrix((k8s_facts / "topology" / "topo-pcie-4gpu.txt").read_text())
    spec = FleetSpec(
        nodes=(
            FleetNode("dgx", "A100-80GB", 8, rack="r1", mig={0: ("3g.40gb", "3g.40gb", "1g.10gb")}),
            FleetNode("box", "T4", 4, topology=pcie),
        ),
        seed=5,
        traces="synthetic",
    )
    fleet = SimulatedFleet(spec, clock=ManualClock(T0))
    dgx, box = fleet.inventory("dgx"), fleet.inventory("box")
    assert {g.nvlink_island for g in dgx.gpus} == {"dgx/nvl0"} and dgx.gpus[0].nvlink_links == 12
    assert [g.numa_node for g in dgx.gpus] == [0, 0, 0, 0, 1, 1, 1, 1] and dgx.rack == "r1"
    assert dgx.gpus[0].mig_mode is MigMode.ENABLED and dgx.gpus[1].mig_mode is MigMode.DISABLED
    assert [(m.profile, m.memory_mib) for m in dgx.gpus[0].mig_instances] == [
        ("3g.40gb", 40192), ("3g.40gb", 40192), ("1g.10gb", 9856)
    ]  # fmt: skip
    assert [g.nvlink_island for g in box.gpus] == [None] * 4
    assert [g.numa_node for g in box.gpus] == [0, 0, 1, 1]
    assert box.gpus[0].mig_mode is MigMode.UNSUPPORTED and box.gpus[0].model == "Tesla T4"
    t4 = fleet.sample(T0).for_node("box")
    assert t4.value("retired_pages", 0) == 0 and t4.value("remapped_rows_uncorrectable", 0) is None
    assert t4.value("nvlink_up", 0) is None
    assert msgspec.json.decode(msgspec.json.encode(dgx), type=type(dgx)) == dgx


def test_node_backends_follow_the_protocol() -> None:
    fleet = small()
    backends = fleet.backends()
    assert [b.node for b in backends] == ["gpu-node-000", "gpu-node-001", "gpu-node-002"]
    assert all(isinstance(b, GpuBackend) for b in backends)
    frame = backends[1].sample(T0)
    assert frame.gpu_uuid == fleet.uuids[4:8] and frame.nodes == ("gpu-node-001",)
    assert fleet.sample(T0) is fleet.sample(T0)  # one computation per tick, shared by the node backends


# --- scale (its speed is bench-telemetry's) -------------------------------------------------------------------
def test_ten_thousand_gpus_are_sampled_as_one_frame() -> None:
    fleet = SimulatedFleet(FleetSpec.uniform(1250, 8, seed=1, traces="synthetic"), clock=ManualClock(T0))
    fleet.sample(T0)
    for k in range(1, 6):
        frame = fleet.sample(T0 + k)
    assert len(frame) == 10_000
    messages = frame.to_messages(source="sim", interval_s=1.0)
    assert len(messages) == 1250
    decoded = msgspec.json.decode(msgspec.json.encode(messages[0]), type=GpuSampled)
    assert len(decoded.gpu_uuid) == 8 and len(decoded.util_pct) == 8
