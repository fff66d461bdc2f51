"""The waste-gradient terms by hand: CPU per GPU, stranded GPU, and the gap-waste table."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import cpu_only, node, share, whole

from gpuaware.placement import OURS, POLICIES, Cluster, CycleState, Decision, TypicalPods, policy
from gpuaware.placement.waste import (
    WasteGradientScore,
    capability,
    cpu_per_gpu_milli,
    gap_waste_table,
    reserved_nodes,
    type_reserve_demand,
)


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


# -- the price of GPU other pods cannot do without (module doc, terms 3 and 4) ----------------------


def test_type_reserve_demand() -> None:
    # T4: 2 GPUs, G2: 16 GPUs (18 in all). Typical: T4-only 1-GPU pods and unrestricted ones, p = 0.5 each.
    # demand = 0.5*1000 + 0.5*1000 = 1000 milli per pod; the T4-only half all lands on T4's 2 GPUs:
    # r_T4 = (0.5*1000 / 2) / (1000 / 18) = 4.5 (those pods alone would fill T4 4.5 times over at a
    # load equal to the cluster); r_G2 = 0 (no pod is restricted to G2)
    t = TypicalPods.from_counts({(4000, 1, 1000, "T4"): 1, (4000, 1, 1000, ""): 1})
    snap = Cluster(
        [node("t4", gpus=2, model="T4"), node("g2", gpus=8, model="G2"), node("g2b", gpus=8, model="G2")]
    ).snapshot()
    gpus = np.bincount(snap.model_idx, weights=snap.gpu_count, minlength=len(snap.models))
    r = dict(zip((m.name for m in snap.models), type_reserve_demand(t, snap.models, gpus), strict=True))
    assert r == pytest.approx({"G2": 0.0, "T4": 4.5})


def test_reserved_nodes_take_the_cpu_richest_first() -> None:
    # one model, GPUs [2, 2, 4] on CPU [16, 64, 32] cores; a share of 0.3 of 8 GPUs = 2.4 GPUs:
    # the 64-core node (2 GPUs) is not enough, the 32-core one (4 more) makes 6 >= 2.4 -> nodes 1 and 2
    got = reserved_nodes(
        np.zeros(3, dtype=np.int64), np.array([2, 2, 4]), np.array([16_000, 64_000, 32_000]), np.array([0.3])
    )
    assert list(got) == [False, True, True]
    # share 0 reserves nothing; a share above 1 reserves every node of the model
    assert not reserved_nodes(
        np.zeros(3, dtype=np.int64), np.array([2, 2, 4]), np.array([1, 2, 3]), np.array([0.0])
    ).any()
    assert reserved_nodes(
        np.zeros(3, dtype=np.int64), np.array([2, 2, 4]), np.array([1, 2, 3]), np.array([5.0])
    ).all()


def test_capability_counts_the_whole_node_pods_a_node_could_host() -> None:
    # shapes: big (8 GPUs, 128 cores) x1, mid (8, 96) x2, CPU-only x1; capacity: big 8, mid 16 GPUs.
    # big's whole-node pods fit only big: 8/8 = 1 to big; mid's fit mid and big: 16/24 = 2/3 to both.
    # c(big) = 1 + 2/3, c(mid) = 2/3, CPU-only nodes host no GPU pod: 0
    c = capability(np.array([8, 8, 8, 0]), np.array([128_000, 96_000, 96_000, 64_000]))
    assert c == pytest.approx([5 / 3, 2 / 3, 2 / 3, 0.0])


def test_a_flexible_pod_leaves_the_reserved_type_alone() -> None:
    # Typical: T4-only and unrestricted 1-GPU pods with 4000 CPU, p = 0.5 each -> rho = 4 CPU per GPU milli.
    # "t4" (2 T4, 6 cores) is CPU-poor: 2000 - 6000/4 = 500 milli stranded while idle.
    # An unrestricted 1-GPU pod with 1 core:
    #   on t4: F unchanged (both typical pods still fit) 0; stranded 500 -> max(0, 1000 - 5000/4) = 0: credit
    #          2*500 = 1000 -> without prices 100*sigmoid(1.0) = 73
    #   on g2/g2b (8 G2, 96 cores): the T4-only half cannot use G2, so F falls by 0.5*1000 = 500: 62
    # so without prices it takes a T4, which the T4-only pods need.
    # Prices per milli: r_T4 = 4.5 -> reserve min(1, 2*(4.5+0.02)) of T4: t4; G2: the floor, 2*0.02 = 4 %
    # of 16 GPUs, one node, the first of the two equal ones: g2. Capability (2, 6000) x1, (8, 96000) x2:
    # c(t4) = 2/18, c(g2) = c(g2b) = 1 + 2/18. price: t4 2.5 + 0.2/9 = 2.5222, g2 2.5 + 0.2222 = 2.7222, g2b 0.2222;
    # the pod's cheapest node is g2b, so it pays t4 (2.5222-0.2222)*1000 = 2300 -> sigmoid(-1.3) = 21,
    # g2 2500 -> sigmoid(-2.0) = 11, g2b 0 -> 62
    t = TypicalPods.from_counts({(4000, 1, 1000, "T4"): 1, (4000, 1, 1000, ""): 1})
    c = Cluster(
        [
            node("t4", gpus=2, model="T4", cpu=6_000),
            node("g2", gpus=8, model="G2", cpu=96_000),
            node("g2b", gpus=8, model="G2", cpu=96_000),
        ]
    )
    nodes = np.arange(3)
    flexible = whole(cpu=1_000)
    unpriced = WasteGradientScore(t, reserve=0.0, capability=0.0)
    assert list(unpriced.score(CycleState(), flexible, c.snapshot(), nodes)) == [73, 62, 62]
    priced = WasteGradientScore(t)
    assert list(priced.score(CycleState(), flexible, c.snapshot(), nodes)) == [21, 11, 62]
    # a T4-only pod can only ever go to t4, its cheapest node: it pays nothing, its score is the unpriced one
    t4_only = whole(cpu=1_000, types=("T4",))
    t4_row = np.array([0])
    assert priced.score(CycleState(), t4_only, c.snapshot(), t4_row) == unpriced.score(
        CycleState(), t4_only, c.snapshot(), t4_row
    )
    d = policy(OURS, typical=t).schedule(flexible, c.snapshot())
    assert isinstance(d, Decision) and d.node_name == "g2b"


def test_a_one_gpu_pod_keeps_the_most_capable_node_whole() -> None:
    # Typical: 1-GPU pods with 12 cores -> rho = 12 CPU per GPU milli; "g3" (8 GPUs, 128 cores) listed first,
    # "g2" (8 GPUs, 96 cores). A 1-GPU 12-core pod changes neither F (the typical pod still fits on both)
    # nor stranding (g2: 8000 - 96000/12 = 0 before, 7000 - 84000/12 = 0 after): both score 50 without
    # prices and the tie goes to the first node, g3. Capability: (8,128) x1, (8,96) x1, 8 GPUs each:
    # c(g3) = 1 + 8/16 = 1.5, c(g2) = 0.5; no typical pod names a GPU type, so nothing is reserved.
    # The pod pays 0.2*(1.5-0.5)*1000 = 200 on g3 -> sigmoid(-0.2) = 45, 0 on g2: 50.
    # Then an 8-GPU pod asking 120 cores fits only an idle g3.
    t = TypicalPods.from_counts({(12_000, 1, 1000, ""): 1})
    small, big = whole(name="small", cpu=12_000), whole(name="big", gpus=8, cpu=120_000)
    c = Cluster([node("g3", gpus=8, model="G3", cpu=128_000), node("g2", gpus=8, model="G2", cpu=96_000)])
    unpriced = WasteGradientScore(t, reserve=0.0, capability=0.0)
    assert list(unpriced.score(CycleState(), small, c.snapshot(), np.arange(2))) == [50, 50]
    assert list(WasteGradientScore(t).score(CycleState(), small, c.snapshot(), np.arange(2))) == [45, 50]
    sched = policy(OURS, typical=t)
    d = sched.schedule(small, c.snapshot())
    assert isinstance(d, Decision) and d.node_name == "g2"
    c.reserve(small, d.node, d.gpus)
    d = sched.schedule(big, c.snapshot())
    assert isinstance(d, Decision) and d.node_name == "g3"


def test_no_reserve_without_restricted_pods_or_a_second_model() -> None:
    # the floor reserves 2*0.02 = 4 % of a model only when some typical pod names GPU types and the
    # cluster has another model: 3 T4 nodes -> price = capability only, 0.2 * c = 0.2 * 1 (one shape)
    one_model = Cluster([node("a"), node("b"), node("c")]).snapshot()
    typed = TypicalPods.from_counts({(4000, 1, 500, "T4"): 1, (4000, 1, 500, ""): 1})
    assert WasteGradientScore(typed).prices(one_model) == pytest.approx([0.2, 0.2, 0.2])
    # two models, but nobody names one: no reserve either
    two_models = Cluster([node("t4"), node("g2", gpus=8, model="G2", cpu=96_000)]).snapshot()
    untyped = TypicalPods.from_counts({(4000, 1, 500, ""): 1})
    assert WasteGradientScore(untyped).prices(two_models).max() < 2.5
    # name one: each model keeps at least a node (r_G2 = 0 -> the floor; r_T4 > 0)
    assert (WasteGradientScore(typed).prices(two_models) >= 2.5).all()


def test_bad_price_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="reserve"):
        WasteGradientScore(TypicalPods.from_counts({(1000, 1, 500, ""): 1}), reserve_cost=-1.0)
