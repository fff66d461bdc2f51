"""The waste-gradient terms by hand: CPU per GPU, stranded GPU, and the gap-waste table."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import cpu_only, node, share

from gpuaware.placement import OURS, POLICIES, Cluster, CycleState, Decision, TypicalPods, policy
from gpuaware.placement.waste import WasteGradientScore, cpu_per_gpu_milli, gap_waste_table


def test_cpu_per_gpu_milli() -> None:
    # GPU pods only, p = 0.25 each: (0.25*4000 + 0.25*12000) / (0.25*500 + 0.25*1000) = 4000/375
    t = TypicalPods.from_counts({(4000, 1, 500, ""): 1, (12000, 1, 1000, ""): 1, (8000, 0, 0, ""): 2})
    assert cpu_per_gpu_milli(t) == pytest.approx(4000 / 375)


@pytest.mark.parametrize(
    "g, expected",
    [
        (300, 300.0),  # nothing fits: the whole gap is wasted
        (500, 250.0),  # phi = min(1, 1*0.5) = 0.5; 0.5*500 + 0.5*W(0) = 250
        (700, 450.0),  # 0.5*700 + 0.5*W(200) = 350 + 100
        (1000, 125.0),  # phi = 1; (0.5*W(500) + 0.5*W(0)) / 1 = 125
    ],
)
def test_gap_waste_table(g: int, expected: float) -> None:
    # one-GPU shares: 500 and 1000 milli, equally likely; kappa = 1
    t = TypicalPods.from_counts({(1000, 1, 500, ""): 1, (1000, 1, 1000, ""): 1})
    assert gap_waste_table(t, kappa=1.0)[g] == pytest.approx(expected)


def test_scarcity_makes_rare_fits_worthless() -> None:
    # a 190 gap only fits the rare 160 share (1%): with kappa 30 it is filled 30% of the time
    t = TypicalPods.from_counts({(1000, 1, 160, ""): 1, (1000, 1, 810, ""): 99}, popularity=1.0)
    w = gap_waste_table(t, kappa=30.0)
    assert w[190] == pytest.approx(0.7 * 190 + 0.3 * 30)
    assert gap_waste_table(t, kappa=1e6)[190] == pytest.approx(30.0)  # unlimited small pods


def test_stranding_keeps_cpu_next_to_gpus() -> None:
    # typical pod (10000 CPU, 1 GPU): rho = 10 CPU milli per GPU milli.
    # A CPU-only 8000 pod on "tight" (12000 CPU, 2 idle GPUs): CPU 4000 left;
    #   FGD: the typical pod no longer fits -> F 0 -> 2000;  stranded: max(0, 2000 - 1200) = 800 -> 2000 - 400 = 1600
    #   waste grows 2000 + 2*(1600 - 800) = 3600 -> 100*sigmoid(-3.6) = 2
    # on "roomy" (64000 CPU): nothing changes -> 50
    t = TypicalPods.from_counts({(10000, 1, 1000, ""): 1})
    c = Cluster([node("tight", cpu=12_000), node("roomy", cpu=64_000)])
    plugin = WasteGradientScore(t, strand=2.0, gap=0.0)
    assert plugin.rho == 10.0
    assert list(plugin.score(CycleState(), cpu_only(cpu=8000), c.snapshot(), np.arange(2))) == [2, 50]


def test_ours_is_registered_with_its_variants() -> None:
    assert OURS == "WasteGradient" and OURS in POLICIES
    assert {"WasteGradient-StrandOnly", "WasteGradient-GapOnly", "FGD-Float"} <= set(POLICIES)
    t = TypicalPods.from_counts({(1000, 1, 500, ""): 1})
    d = policy(OURS, typical=t).schedule(share(milli=500, cpu=1000), Cluster([node("a")]).snapshot())
    assert isinstance(d, Decision) and d.gpus == (0,)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="kappa"):
        WasteGradientScore(TypicalPods.from_counts({(1000, 1, 500, ""): 1}), kappa=0)
