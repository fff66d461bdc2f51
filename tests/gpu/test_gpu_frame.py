"""GpuFrame (columnar samples -> GpuSampled) and FrameWatch (events from consecutive frames)."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from gpuaware.gpu import COLUMNS, EventKind, FrameWatch, GpuFrame
from gpuaware.schemas import METRIC_COLUMNS, GpuSample, GpuSampled

T0 = 1_767_225_600.0


def frame(t: float = T0, **columns: list) -> GpuFrame:
    n = len(next(iter(columns.values()))) if columns else 2
    return GpuFrame.build(
        sampled_at=t,
        nodes=("a", "b"),
        bounds=(0, 1, n),
        gpu_uuid=[f"GPU-{i}" for i in range(n)],
        gpu_index=[0, *range(n - 1)],
        columns=columns,
    )


def test_columns_follow_the_schema() -> None:
    assert tuple(COLUMNS) == METRIC_COLUMNS
    assert (COLUMNS["util_pct"].kind, COLUMNS["util_pct"].lo, COLUMNS["util_pct"].hi) == ("f", 0, 100)
    assert COLUMNS["mem_used_mib"].kind == "i" and COLUMNS["row_remap_pending"].kind == "b"
    assert (COLUMNS["temperature_c"].lo, COLUMNS["temperature_c"].hi) == (-40, 150)


@pytest.mark.parametrize(
    "column, raw, expected, dropped",
    [
        ("util_pct", [50.5, None], [50.5, None], 0),
        ("util_pct", [101.0, -1.0], [None, None], 2),  # outside 0..100 (float: -1 is a value, not "missing")
        ("temperature_c", [2147483632, 45], [None, 45.0], 1),  # an int32 blank from a lost GPU
        ("mem_used_mib", [78264.0, 9.2e18], [78264, None], 1),  # DCGM int64 blank; floats become ints
        ("nvlink_up", [12, 37], [12, None], 1),  # at most 36 links
        ("row_remap_pending", [True, None], [True, None], 0),
        ("power_w", [math.inf, math.nan], [None, None], 1),  # inf is absurd, NaN is just missing
    ],
)
def test_build_sanitises_against_the_schema(column: str, raw: list, expected: list, dropped: int) -> None:
    f = frame(**{column: raw})
    assert [f.value(column, i) for i in range(2)] == expected
    assert f.dropped == dropped


def test_columns_are_read_only() -> None:
    f = frame(util_pct=[1.0, 2.0])
    with pytest.raises(ValueError):
        f.column("util_pct")[0] = 5.0


def test_to_messages_one_per_node_and_empty_columns() -> None:
    f = frame(util_pct=[10.0, 20.0, None], mem_used_mib=[1, 2, 3], xid_last=[None, None, None])
    a, b = f.to_messages(source="agent/x", interval_s=2.0, seq={"a": 7})
    assert (a.node, a.seq, a.gpu_uuid, a.util_pct, a.mem_used_mib) == ("a", 7, ("GPU-0",), (10.0,), (1,))
    assert (b.node, b.seq, b.gpu_uuid, b.gpu_index) == ("b", 0, ("GPU-1", "GPU-2"), (0, 1))
    assert b.util_pct == (20.0, None)  # one GPU does not report it: None inside the column
    assert b.xid_last == ()  # no GPU of the node reports it: not collected
    assert b.emitted_at == T0 and b.interval_s == 2.0
    for msg in (a, b):  # the wire form validates against the contract
        assert msgspec.json.decode(msgspec.json.encode(msg), type=GpuSampled) == msg


def test_rows_and_from_samples_round_trip() -> None:
    rows = [
        GpuSample(gpu_uuid="GPU-x", gpu_index=0, util_pct=12.5, mem_used_mib=100, row_remap_pending=False),
        GpuSample(gpu_uuid="GPU-y", gpu_index=1, temperature_c=61.0),
    ]
    f = GpuFrame.from_samples("n", T0, rows)
    assert list(f.rows()) == rows
    (msg,) = f.to_messages(source="s", interval_s=1.0)
    assert list(msg.rows()) == rows


def test_concat_and_for_node() -> None:
    one = frame(util_pct=[1.0, 2.0, 3.0])
    other = GpuFrame.from_samples("c", T0, [GpuSample(gpu_uuid="GPU-c", gpu_index=0, util_pct=4.0)])
    both = GpuFrame.concat([one, other])
    assert both.nodes == ("a", "b", "c") and both.bounds.tolist() == [0, 1, 3, 4]
    assert both.column("util_pct").tolist() == [1.0, 2.0, 3.0, 4.0]
    assert both.for_node("b").gpu_uuid == ("GPU-1", "GPU-2")
    assert both.node_of(3) == "c" and both.node_of(1) == "b"


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="bounds"):
        GpuFrame.build(sampled_at=T0, nodes=("a",), bounds=(0, 2), gpu_uuid=["x"], gpu_index=[0], columns={})
    with pytest.raises(ValueError, match="unknown metric"):
        frame(gpu_load=[1, 2])
    with pytest.raises(ValueError, match="shape"):
        frame(util_pct=[1.0, 2.0], mem_used_mib=[1])


@pytest.mark.parametrize(
    "series, expected",
    [
        # throttle bits per tick for GPU 1 -> events (tick, kind, bits that turned on)
        ([0x0, 0x20, 0x60, 0x60, 0x4], [(1, EventKind.THERMAL, 0x20), (2, EventKind.THERMAL, 0x40),
                                         (4, EventKind.POWER, 0x4)]),
        ([0x1, 0x1, 0x1], []),  # idle is not news
        ([0x20, 0x20], []),  # already throttling at the baseline
        ([None, 0x20], []),  # not comparable with a missing value
        ([0x0, 0x80 | 0x8], [(1, EventKind.POWER, 0x80)]),  # power brake; HW slowdown alone is neither
    ],
)  # fmt: skip
def test_throttle_transitions(series: list, expected: list) -> None:
    watch = FrameWatch()
    seen = []
    for tick, bits in enumerate(series):
        for e in watch.update(frame(T0 + tick, throttle_reasons=[0, bits])):
            assert e.gpu_index == 0 and e.node == "b"  # row 1 is GPU 0 of node b
            seen.append((tick, e.kind, e.code))
    assert seen == expected


@pytest.mark.parametrize(
    "column, series, kind, codes",
    [
        ("ecc_uncorrected_volatile", [0, 0, 2, 2, 3], EventKind.ECC_UNCORRECTED, [2, 1]),
        ("ecc_corrected_volatile", [5, 9, 0, 1], EventKind.ECC_CORRECTED, [4, 1]),  # reset to 0: re-baseline
        ("remapped_rows_uncorrectable", [0, 1], EventKind.ROW_REMAP, [1]),
    ],
)
def test_counter_growth(column: str, series: list, kind: EventKind, codes: list) -> None:
    watch = FrameWatch()
    events = [e for t, v in enumerate(series) for e in watch.update(frame(T0 + t, **{column: [0, v]}))]
    assert [(e.kind, e.code) for e in events] == [(kind, c) for c in codes]


def test_xid_gauge_only_when_asked() -> None:
    frames = [frame(T0 + t, xid_last=[0, v]) for t, v in enumerate([0, 79])]
    watch = FrameWatch(xid=True)
    assert [e.code for f in frames for e in watch.update(f)] == [79]
    watch = FrameWatch(xid=False)
    assert [e.code for f in frames for e in watch.update(f)] == []


def test_different_gpus_rebaseline() -> None:
    watch = FrameWatch()
    watch.update(frame(T0, throttle_reasons=[0, 0]))
    other = GpuFrame.from_samples(
        "z", T0 + 1, [GpuSample(gpu_uuid="GPU-z", gpu_index=0, throttle_reasons=0x20)]
    )
    assert watch.update(other) == []
    assert np.array_equal(other.present("throttle_reasons"), [True])
