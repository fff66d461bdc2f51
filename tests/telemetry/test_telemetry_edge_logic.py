"""Pure edge logic, table by table: anomaly flags, attribution, validation, batch -> columns, windows."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest
from telemetry_helpers import T0, flat_trace, frame_of, quiet_fleet

from gpuaware.gpu import EventKind, GpuEvent, ManualClock, PodLoad
from gpuaware.schemas import Anomaly, GpuSampled, GpuSlice, PodBound, PodFinished, PodOutcome, RollupWindow
from gpuaware.telemetry import (
    DB_COLUMN_OF,
    AllocationLedger,
    AnomalyDetector,
    Limits,
    NodeEdge,
    PodAlloc,
    UsageAccumulator,
    WindowClock,
    attribute,
    check_batch,
    flag_names,
    rollup_messages,
    tenant_of,
    to_columns,
)
from gpuaware.tsdb import SAMPLE_COLUMNS

# --- anomaly flags ----------------------------------------------------------------------------------

BASE = {"throttle_reasons": [0], "mem_used_mib": [1000], "mem_total_mib": [80_000], "ecc_uncorrected_volatile": [0],
        "ecc_corrected_volatile": [0], "remapped_rows_uncorrectable": [0], "pcie_replay": [0], "nvlink_up": [12],
        "row_remap_pending": [0]}


def _frame(at: float = T0, **changes) -> object:
    cols = {k: list(v) for k, v in BASE.items()}
    cols.update({k: [v] for k, v in changes.items()})
    return frame_of(cols, at=at)


def _event(kind: EventKind, code: int = 0) -> GpuEvent:
    return GpuEvent(node="n", gpu_uuid="GPU-0", gpu_index=0, kind=kind, at=T0 + 1, code=code)


@pytest.mark.parametrize("changes, events, expected", [
    ({}, (), []),
    # levels: throttle bits 0x20 (SW thermal) / 0x4 (SW power cap); 0x1 (idle) is not an anomaly
    ({"throttle_reasons": 0x20}, (), ["THERMAL"]),
    ({"throttle_reasons": 0x4 | 0x1}, (), ["POWER_CAPPED"]),
    ({"throttle_reasons": 0x1}, (), []),
    # 76,000 of 80,000 MiB = 95 %: full
    ({"mem_used_mib": 76_000}, (), ["MEMORY_FULL"]),
    ({"mem_used_mib": 75_999}, (), []),
    ({"row_remap_pending": 1}, (), ["ROW_REMAP"]),
    # growth since the previous read
    ({"ecc_uncorrected_volatile": 2}, (), ["ECC_UNCORRECTED"]),
    ({"ecc_corrected_volatile": 1}, (), ["ECC_CORRECTED"]),
    ({"remapped_rows_uncorrectable": 1}, (), ["ROW_REMAP"]),
    ({"pcie_replay": 5}, (), ["PCIE_REPLAY"]),
    ({"nvlink_up": 10}, (), ["NVLINK_DOWN"]),
    # events: XID 79 is critical, 13 an application error; a lost GPU
    ({}, (_event(EventKind.XID, 79),), ["XID"]),
    ({}, (_event(EventKind.XID, 13),), ["XID_APPLICATION"]),
    ({}, (_event(EventKind.GPU_LOST),), ["GPU_LOST"]),
    ({"throttle_reasons": 0x40}, (_event(EventKind.XID, 48),), ["THERMAL", "XID"]),
])
def test_anomaly_flags(changes: dict, events: tuple, expected: list) -> None:
    detector = AnomalyDetector()
    assert detector.update(_frame()).tolist() == [0]  # the first read is the baseline
    flags = detector.update(_frame(T0 + 1, **changes), events)
    assert flag_names(int(flags[0])) == expected


def test_counters_that_go_down_rebaseline_silently() -> None:
    detector = AnomalyDetector()
    detector.update(_frame(ecc_uncorrected_volatile=5))
    assert detector.update(_frame(T0 + 1, ecc_uncorrected_volatile=0)).tolist() == [0]  # driver reload
    assert detector.update(_frame(T0 + 2, ecc_uncorrected_volatile=1)).tolist() == [Anomaly.ECC_UNCORRECTED]


def test_flags_travel_with_the_sampled_row() -> None:
    clock = ManualClock(T0)
    fleet = quiet_fleet(1, 2, [flat_trace(40)], clock=clock)
    node = fleet.node("node-0")
    edge = NodeEdge("node-0", source="test")
    for _ in range(40):  # backed off to a long heartbeat
        edge.observe(node.sample(clock.now), clock.now, events=node.events())
        clock.advance(1)
    out = edge.observe(node.sample(clock.now), clock.now, events=[GpuEvent(
        node="node-0", gpu_uuid=fleet.uuids[1], gpu_index=1, kind=EventKind.XID, at=clock.now, code=79)])
    assert out.sampled is not None and out.sampled.gpu_uuid == (fleet.uuids[1],)
    assert out.sampled.anomaly_flags == (Anomaly.XID,)


# --- attribution ------------------------------------------------------------------------------------

def _pod(name: str, milli: int, tenant: str = "t", memory: int = 0, gpu: str = "GPU-0") -> PodAlloc:
    return PodAlloc(namespace="ns", pod=name, gpu_uuid=gpu, milli=milli, tenant=tenant, memory_mib=memory)


@pytest.mark.parametrize("util, mem, pods, weights, expected", [
    # 50 % split 300:700 -> 15 and 35; memory 10,000 MiB split by the memory given, 20,000:60,000 -> 1:3
    (50.0, 10_000.0, [_pod("a", 300, memory=20_000), _pod("b", 700, memory=60_000)], None,
     [(15.0, 2_500.0), (35.0, 7_500.0)]),
    # no memory stated: memory follows the share too
    (40.0, 1_000.0, [_pod("a", 250), _pod("b", 250)], None, [(20.0, 500.0), (20.0, 500.0)]),
    # alone on the GPU: charged everything, even beyond its 300 milli
    (80.0, 4_000.0, [_pod("a", 300)], None, [(80.0, 4_000.0)]),
    # measured per-process weights override the shares (3:1)
    (60.0, None, [_pod("a", 500), _pod("b", 500)], [3.0, 1.0], [(45.0, None), (15.0, None)]),
    # no utilisation reading (MIG): nothing to split
    (None, 100.0, [_pod("a", 500), _pod("b", 500)], None, [(None, 50.0), (None, 50.0)]),
    ([], [], [], None, []),
])
def test_attribute(util, mem, pods, weights, expected) -> None:
    if pods:
        got = attribute(util, mem, pods, weights)
        assert [[None if v is None else round(v, 9) for v in pair] for pair in got] == [list(p) for p in expected]
    else:
        assert attribute(50.0, 1.0, []) == []


def test_usage_accumulates_per_pod_and_tenant_and_adds_up_to_the_gpu() -> None:
    acc = UsageAccumulator()
    shared = (_pod("a", 300, "t1"), _pod("b", 700, "t2"))
    alone = (_pod("c", 1000, "t1", gpu="GPU-1"),)
    for _ in range(60):  # 60 reads of 1 s: GPU-0 at 50 %, GPU-1 at 30 %
        acc.add(1.0, {"GPU-0": (50.0, 8_000.0), "GPU-1": (30.0, 1_000.0)}, {"GPU-0": shared, "GPU-1": alone})
    usage = {u.pod: u for u in acc.flush()}
    # a: 50 % x 0.3 = 15 % for 60 s -> 9 GPU-s used, 0.3 x 60 = 18 held; b: 35 % -> 21 used, 42 held
    # c: 30 % x 60 s = 18 used, 60 held
    assert {p: (round(u.gpu_seconds_used, 9), round(u.gpu_seconds_allocated, 9)) for p, u in usage.items()} == {
        "a": (9.0, 18.0), "b": (21.0, 42.0), "c": (18.0, 60.0)}
    assert (usage["a"].util_pct_avg, usage["b"].util_pct_max, usage["a"].seconds) == pytest.approx((15.0, 35.0, 60))
    tenants: dict[str, float] = {}
    for u in usage.values():
        tenants[u.tenant] = tenants.get(u.tenant, 0.0) + u.gpu_seconds_used
    assert tenants == pytest.approx({"t1": 27.0, "t2": 21.0})
    # the shared GPU's parts add up to the GPU: 9 + 21 = 50 % x 60 s
    assert usage["a"].gpu_seconds_used + usage["b"].gpu_seconds_used == pytest.approx(0.5 * 60)
    assert acc.flush() == []


@pytest.mark.parametrize("queue, namespace, tenant", [("team-a", "ns", "team-a"), ("default", "ns", "ns"),
                                                      (None, "ns", "ns")])
def test_tenant_is_the_queue_else_the_namespace(queue, namespace, tenant) -> None:
    assert tenant_of(queue, namespace) == tenant


def _bound(uid: str, node: str = "node-a", milli: int = 500, queue: str = "q1") -> PodBound:
    return PodBound(source="binder", emitted_at=T0, pod_uid=uid, pod_name=f"pod-{uid}", namespace="ns", node=node,
                    slices=(GpuSlice(gpu_uuid="GPU-0", gpu_index=0, gpu_milli=milli, memory_mib=1000),),
                    bound_at=T0, queue=queue)


def test_ledger_follows_bindings_of_its_node_and_a_late_bound_cannot_resurrect() -> None:
    ledger = AllocationLedger("node-a")
    assert ledger.bound(_bound("u1")) and not ledger.bound(_bound("u1"))  # the same binding again: no change
    assert not ledger.bound(_bound("u2", node="node-b"))
    assert [(a.pod, a.milli, a.tenant) for a in ledger.by_gpu()["GPU-0"]] == [("pod-u1", 500, "q1")]
    finished = PodFinished(source="binder", emitted_at=T0, pod_uid="u3", pod_name="pod-u3", namespace="ns",
                           outcome=PodOutcome.SUCCEEDED, finished_at=T0)
    assert not ledger.released(finished.pod_uid)  # finish overtook its binding
    assert not ledger.bound(_bound("u3"))
    assert ledger.released("u1") and ledger.by_gpu() == {}


def test_edge_reports_usage_per_window_charging_each_read_until_the_next() -> None:
    clock = ManualClock(T0)
    fleet = quiet_fleet(1, 1, [flat_trace(50)], clock=clock, pods=False)
    fleet.assign(("node-0", 0), PodLoad(name="a", namespace="t1", milli=300, trace=0, offset_s=0))
    fleet.assign(("node-0", 0), PodLoad(name="b", namespace="t2", milli=700, trace=0, offset_s=0))
    node, uuid = fleet.node("node-0"), fleet.uuids[0]
    allocs = {uuid: (PodAlloc("t1", "a", uuid, 300, "t1"), PodAlloc("t2", "b", uuid, 700, "t2"))}
    edge = NodeEdge("node-0", source="test", usage_window_s=60)
    reports = []
    for _ in range(121):  # reads at T0 .. T0+120: two full windows, the read at +120 opens the third
        out = edge.observe(node.sample(clock.now), clock.now, allocations=allocs)
        if out.usage is not None:
            reports.append(out.usage)
        clock.advance(1)
    assert [r.window_start for r in reports] == [T0, T0 + 60]
    # the GPU runs 15 % (a: 300 milli x 50) + 35 % (b: 700 milli x 50) = 50 %, split back 15 / 35
    for r in reports:
        by_pod = {u.pod: u for u in r.usage}
        assert by_pod["a"].gpu_seconds_used == pytest.approx(0.15 * 60)
        assert by_pod["b"].gpu_seconds_used == pytest.approx(0.35 * 60)
        truth = fleet.pod_utilization(T0)
        assert by_pod["a"].util_pct_avg == pytest.approx(truth[("t1", "a", uuid)])


# --- validation -------------------------------------------------------------------------------------

def _batch(n: int = 2, node: str = "node-a", **columns) -> GpuSampled:
    cols = {"util_pct": (50.0,) * n, "mem_used_mib": (1000,) * n, "mem_total_mib": (80_000,) * n,
            "power_w": (300.0,) * n, "power_limit_w": (400.0,) * n, "temperature_c": (60.0,) * n,
            "sm_clock_mhz": (1410,) * n}
    cols.update(columns)
    return GpuSampled(source="t", emitted_at=T0, node=node, sampled_at=T0, interval_s=1.0,
                      gpu_uuid=tuple(f"GPU-{i}" for i in range(n)), gpu_index=tuple(range(n)), **cols)


KNOWN = {"node-a": frozenset({"GPU-0", "GPU-1"})}


@pytest.mark.parametrize("batch, code", [
    (_batch(), None),
    (_batch(65, node="big"), "oversized"),                      # limit 64 GPUs
    (msgspec.structs.replace(_batch(), gpu_uuid=("GPU-0", "GPU-0")), "duplicate_gpu"),
    (_batch(node="node-z"), "no_inventory"),
    (msgspec.structs.replace(_batch(), gpu_uuid=("GPU-0", "GPU-9")), "unknown_gpu"),
    (_batch(mem_used_mib=(1000, 80_001)), "absurd_value"),      # more used than there is
    (_batch(power_w=(300.0, 601.0)), "absurd_value"),           # > 1.5 x the 400 W limit
    (_batch(power_w=(300.0, 600.0)), None),                     # = 1.5 x: a short excursion
    (_batch(power_limit_w=(0.0, None)), None),                  # no limit reported: nothing to compare
    (_batch(mem_total_mib=(None, 80_000), temperature_c=(None, 60.0)), None),
    (_batch(temperature_c=(60.0, 126.0)), "absurd_value"),
    (_batch(sm_clock_mhz=(1410, 4001)), "absurd_value"),
    (msgspec.structs.replace(_batch(), sampled_at=T0 + 301), "bad_timestamp"),  # 5 min skew allowed
    (msgspec.structs.replace(_batch(), sampled_at=math.inf), "bad_timestamp"),
])
def test_check_batch(batch: GpuSampled, code: str | None) -> None:
    known = KNOWN if batch.node != "big" else {"big": frozenset(batch.gpu_uuid)}
    rejection = check_batch(batch, known=known, now=T0, limits=Limits())
    assert (rejection.code if rejection else None) == code
    if rejection:
        assert batch.node in rejection.detail
        assert rejection.transient is (code == "no_inventory")


# --- batch -> columns -------------------------------------------------------------------------------

def test_columns_cover_the_table_and_map_the_contract() -> None:
    assert set(DB_COLUMN_OF.values()) == set(SAMPLE_COLUMNS[3:])
    b1 = _batch(2, remapped_rows_uncorrectable=(3, None), retired_pages=(None, 7), row_remap_pending=(True, None),
                ecc_uncorrected_volatile=(1, 2), anomaly_flags=(0, 0x20))
    b2 = _batch(1, node="node-b")  # collects fewer metrics: the missing ones are NULL for its rows
    cols = to_columns([b1, b2])
    assert cols.node == ["node-a", "node-a", "node-b"] and cols.gpu_uuid == ["GPU-0", "GPU-1", "GPU-0"]
    assert cols.ts.tolist() == [T0] * 3
    m = cols.metrics
    assert m["util_pct"].tolist() == [50.0] * 3
    assert m["ecc_volatile"].tolist() == [1, 2, -1]
    # rows out of service: remapped rows where reported, retired pages otherwise
    assert m["retired_rows"].tolist() == [3, 7, -1]
    assert m["retired_pages"].tolist() == [-1, 7, -1]
    assert m["row_remap_pending"].tolist() == [1, -1, -1]
    assert m["anomaly_flags"].tolist() == [0, 0x20, -1]
    assert np.isnan(m["mem_temperature_c"]).all() if "mem_temperature_c" in m else True


# --- closed windows ---------------------------------------------------------------------------------

@pytest.mark.parametrize("watermarks, expected", [
    # width 60, grace 30: the first call returns only the latest closed window
    ([T0 + 95], [[T0]]),                         # 95 - 30 = 65 -> [T0, T0+60) closed
    ([T0 + 89, T0 + 90], [[T0 - 60], [T0]]),     # 89 - 30 = 59 -> only the window before
    ([T0 + 95, T0 + 100, T0 + 330], [[T0], [], [T0 + 60, T0 + 120, T0 + 180, T0 + 240]]),
])
def test_window_clock(watermarks: list, expected: list) -> None:
    clock = WindowClock(60, 30)
    assert [clock.due(w) for w in watermarks] == expected


class _Row:
    def __init__(self, **kw) -> None:
        base = dict(node="n", gpu_uuid="GPU-0", samples=3, util_mean=50.0000000001, util_max=50.0, util_p95=51.0,
                    mem_util_mean=None, mem_util_max=None, mem_util_p95=None, mem_used_mean=10.0, mem_used_max=12.0,
                    mem_used_p95=11.0, temp_mean=None, temp_max=None, temp_p95=None, power_mean=None,
                    power_max=None, power_p95=None, tensor_mean=None, tensor_max=None, tensor_p95=None,
                    throttled_pct=25.0, ecc_uncorrected_delta=1, remapped_rows_delta=0, pcie_replay_delta=None,
                    xid_last=0, anomaly_flags=0x20)
        base.update(kw)
        self.__dict__.update(base)


def test_rollup_messages_clamp_rounding_and_group_by_node() -> None:
    msgs = rollup_messages([_Row(), _Row(node="m", gpu_uuid="GPU-9"), _Row(samples=0, gpu_uuid="GPU-x")],
                           window=RollupWindow.MINUTE, window_start=T0, gpu_index={"GPU-0": 3}, source="c",
                           emitted_at=T0)
    assert [m.node for m in msgs] == ["m", "n"]
    g = msgs[1].gpus[0]
    # a weighted mean an ulp above the max, a p95 above it: both clamped to the max
    assert (g.util_pct.mean, g.util_pct.max, g.util_pct.p95) == (50.0, 50.0, 50.0)
    assert (g.gpu_index, g.samples, g.temperature_c, g.xid_last, g.anomaly_flags) == (3, 3, None, None, 0x20)
    assert msgs[0].gpus[0].gpu_index == 0  # unknown index
