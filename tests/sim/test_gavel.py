"""Gavel matrices load; the throughput plugin raises normalised throughput at equal allocation."""

from __future__ import annotations

from pathlib import Path

from gpuaware.sim.gavel import default_profiles, evaluate_heterogeneity, load_gavel_throughputs

SMALL = {"a": {"V100M32": 4.0, "P100": 2.0, "K80": 1.0}, "b": {"V100M32": 1.0, "P100": 1.0, "K80": 1.0},
         "c": {"V100M32": 2.0, "P100": 2.0, "K80": 0.5}}


def test_throughput_profiles_beat_plain_packing() -> None:
    res = evaluate_heterogeneity(SMALL, default_profiles(SMALL), load=0.8, seeds=(1,))
    assert res["BestFit+Throughput"]["normalized_throughput"] > res["BestFit"]["normalized_throughput"]
    assert res["BestFit+Throughput"]["alloc_pct"] == res["BestFit"]["alloc_pct"]


def test_gavel_matrix_loads(shared_data: Path) -> None:
    m = load_gavel_throughputs(shared_data / "gavel" / "simulation_throughputs.json")
    assert len(m) == 26
    row = m["ResNet-50 (batch size 64)"]
    assert row["V100M16"] == row["V100M32"] > row["P100"] > row["K80"] > 0
