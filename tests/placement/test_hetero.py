"""The heterogeneity scorer: throughput on the node's GPU model over the best model, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import node

from gpuaware.placement import Cluster, CycleState, Decision, PodRequest, build_scheduler
from gpuaware.placement.hetero import ThroughputScore

MATRIX = {"resnet": {"V100M32": 4.0, "P100": 2.6, "K80": 0.6}, "lm": {"V100M32": 3.0, "P100": 3.0}}


@pytest.mark.parametrize(
    "job, expected",
    [
        ("resnet", [100, 65, 15]),  # 100*2.6/4 = 65; 100*0.6/4 = 15
        ("lm", [100, 100, 0]),  # equal on V100 and P100; unknown on K80 -> 0
        ("unknown", [0, 0, 0]),  # no row: neutral
    ],
)
def test_throughput_relative_to_best_model(job: str, expected: list[int]) -> None:
    c = Cluster([node("v", model="V100M32"), node("p", model="P100"), node("k", model="K80")])
    pod = PodRequest("j", 1000, 10, 1, 1000, job_type=job)
    got = ThroughputScore(MATRIX).score(CycleState(), pod, c.snapshot(), np.arange(3))
    assert list(got) == expected


def test_profile_steers_jobs_to_their_fastest_model() -> None:
    c = Cluster([node("k", model="K80"), node("p", model="P100"), node("v", model="V100M32")])
    profile = {"score": [{"name": "bestfit", "weight": 1},
                         {"name": "throughput", "weight": 10, "args": {"matrix": MATRIX}}], "gpu": "best"}
    d = build_scheduler(profile).schedule(PodRequest("j", 1000, 10, 1, 1000, job_type="resnet"), c.snapshot())
    assert isinstance(d, Decision) and d.node_name == "v"


def test_negative_throughput_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        ThroughputScore({"x": {"T4": -1.0}})
