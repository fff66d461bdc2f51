"""Trace loaders on the shared data (read in place) and the synthetic fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuaware.gpu import (
    TraceBank,
    TraceError,
    UtilTrace,
    default_traces,
    load_gentd26,
    load_helios,
    synthetic_traces,
)


def test_gentd26(shared_data: Path) -> None:
    traces = load_gentd26(shared_data)
    # 57-s steps over 1441 slots (~22.8 h); pods present in >= 90 % of the slots only
    assert {t.step_s for t in traces} == {57.0}
    assert {len(t.values) for t in traces} == {1441}
    assert len(traces) >= 40 and all(t.kind == "duty" and t.source == "gentd26" for t in traces)
    values = np.concatenate([t.values for t in traces])
    assert values.min() == 0 and values.max() == pytest.approx(99.667, abs=0.01)  # PROVENANCE: 0..99.7 %
    assert 2 < values.mean() < 15  # a serving fleet idles a lot: PROVENANCE says mean 7 %, median 0
    assert len(load_gentd26(shared_data, 0.0)) > len(traces)


def test_helios(shared_data: Path) -> None:
    traces = load_helios(shared_data)
    assert all(t.kind == "allocation" and t.step_s == 60.0 and len(t.values) == 44_640 for t in traces)
    (vc3sl,) = [t for t in traces if t.name == "helios:vc3sl"]
    assert vc3sl.values[0] == pytest.approx(59 / 64)  # 2020-05-01 00:00: 59 of 64 GPUs running
    assert all(t.values.min() >= 0 and t.values.max() <= 1 for t in traces)


def test_auto_prefers_real_traces(shared_data: Path, tmp_path: Path) -> None:
    sources = {t.source for t in default_traces(shared_data, seed=0)}
    assert sources == {"gentd26", "helios"}
    assert {t.source for t in default_traces(tmp_path, seed=0)} == {"synthetic"}  # nothing there


def test_synthetic_is_seeded_and_diurnal() -> None:
    a, b, c = synthetic_traces(8, seed=1), synthetic_traces(8, seed=1), synthetic_traces(8, seed=2)
    assert all(np.array_equal(x.values, y.values) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0].values, c[0].values)
    mean = np.mean([t.values for t in a], axis=0)
    hourly = mean.reshape(24, 60).mean(axis=1)
    assert hourly[10:17].mean() > hourly[[0, 1, 2, 3, 22, 23]].mean() + 10  # afternoon peak, night trough


def test_bank_evaluates_many_traces_at_once() -> None:
    a = UtilTrace("x:a", np.array([1, 2, 3], dtype=np.float32), 10.0, "duty")
    b = UtilTrace("x:b", np.array([7, 8], dtype=np.float32), 60.0, "allocation")
    bank = TraceBank([a, b])
    rows, offsets = np.array([0, 1, 0, 1]), np.array([0.0, 0.0, 15.0, 60.0])
    # t=25: a[floor(25/10) % 3] = a[2] = 3; b[floor(25/60) % 2] = 7; a[floor(40/10) % 3] = a[1] = 2; b[1] = 8
    assert bank.values(rows, 25.0, offsets).tolist() == [3, 7, 2, 8]
    assert bank.allocation.tolist() == [False, True]


def test_missing_or_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found"):
        load_gentd26(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("value,when\n1,2\n")
    with pytest.raises(TraceError, match="missing column"):
        load_gentd26(bad)
    (tmp_path / "helios").mkdir()
    (tmp_path / "helios" / "vcX_cluster_sequence_vc.csv").write_text("running_gpu_num,total_gpu_num\n1,x\n")
    with pytest.raises(TraceError, match="unreadable"):
        load_helios(tmp_path)
