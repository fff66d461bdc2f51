"""Each published formula by hand (arithmetic in the comments), then one suite every policy must pass."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import cpu_only, node, occupy, share, whole

from gpuaware.placement import (
    POLICIES,
    Cluster,
    Code,
    CycleState,
    Decision,
    PodRequest,
    Status,
    TypicalPods,
    policies,
    policy,
)
from gpuaware.placement import stock as _stock  # registers KubeDefault, so the shared suite covers it


def scores(plugin, pod: PodRequest, cluster: Cluster) -> list[int]:
    snap = cluster.snapshot()
    nodes = np.arange(cluster.num_nodes)
    s = plugin.score(CycleState(), pod, snap, nodes)
    if hasattr(plugin, "normalize"):
        s = plugin.normalize(CycleState(), pod, s)
    return [int(x) for x in s]


def three_nodes() -> Cluster:
    return Cluster([
        node("a", gpus=2, model="T4", cpu=32_000),
        node("b", gpus=8, model="G2", cpu=96_000),
        node("c", gpus=2, model="P100", cpu=64_000),
    ])


def test_bestfit_formula_and_normalisation() -> None:
    # raw = trunc(100 * (1 - [0.5 (cpu_free - 4000)/128000 + 0.5 (gpu_free - 500)/8000]))
    # a: 0.5*28000/128000 + 0.5*1500/8000 = 0.109375 + 0.09375  = 0.203125 -> 79
    # b: 0.5*92000/128000 + 0.5*7500/8000 = 0.359375 + 0.46875  = 0.828125 -> 17
    # c: 0.5*60000/128000 + 0.5*1500/8000 = 0.234375 + 0.09375  = 0.328125 -> 67
    # normalised (s - 17) * 100 // (79 - 17): a 100, b 0, c 5000 // 62 = 80
    assert scores(policies.BestFitScore(), share(milli=500, cpu=4000), three_nodes()) == [100, 0, 80]


def test_bestfit_all_equal_normalises_to_zero() -> None:
    c = Cluster([node("a"), node("b")])
    assert scores(policies.BestFitScore(), share(), c) == [0, 0]


def test_dotprod_formula() -> None:
    # trunc(100 * (1 - (cpu_free/128000 * 4000/128000 + gpu_free/8000 * 500/8000) / 2))
    # a: 0.25*0.03125 + 0.25*0.0625 = 0.0234375 -> 1 - 0.01171875 -> 98
    # b: 0.75*0.03125 + 1.00*0.0625 = 0.0859375 -> 1 - 0.04296875 -> 95
    # c: 0.50*0.03125 + 0.25*0.0625 = 0.03125   -> 1 - 0.015625   -> 98
    assert scores(policies.DotProdScore(), share(milli=500, cpu=4000), three_nodes()) == [98, 95, 98]


@pytest.mark.parametrize(
    "gpus, used, pod, expected",
    [
        (8, {}, share(milli=300), 25),  # idle 8-GPU node: 33 - 8 = 25 (floor: 8)
        (2, {}, share(milli=300), 31),  # idle 2-GPU node: 33 - 2 = 31
        (2, {0: 700}, share(milli=200), 97),  # tightest GPU has 300 free: 100 - (300*100//1000)//10 = 97
        (2, {0: 50}, share(milli=200), 91),  # 950 free: 100 - 95//10 = 91
        (2, {0: 700}, share(milli=500), 49),  # must open the free GPU: 50 - 1 = 49
        (8, {0: 500}, whole(gpus=2), 48),  # two free GPUs on a used node: 50 - 2 = 48
        (8, {0: 500}, whole(gpus=7), 43),  # 50 - 7 = 43 (floor 33)
        (2, {0: 500}, cpu_only(), 0),  # CPU-only pods score 0
    ],
)
def test_gpupacking_tiers(gpus: int, used: dict, pod: PodRequest, expected: int) -> None:
    c = Cluster([node("a", gpus=gpus, model="G2", cpu=96_000)])
    occupy(c, "a", used)
    assert scores(policies.GpuPackingScore(), pod, c) == [expected]


def test_gpuclustering_bands() -> None:
    c = Cluster([
        node("idle8", gpus=8, model="G2", cpu=96_000),
        node("idle2", gpus=2),
        node("shares", gpus=2),
        node("mixed", gpus=2),
        node("others", gpus=2),
    ])
    occupy(c, "shares", {0: 700})
    occupy(c, "mixed", {0: 700}, whole=(1,))
    occupy(c, "others", whole=(0,))
    # idle8: band 25 + 25*(8000-8000)//8000 = 25
    # idle2: band 25 + 25*(8000-2000)//8000 = 25 + 18 = 43
    # shares (only "share" pods, 1300 free): 75 + 25*6700//8000 = 75 + 20 = 95
    # mixed ("share" and "1-gpu", 300 free): 50 + 25*7700//8000 = 50 + 24 = 74
    # others (only "1-gpu", 1000 free): 0 + 25*7000//8000 = 21
    assert scores(policies.GpuClusteringScore(), share(milli=200), c) == [25, 43, 95, 74, 21]
    # a "1-gpu" pod sees the mirror image: shares 0 + 20, mixed 50 + 24, others 75 + 21
    assert scores(policies.GpuClusteringScore(), whole(gpus=1), c) == [25, 43, 20, 74, 96]
    assert scores(policies.GpuClusteringScore(), cpu_only(), c) == [0, 0, 0, 0, 0]


def test_fgd_scores_and_gpu_choice() -> None:
    # typical pods: m1 = 500 milli share, m2 = whole GPU, p = 0.5 each, both 1000 CPU
    typical = TypicalPods.from_counts({(1000, 1, 500, ""): 1, (1000, 1, 1000, ""): 1})
    c = Cluster([node("idle"), node("half")])
    occupy(c, "half", {0: 500})
    plugin = policies.FgdScore(typical)
    cycle = CycleState()
    snap = c.snapshot()
    s = plugin.score(cycle, share(milli=500, cpu=1000), snap, np.arange(2))
    # idle [1000,1000] -> [500,1000]: F 0 -> 0.5*500 = 250; 100*sigmoid(-0.25) = 43
    # half [500,1000]: GPU0 -> [0,1000]: F 250 -> 0, sigmoid(+0.25) = 56; GPU1 -> [500,500]: F -> 500, 43
    assert list(s) == [43, 56]
    _, gpus = cycle[policies.FgdScore.gpu_key]
    assert list(gpus) == [0, 0]  # first best GPU on each node
    # a whole GPU on the idle node: [1000,1000] -> [0,1000], F stays 0 -> 50
    assert list(plugin.score(CycleState(), whole(cpu=1000), snap, np.arange(1))) == [50]
    # a CPU-only pod leaving 500 < 1000 CPU: both typical pods lack CPU -> F = 2000 -> sigmoid(-2) = 11
    assert list(plugin.score(CycleState(), cpu_only(cpu=31_500), snap, np.arange(1))) == [11]


def test_fgd_cache_follows_node_changes() -> None:
    typical = TypicalPods.from_counts({(1000, 1, 500, ""): 1, (1000, 1, 1000, ""): 1})
    c = Cluster([node("a"), node("b")])
    plugin = policies.FgdScore(typical)
    pod = share(milli=500, cpu=1000)
    assert list(plugin.score(CycleState(), pod, c.snapshot(), np.arange(2))) == [43, 43]
    occupy(c, "b", {0: 500})  # b changes: its cached score must not be reused
    assert list(plugin.score(CycleState(), pod, c.snapshot(), np.arange(2))) == [43, 56]


def test_random_picks_one_node_uniformly() -> None:
    c = Cluster([node(f"n{i}") for i in range(4)])
    plugin = policies.RandomScore(seed=3)
    hits = np.zeros(4)
    for _ in range(400):
        s = np.array(scores(plugin, share(), c))
        assert sorted(s) == [0, 0, 0, 100]
        hits += s == 100
    assert hits.min() > 60  # ~100 each


def test_ties_go_to_the_lowest_rank() -> None:
    c = Cluster([node("a"), node("b"), node("c")])
    sched = policy("BestFit", tie_rank=np.array([2, 0, 1]))
    d = sched.schedule(share(), c.snapshot())  # all three idle and equal -> rank 0 is node b
    assert isinstance(d, Decision) and d.node_name == "b"


# -- the shared suite: every registered policy --------------------------------------------------------

TYPICAL = TypicalPods.from_counts({(4000, 1, 500, ""): 3, (4000, 1, 1000, ""): 3, (4000, 0, 0, ""): 1,
                                   (8000, 2, 1000, ""): 1})


def make(name: str, seed: int = 0, n: int | None = None) -> object:
    rank = None if n is None else np.random.default_rng(seed).permutation(n)
    return policy(name, typical=TYPICAL, seed=seed, tie_rank=rank)


def test_suite_covers_the_default_profile_and_the_stock_baseline() -> None:
    assert {"GpuAware", "WasteGradient", _stock.KUBE_DEFAULT} <= set(POLICIES)


@pytest.fixture(params=sorted(POLICIES))
def name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize(
    "pod, fits_only",
    [
        (share(cpu=20_000), "big"),  # only "big" has 20000 CPU free
        (whole(gpus=4), "big"),  # only "big" has 4 free GPUs
        (share(types=("V100M32",)), "v100"),  # only one V100M32 node
        (cpu_only(mem=200_000), "big"),  # memory only fits "big"
    ],
)
def test_suite_goes_where_only_one_node_fits(name: str, pod: PodRequest, fits_only: str) -> None:
    c = Cluster([node("small", gpus=2, cpu=8000), node("big", gpus=8, model="G2", cpu=96_000, mem=393_216),
                 node("v100", gpus=1, model="V100M32", cpu=8000)])
    d = make(name).schedule(pod, c.snapshot())
    assert isinstance(d, Decision) and d.node_name == fits_only


def test_suite_reports_unschedulable_and_unresolvable(name: str) -> None:
    c = Cluster([node("a", gpus=2), node("b", gpus=2)])
    occupy(c, "a", {0: 900, 1: 900})
    occupy(c, "b", {0: 900, 1: 900})
    s = make(name).schedule(share(milli=500), c.snapshot())
    assert isinstance(s, Status) and s.code == Code.UNSCHEDULABLE  # fits an idle GPU, none is left
    s = make(name).schedule(whole(gpus=3), c.snapshot())
    assert isinstance(s, Status) and s.code == Code.UNRESOLVABLE  # no node has 3 GPUs
    s = make(name).schedule(share(types=("A100",)), c.snapshot())
    assert isinstance(s, Status) and s.code == Code.UNRESOLVABLE  # no A100 anywhere


def test_suite_every_placement_is_valid_and_deterministic(name: str) -> None:
    from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods

    nodes = synthetic_nodes(30, seed=1)
    pods = synthetic_pods(400, seed=2, gpu_types=("T4", "G2"), typed_fraction=0.2)
    runs = []
    for _ in range(2):
        c = Cluster(nodes)
        sched = make(name, seed=5, n=len(nodes))
        placed = []
        for pod in pods:
            snap = c.snapshot()
            d = sched.schedule(pod, snap)
            if isinstance(d, Decision):
                assert len(d.gpus) == pod.num_gpu
                for g in d.gpus:
                    need = pod.gpu_milli if pod.is_gpu_share else 1000
                    assert snap.gpu_free[d.node, g] >= need
                if pod.gpu_types:
                    assert c.specs[d.node].gpu_model in pod.gpu_types
                c.reserve(pod, d.node, d.gpus)  # raises if the decision over-commits anything
                placed.append((d.node, d.gpus))
            else:
                assert d.code in (Code.UNSCHEDULABLE, Code.UNRESOLVABLE)
                placed.append(None)
        c.check()
        runs.append(placed)
    assert runs[0] == runs[1]
    assert sum(p is not None for p in runs[0]) > 100


def test_suite_scores_stay_in_0_to_100(name: str) -> None:
    from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods

    c = Cluster(synthetic_nodes(25, seed=3))
    sched = make(name, n=c.num_nodes)
    for pod in synthetic_pods(150, seed=4):
        snap = c.snapshot()
        nodes = sched.feasible(CycleState(), pod, snap)
        if nodes.size == 0:
            continue
        for ws in sched.scores:
            s = ws.plugin.score(CycleState(), pod, snap, nodes)
            if hasattr(ws.plugin, "normalize"):
                s = ws.plugin.normalize(CycleState(), pod, s)
            assert s.dtype.kind in "iuf" and s.min() >= 0 and s.max() <= 100, ws.plugin.name
        d = sched.schedule(pod, snap)
        c.reserve(pod, d.node, d.gpus)


def test_usable_gpus_follows_the_rule_on_every_slot_and_filter_rows_agree_with_filter() -> None:
    """The compiled per-GPU check (fit_kernels) says what the rule says, stated here in plain Python:
    compute, memory held by pods that ask more than their share, DEGRADED GPUs, absent slots; and each
    built-in filter's verdict on chosen rows is its verdict on the whole snapshot at those rows."""
    from gpuaware.placement import DEGRADED, MILLI, Cluster, GpuFit, ResourcesFit, WholeGpuOnly
    from gpuaware.placement.framework import CycleState, usable_gpus

    def rule(pod: PodRequest, snap, n: int, g: int) -> bool:
        need = pod.gpu_milli if pod.is_gpu_share else MILLI
        total = int(snap.gpu_mem_total[n, g])
        held = (pod.gpu_memory_mib if total > 0 else 0) if pod.gpu_memory_mib else total * pod.gpu_milli // MILLI
        return (int(snap.gpu_free[n, g]) >= need and int(snap.gpu_mem_free[n, g]) >= held
                and (pod.tolerates_failure or int(snap.gpu_health[n, g]) != DEGRADED))

    c = Cluster([node("a", gpus=4, model="A100-SXM4-40GB"), node("b", gpus=2, model="T4"), node("c", gpus=2),
                 node("d", gpus=0)])
    occupy(c, "a", {0: 300, 1: 1000})
    c.reserve(PodRequest("mem-hog", 0, 0, 1, 200, gpu_memory_mib=30_000), 0, (2,))  # compute free, memory not
    c.set_gpu_health(1, 1, DEGRADED)
    occupy(c, "c", {0: 500})
    snap = c.snapshot()
    assert snap.gpu_mem_total[0, 0] > 0 and snap.gpu_mem_free[0, 2] < 12_000  # memory is accounted there
    pods = [share(milli=300), share(milli=800), whole(gpus=1), whole(gpus=2),
            PodRequest("asks-mem", 0, 0, 1, 100, gpu_memory_mib=12_000),
            PodRequest("tolerant", 0, 0, 1, 500, checkpointable=True),
            PodRequest("cpu-heavy", 30_000, 0)]
    checked = 0
    for pod in pods:
        ok = usable_gpus(pod, snap)
        for n in range(c.num_nodes):
            for g in range(snap.gpu_free.shape[1]):
                assert bool(ok[n, g]) == rule(pod, snap, n, g), (pod.name, n, g)
                checked += 1
        for f in (ResourcesFit(), GpuFit(), WholeGpuOnly()):
            whole_mask = f.filter(CycleState(), pod, snap)
            for rows in ([3, 1], [2], [0, 1, 2, 3]):
                got = f.filter_rows(CycleState(), pod, snap, np.array(rows))
                assert got.tolist() == whole_mask[rows].tolist(), (f.name, pod.name, rows)
    assert checked == len(pods) * 4 * 4
