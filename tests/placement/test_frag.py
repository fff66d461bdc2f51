"""Typical pods and the fragmentation arithmetic, by hand and against brute-force recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import node, occupy

from gpuaware.placement import Cluster, FragModel, FragState, TypicalPods
from gpuaware.placement.frag import frag_delta_share, frag_delta_whole, sigmoid_score

A = (1000, 1, 500, "")  # (CPU, GPUs, milli, types)
B = (2000, 1, 1000, "")
C = (4000, 0, 0, "")
D = (8000, 8, 1000, "")


@pytest.mark.parametrize(
    "counts, keys, p",
    [
        # 50 + 30 = 80 < 95; + 15 = 95 >= 95 -> keep A, B, C; renormalise by 95
        ({A: 50, B: 30, C: 15, D: 5}, (A, B, C), (50 / 95, 30 / 95, 15 / 95)),
        # 60 + 39 = 99 >= 95.95 (95% of 101) -> keep A, B; renormalise by 99
        ({A: 60, B: 39, C: 2}, (A, B), (60 / 99, 39 / 99)),
        # equal counts: the larger spec first (D before C before B before A), 4 x 25: need all 4? 75 < 95 -> all
        ({A: 25, B: 25, C: 25, D: 25}, (D, C, B, A), (0.25, 0.25, 0.25, 0.25)),
    ],
)
def test_typical_pods_cover_95_percent(counts: dict, keys: tuple, p: tuple) -> None:
    t = TypicalPods.from_counts(counts)
    assert t.keys == keys
    assert np.allclose(t.p, p)


def two_spec_model(cluster: Cluster) -> FragModel:
    # m1 = 500 milli sharing pod, m2 = whole GPU; each with probability 0.5, both need 1000 CPU
    return FragModel(TypicalPods.from_counts({A: 1, (1000, 1, 1000, ""): 1}), cluster.models)


@pytest.mark.parametrize(
    "used, cpu_used, expected",
    [
        # idle [1000, 1000]: both fit, no GPU below 500 or 1000 is partly free -> F = 0
        ({}, 0, 0.0),
        # [500, 1000]: m1 fits, nothing < 500 -> 0; m2 fits on GPU1, GPU0's 500 < 1000 counts -> 0.5*500 = 250
        ({0: 500}, 0, 250.0),
        # [500, 500]: m1 fits -> 0; m2 fits nowhere -> all idle 1000 counts -> 0.5*1000 = 500
        ({0: 500, 1: 500}, 0, 500.0),
        # [300, 1000]: m1 fits on GPU1, GPU0's 300 < 500 counts -> 300; m2: 300 counts -> F = 300
        ({0: 700}, 0, 300.0),
        # idle but 31500 of 32000 CPU used: both lack CPU -> all idle 2000 counts for each -> 2000
        ({}, 31_500, 2000.0),
    ],
)
def test_node_fragmentation_by_hand(used: dict, cpu_used: int, expected: float) -> None:
    c = Cluster([node("a", gpus=2, cpu=32_000)])
    occupy(c, "a", used, cpu_used)
    m = two_spec_model(c)
    snap = c.snapshot()
    assert m.node_frag(snap.gpu_free, snap.cpu_free, snap.model_idx)[0] == pytest.approx(expected)


def test_gpu_type_constraint_counts_all_idle_as_fragment() -> None:
    # a typical pod that only runs on V100M32 cannot use this T4 node: its 2000 idle milli all count
    c = Cluster([node("a", gpus=2, model="T4")])
    m = FragModel(TypicalPods.from_counts({(1000, 1, 500, "V100M32"): 1}), c.models)
    snap = c.snapshot()
    assert m.node_frag(snap.gpu_free, snap.cpu_free, snap.model_idx)[0] == 2000.0


@pytest.mark.parametrize(
    "delta, score",
    [
        (-250.0, 43),  # 100 * sigmoid(-0.25) = 43.78 -> 43
        (0.0, 50),  # 100 * 0.5
        (250.0, 56),  # 100 * sigmoid(0.25) = 56.22 -> 56
        (-2000.0, 11),  # 100 * sigmoid(-2) = 11.92 -> 11
        (-1e6, 0),  # saturates without overflow warnings
    ],
)
def test_sigmoid_score_truncates(delta: float, score: int) -> None:
    assert sigmoid_score(np.array([delta]))[0] == score


def brute_force(model: FragModel, left: np.ndarray, cpu: int, midx: int) -> float:
    return float(model.node_frag(left[None, :], np.array([cpu]), np.array([midx]))[0])


def test_incremental_deltas_match_recomputation() -> None:
    rng = np.random.default_rng(7)
    nodes = [node(f"n{i}", gpus=int(rng.choice([1, 2, 4, 8])), model=str(rng.choice(["T4", "G2"])),
                  cpu=int(rng.choice([8000, 32_000, 96_000]))) for i in range(40)]
    c = Cluster(nodes)
    for n in nodes:
        used = {g: int(rng.choice([0, 0, 100, 250, 500, 700, 1000])) for g in range(n.num_gpu)}
        occupy(c, n.name, {g: u for g, u in used.items() if u}, int(rng.integers(0, n.cpu_milli // 2)))
    typical = TypicalPods.from_counts({A: 5, B: 4, C: 3, D: 1, (500, 1, 250, "G2"): 2, (2000, 2, 1000, ""): 2})
    model = FragModel(typical, c.models)
    snap = c.snapshot()
    st = FragState.build(model, snap)
    rows = np.arange(len(nodes))
    for milli, cpu in [(250, 1000), (500, 4000), (700, 500)]:
        delta, valid = frag_delta_share(st, snap, rows, milli, cpu)
        for i in rows:
            for g in range(c.max_gpus):
                if not valid[i, g]:
                    continue
                left = snap.gpu_free[i].copy()
                before = brute_force(model, left, snap.cpu_free[i], snap.model_idx[i])
                left[g] -= milli
                after = brute_force(model, left, snap.cpu_free[i] - cpu, snap.model_idx[i])
                assert delta[i, g] == pytest.approx(before - after)
    for k, cpu in [(0, 3000), (1, 1000), (2, 2000)]:
        ok = (snap.gpu_free >= 1000).sum(axis=1) >= k
        d = frag_delta_whole(st, snap, rows[ok], k, cpu)
        for j, i in enumerate(rows[ok]):
            left = snap.gpu_free[i].copy()
            before = brute_force(model, left, snap.cpu_free[i], snap.model_idx[i])
            left[np.flatnonzero(left >= 1000)[:k]] = 0
            after = brute_force(model, left, snap.cpu_free[i] - cpu, snap.model_idx[i])
            assert d[j] == pytest.approx(before - after)
