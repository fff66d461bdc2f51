"""Departures and the pending queue: QoS order, retries on departure, delays by hand."""

from __future__ import annotations

import numpy as np

from gpuaware.placement import NodeSpec, PodRequest
from gpuaware.sim.online import inflate_trace, peak_demand, run_online
from gpuaware.sim.traces import TracePod


def tp(name: str, t0: float, t1: float, qos: str = "LS", num: int = 1, milli: int = 1000) -> TracePod:
    return TracePod(PodRequest(name, 1000, 100, num, milli, qos=qos), t0, t1)


def test_queue_is_served_by_qos_then_arrival_when_capacity_frees() -> None:
    # one GPU: A holds it 0..100 s; B (BE) arrives at 10, C (LS) at 20, both wait;
    # at 100 A leaves and C goes first (LS before BE): delay 80; C runs 50 s, so B starts at 150: delay 140
    nodes = [NodeSpec("n", 8000, 8000, 1, "T4")]
    trace = [tp("a", 0, 100), tp("b", 10, 60, qos="BE"), tp("c", 20, 70, qos="LS")]
    r = run_online(nodes, trace, "FGD", time_scale=1.0, inflation=0.0)
    assert (r.started, r.never_started) == (3, 0)
    assert list(r.delays_s["LS"]) == [0.0, 80.0] and list(r.delays_s["BE"]) == [140.0]
    assert r.series_pending.max() == 2
    # busy all the time until the last arrival at 20 -> mean allocation over [0, 20] = 100 %
    assert r.mean_alloc_pct == 100.0


def test_sharing_pods_fill_a_freed_gpu_together() -> None:
    nodes = [NodeSpec("n", 8000, 8000, 1, "T4")]
    trace = [tp("big", 0, 10), tp("s1", 1, 50, milli=500), tp("s2", 2, 50, milli=500)]
    r = run_online(nodes, trace, "WasteGradient", time_scale=1.0, inflation=0.0)
    assert sorted(r.delays_s["LS"]) == [0.0, 8.0, 9.0]  # both halves start when "big" leaves at 10


def test_inflation_and_peak_demand() -> None:
    trace = [tp(f"p{i}", i * 10, i * 10 + 5) for i in range(10)]  # 10 one-GPU pods, never overlapping
    assert peak_demand(trace, 2000, 1.0) == 0.5  # one pod at a time on 2 GPUs
    assert peak_demand(trace, 2000, 100.0) == 5.0  # arrivals 100x closer: all ten overlap
    grown = inflate_trace(trace, 10_000, 1.3, seed=1)
    assert sum(p.request.total_gpu_milli for p in grown) == 13_000
    assert len({p.request.name for p in grown}) == len(grown)


def test_every_policy_runs_online() -> None:
    rng = np.random.default_rng(3)
    nodes = [NodeSpec(f"n{i}", 32000, 65536, 4, "T4") for i in range(6)]
    trace = []
    for i in range(200):
        t = float(rng.uniform(0, 1000))
        milli = int(rng.choice([300, 500, 1000]))
        trace.append(TracePod(PodRequest(f"p{i}", 2000, 100, 1, milli, qos=str(rng.choice(["LS", "BE"]))),
                              t, t + float(rng.uniform(10, 300))))
    for name in ("Random", "BestFit", "FGD", "WasteGradient"):
        r = run_online(nodes, trace, name, time_scale=1.0, inflation=0.0)
        assert r.started + r.never_started == 200 and r.never_started == 0
        assert 0 < r.mean_alloc_pct <= 100
