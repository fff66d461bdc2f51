"""The node series loader (10-minute max, missing minutes said, gaps held) and the outlooks' alignment:
row ``o`` of an outlook forecasts the steps after ``o``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuaware.power import NodeSeriesError, load_node_series, persistence_outlook
from gpuaware.power.outlook import _by_origin


def write(tmp_path: Path, rows: list[tuple[str, int, int]]) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text("time,active,total\n" + "".join(f"{t},{a},{n}\n" for t, a, n in rows))
    return path


def test_the_ten_minute_max_with_missing_minutes_and_gaps_said(tmp_path: Path) -> None:
    rows = [(f"2017-12-01 00:{m:02d}:00", 10 + m, 20) for m in range(10)]  # a full step, max 19
    rows += [("2017-12-01 00:10:00", 5, 20), ("2017-12-01 00:13:00", 0, 20)]  # partial, an outage minute
    rows += [("2017-12-01 00:30:00", 7, 21)]  # 00:20 has no minute at all; 00:30 has one of ten
    s = load_node_series(write(tmp_path, rows))
    assert s.active[:2].tolist() == [19.0, 5.0] and np.isnan(s.active[2]) and s.active[3] == 7.0
    assert s.total[3] == 21.0 and s.start == 1512086400.0 and s.step_s == 600.0
    assert "18 of 31 minutes missing: 2 steps take the max of the minutes they have, 1 of 4 steps have none" in s.notes[0]
    assert any("1 minutes with active == 0" in n for n in s.notes)
    active, total = s.held()
    assert active.tolist() == [19, 5, 5, 7] and total.tolist() == [20, 20, 20, 21]
    w = s.window("2017-12-01 00:10", "2017-12-01 00:30")
    assert w.active.tolist()[0] == 5.0 and len(w) == 2 and w.start == s.start + 600
    assert w.notes[-1].endswith("2 steps, 1 without a sample")


def test_a_file_that_cannot_be_a_node_series_says_why(tmp_path: Path) -> None:
    with pytest.raises(NodeSeriesError, match="not found"):
        load_node_series(tmp_path / "absent.csv")
    (tmp_path / "bad.csv").write_text("time,active\n2017-12-01,3\n")
    with pytest.raises(NodeSeriesError, match="total"):
        load_node_series(tmp_path / "bad.csv")


def test_persistence_rows_hold_the_step_just_observed_until_the_range_ends() -> None:
    o = persistence_outlook(np.array([5.0, 6, 7]), 2)
    assert o.point[0].tolist() == [5.0, 5.0] and o.point[1, 0] == 6.0
    assert np.isnan(o.point[1, 1]) and np.isnan(o.point[2]).all()


def test_forecasts_by_target_become_rows_by_origin() -> None:
    # forecasts[h][k] is target k from origin k - h; here its value says which origin issued it
    by_target = {h: np.arange(6, dtype=np.float64) * 10 - h * 10 + h for h in (1, 2)}
    rows = _by_origin(by_target, 6, 2)
    assert rows[0].tolist() == [1.0, 2.0]  # origin 0 -> target 1 at h=1, target 2 at h=2
    assert rows[3].tolist() == [31.0, 32.0]
    assert rows[4, 0] == 41.0 and np.isnan(rows[4, 1]) and np.isnan(rows[5]).all()
