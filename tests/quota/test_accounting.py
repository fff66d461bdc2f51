from __future__ import annotations

import pytest

from gpuaware.quota import Interval, charge, rows_to_csv


def test_charge_overlap_fraction_and_open_intervals():
    ivs = [
        # 500 milli for 3600 s -> 1800 GPU-s; 8 GiB for 3600 s -> 28800 GiB-s
        Interval("p1", "q1", "t1", 500, 8192, 0, 3600),
        # 2 GPUs from 3000, still running at until=4000 -> 2 * 1000 = 2000 GPU-s
        Interval("p2", "q2", "t1", 2000, 0, 3000, None),
        # before the window: nothing
        Interval("p3", "q3", "t2", 1000, 0, -100, -1),
    ]
    rows = charge(ivs, 0, 4000, by="queue")
    assert rows == [
        {"queue": "q2", "pods": 1, "gpu_seconds": 2000.0, "gpu_memory_gib_seconds": 0.0},
        {"queue": "q1", "pods": 1, "gpu_seconds": 1800.0, "gpu_memory_gib_seconds": 28800.0},
    ]
    by_tenant = charge(ivs, 0, 4000)
    assert by_tenant[0]["tenant"] == "t1" and by_tenant[0]["gpu_seconds"] == 3800.0
    assert rows_to_csv(rows).splitlines()[0] == "queue,pods,gpu_seconds,gpu_memory_gib_seconds"


def test_charge_refuses_bad_arguments():
    with pytest.raises(ValueError, match="by must be"):
        charge([], 0, 1, by="node")
    with pytest.raises(ValueError, match="before since"):
        charge([], 5, 1)
