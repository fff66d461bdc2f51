"""Per-GPU signals: quantised storage, the four signal scores by hand, GpuAware against WasteGradient."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from placement_helpers import cpu_only, node, occupy, share, whole

from gpuaware.placement import (
    DEFAULT_PROFILE,
    DEGRADED,
    OURS,
    POLICIES,
    Cluster,
    CycleState,
    Decision,
    NodeSpec,
    PodRequest,
    RequestError,
    TypicalPods,
    policy,
)
from gpuaware.placement.cache import CachedScheduler
from gpuaware.placement.effects import SignalEffect
from gpuaware.placement.explain import node_reasons
from gpuaware.placement.framework import BestFitGpu, CycleGpu, rows_view
from gpuaware.placement.profiles import SIGNAL_WEIGHTS
from gpuaware.placement.signals import (
    ForecastHeadroomScore,
    HealthScore,
    SignalAwareGpu,
    ThermalPowerScore,
    TopologyScore,
)
from gpuaware.placement.waste import WasteGradientScore

TYPICAL = TypicalPods.from_counts({(4000, 1, 500, ""): 3, (4000, 1, 1000, ""): 3, (4000, 0, 0, ""): 1,
                                   (8000, 2, 1000, ""): 1})


def scores(plugin, pod: PodRequest, cluster: Cluster) -> list[int]:
    snap = cluster.snapshot()
    return [int(x) for x in plugin.score(CycleState(), pod, snap, np.arange(cluster.num_nodes))]


def stored(c: Cluster, n: int = 0, g: int = 0) -> tuple[float, ...]:
    return (int(c.gpu_health_score[n, g]), float(c.gpu_temp_c[n, g]), round(float(c.gpu_power_frac[n, g]), 4),
            round(float(c.gpu_util_forecast[n, g]), 4))


NAN = math.nan

# -- set_gpu_signals: quantised, and the version moves only on a real change ---------------------------

# applied in order to GPU 0 of node 0: (signals, changed?, stored (health, temp, power, forecast))
SIGNAL_STEPS = [
    ({}, False, (100, NAN, NAN, NAN)),                                 # nothing given: nothing changes
    ({"health_score": 83}, True, (85, NAN, NAN, NAN)),                 # 83 / 5 = 16.6 -> 17 * 5 = 85
    ({"health_score": 84.9}, False, (85, NAN, NAN, NAN)),              # 16.98 -> 85 again: no bump
    ({"health_score": 82.4}, True, (80, NAN, NAN, NAN)),               # 16.48 -> 16 * 5 = 80
    ({"health_score": 140}, True, (100, NAN, NAN, NAN)),               # clipped to 100
    ({"temp_c": 70.9}, True, (100, 70.0, NAN, NAN)),                   # 35.45 -> 35 * 2 = 70
    ({"temp_c": 70.1}, False, (100, 70.0, NAN, NAN)),                  # noise inside the 2 degC step
    ({"temp_c": 71.0}, True, (100, 72.0, NAN, NAN)),                   # 35.5 rounds half up -> 72
    ({"power_frac": 0.87, "util_forecast": 0.31}, True, (100, 72.0, 0.85, 0.3)),  # 17.4 -> 0.85; 6.2 -> 0.30
    ({"power_frac": 0.874, "util_forecast": 0.324}, False, (100, 72.0, 0.85, 0.3)),  # same steps
    ({"util_forecast": 1.7}, True, (100, 72.0, 0.85, 1.0)),            # forecast clipped to 0..1
    ({"temp_c": NAN, "health_score": NAN}, True, (100, NAN, 0.85, 1.0)),  # NaN: unknown again (health 100)
    ({"temp_c": NAN, "health_score": 100}, False, (100, NAN, 0.85, 1.0)),  # unknown stays unknown
]


def test_set_gpu_signals_quantises_and_bumps_the_version_only_on_change() -> None:
    c = Cluster([node("a"), node("b")])
    for signals, changed, expected in SIGNAL_STEPS:
        version, generation, other = int(c.version[0]), c.generation, int(c.version[1])
        assert c.set_gpu_signals(0, 0, **signals) is changed, signals
        assert int(c.version[0]) == version + changed and c.generation == generation + changed, signals
        assert int(c.version[1]) == other  # only the node that changed
        got = stored(c)
        assert got[0] == expected[0], signals
        for a, b in zip(got[1:], expected[1:], strict=True):
            assert (math.isnan(a) and math.isnan(b)) or a == b, (signals, got)
    untouched = stored(c, 0, 1)  # the node's other GPU keeps its defaults
    assert untouched[0] == 100 and all(math.isnan(v) for v in untouched[1:])


@pytest.mark.parametrize("n, g", [(0, 2), (0, -1), (2, 0), (-1, 0)])
def test_set_gpu_signals_refuses_unknown_gpus(n: int, g: int) -> None:
    c = Cluster([node("a"), node("b")])
    with pytest.raises(RequestError):
        c.set_gpu_signals(n, g, health_score=50)


def test_snapshots_carry_the_signals_read_only_and_rows_view_keeps_them() -> None:
    c = Cluster([node("a"), node("b")])
    c.set_gpu_signals(1, 1, health_score=50, temp_c=80, power_frac=0.9, util_forecast=0.5)
    snap = c.snapshot()
    assert snap.gpu_health_score.dtype == np.int16 and snap.gpu_temp_c.dtype == np.float32
    assert (snap.gpu_health_score[1, 1], snap.gpu_temp_c[1, 1]) == (50, 80.0)
    with pytest.raises(ValueError):
        snap.gpu_temp_c[0, 0] = 1.0
    view = rows_view(snap, np.array([1]))
    assert view.num_nodes == 1 and view.gpu_health_score[0, 1] == 50
    assert float(view.gpu_power_frac[0, 1]) == pytest.approx(0.9) and float(view.gpu_util_forecast[0, 1]) == 0.5



def test_one_snapshot_serves_until_the_signal_kinds_change() -> None:
    c = Cluster([node("a"), node("b")])
    snap = c.snapshot()
    assert c.snapshot() is snap and snap.signals == frozenset()
    occupy(c, "a", {0: 600})  # views of the live arrays: the same object shows the reservation
    assert c.snapshot() is snap and snap.gpu_free[0, 0] == 400
    c.set_gpu_signals(1, 0, temp_c=85.0)
    thermal = c.snapshot()
    assert thermal is not snap and thermal.signals == frozenset({"thermal"})
    c.set_gpu_signals(1, 1, temp_c=70.0)  # another GPU, the same kinds: the same object
    assert c.snapshot() is thermal
    c.set_gpu_signals(1, 0, temp_c=float("nan"))
    c.set_gpu_signals(1, 1, temp_c=float("nan"))
    assert c.snapshot().signals == frozenset()

def loaded_cluster() -> Cluster:
    """Three nodes, no telemetry, some GPUs partly or wholly taken (node b: eight G2 GPUs)."""
    c = Cluster([node("a"), node("b", gpus=8, model="G2", cpu=96_000), node("c")])
    occupy(c, "a", {0: 600})
    occupy(c, "b", {1: 300}, whole=(2, 3))
    return c


# (set_gpu_signals or set_gpu_health on GPU (node, gpu), the kinds some GPU has a signal of afterwards)
SIGNAL_KIND_STEPS = [
    (("signals", 0, 0, {"temp_c": 71.0}), {"thermal"}),
    (("signals", 1, 1, {"power_frac": 0.9}), {"thermal"}),
    (("signals", 0, 0, {"temp_c": NAN}), {"thermal"}),               # b's power reading is still there
    (("signals", 1, 1, {"power_frac": NAN, "util_forecast": 0.4}), {"forecast"}),
    (("signals", 0, 1, {"health_score": 100}), {"forecast"}),        # 100 is the neutral health
    (("signals", 0, 1, {"health_score": 60}), {"forecast", "health"}),
    (("health", 1, 0, DEGRADED), {"forecast", "health"}),
    (("signals", 0, 1, {"health_score": NAN}), {"forecast", "health"}),  # b's GPU 0 is still DEGRADED
    (("health", 1, 0, 0), {"forecast"}),                             # HEALTHY again
    (("signals", 1, 1, {"util_forecast": NAN}), set()),
]


def test_snapshots_name_the_signal_kinds_some_gpu_has() -> None:
    c = Cluster([node("a"), node("b")])
    assert c.snapshot().signals == frozenset()
    for (how, n, g, arg), kinds in SIGNAL_KIND_STEPS:
        if how == "signals":
            c.set_gpu_signals(n, g, **arg)
        else:
            c.set_gpu_health(n, g, arg)
        assert c.snapshot().signals == kinds, (how, n, g, arg)
        assert rows_view(c.snapshot(), np.array([0])).signals == kinds


@pytest.mark.parametrize("plugin", [HealthScore(), ForecastHeadroomScore(), ThermalPowerScore()])
@pytest.mark.parametrize("pod", [share(milli=300), share(milli=1000), whole(gpus=1), whole(gpus=2)])
def test_a_signal_no_gpu_has_scores_what_computing_it_gives(plugin, pod: PodRequest) -> None:
    # the shortcut (nothing computed while no GPU has the score's kind of signal) is exact on every
    # node the pod fits; once one GPU has it, that node is computed and the others keep 100
    c = loaded_cluster()
    snap = c.snapshot()
    feasible = policy("BestFit").feasible(CycleState(), pod, snap)
    assert snap.signals == frozenset() and feasible.size >= 2
    assert plugin.score(CycleState(), pod, snap, feasible).tolist() == plugin.compute(pod, snap, feasible).tolist()
    bad = {"health": {"health_score": 10}, "thermal": {"temp_c": 89.0}, "forecast": {"util_forecast": 1.0}}
    for gpu in range(8):
        c.set_gpu_signals(1, gpu, **bad[plugin.signal])
    snap = c.snapshot()
    got = dict(zip(feasible.tolist(), plugin.score(CycleState(), pod, snap, feasible).tolist(), strict=True))
    assert snap.signals == {plugin.signal}
    assert all(v == 100 for n, v in got.items() if n != 1)
    if 1 in got:
        assert got[1] < 100


# -- the four scores by hand ---------------------------------------------------------------------------


def signal_cluster() -> Cluster:
    c = Cluster([node("a"), node("b"), node("c")])
    # b: GPU 0 scores 62 -> 60 (5-point steps), GPU 1 scores 90 but is DEGRADED -> at most 40
    c.set_gpu_signals(1, 0, health_score=62)
    c.set_gpu_signals(1, 1, health_score=90)
    c.set_gpu_health(1, 1, DEGRADED)
    # c: GPU 0 is the healthiest but 800 milli taken; GPU 1 scores 70
    occupy(c, "c", {0: 800})
    c.set_gpu_signals(2, 1, health_score=70)
    return c


@pytest.mark.parametrize("pod, expected", [
    (share(milli=500), [100, 60, 70]),   # best fitting GPU: b max(60, 40); c only GPU 1 fits 500
    (share(milli=100), [100, 60, 100]),  # 100 fits c's GPU 0 (200 free) too: max(100, 70)
    (whole(gpus=1), [100, 60, 70]),      # best fully free GPU
    (whole(gpus=2), [100, 50, 0]),       # mean of both: b (60 + 40) / 2 = 50; c has one free GPU (no fit)
    (cpu_only(), [100, 100, 100]),       # CPU-only pods: constant
])
def test_health_score(pod: PodRequest, expected: list[int]) -> None:
    assert scores(HealthScore(), pod, signal_cluster()) == expected


def test_forecast_headroom_score() -> None:
    c = Cluster([node("a"), node("b")])
    c.set_gpu_signals(0, 0, util_forecast=0.6)
    c.set_gpu_signals(0, 1, util_forecast=0.8)
    # share 0.5: GPU 0 100 (1 - (0.6 + 0.5 - 1)) = 90, GPU 1 100 (1 - 0.3) = 70 -> best 90; b unknown: 100
    assert scores(ForecastHeadroomScore(), share(milli=500), c) == [90, 100]
    # share 0.3: 0.6 + 0.3 stays below 1 -> 100 on GPU 0
    assert scores(ForecastHeadroomScore(), share(milli=300), c) == [100, 100]
    # a whole GPU (share 1): 100 (1 - 0.6) = 40, 100 (1 - 0.8) = 20 -> best one GPU 40, two GPUs (40 + 20) / 2
    assert scores(ForecastHeadroomScore(), whole(gpus=1), c) == [40, 100]
    assert scores(ForecastHeadroomScore(), whole(gpus=2), c) == [30, 100]
    assert scores(ForecastHeadroomScore(), cpu_only(), c) == [100, 100]


def test_thermal_power_score() -> None:
    c = Cluster([node("a"), node("b"), node("c")])
    c.set_gpu_signals(0, 0, temp_c=74, power_frac=0.9)  # min(100 - 4 * 9, 100 - 500 * 0.1) = min(64, 50) = 50
    c.set_gpu_signals(0, 1, temp_c=80)                  # 100 - 4 * 15 = 40 (power unknown: 100)
    c.set_gpu_signals(1, 0, temp_c=66)                  # 100 - 4 * 1 = 96
    c.set_gpu_signals(1, 1, power_frac=0.9, temp_c=50)  # below 65 degC: 100; power 50 -> 50
    # c: nothing known -> 100
    assert scores(ThermalPowerScore(), share(milli=500), c) == [50, 96, 100]   # best fitting GPU
    assert scores(ThermalPowerScore(), whole(gpus=2), c) == [45, 73, 100]      # (50 + 40) / 2, (96 + 50) / 2
    c.set_gpu_signals(2, 0, temp_c=95, power_frac=1.2)  # past 90 degC and the limit: 0
    assert scores(ThermalPowerScore(), whole(gpus=1), c)[2] == 100            # c's GPU 1 is still unknown
    assert scores(ThermalPowerScore(), whole(gpus=2), c)[2] == 50             # (0 + 100) / 2


def topo_node(name: str, islands: tuple[int, ...] = (), numa: tuple[int, ...] = ()) -> NodeSpec:
    return NodeSpec(name, 64_000, 262_144, 4, "V100M32", nvlink_islands=islands, numa_nodes=numa)


def topology_cluster() -> Cluster:
    c = Cluster([
        topo_node("island", (0, 0, 1, 1), (0, 0, 1, 1)),  # an idle NVLink pair: 100
        topo_node("numa", (), (0, 0, 1, 1)),              # no NVLink, a free NUMA pair: 60
        topo_node("flat"),                                # topology unknown: 0
        topo_node("split", (0, 0, 1, 1), (0, 0, 1, 1)),   # GPUs 0 and 2 taken: one free per island: 0
    ])
    occupy(c, "split", whole=(0, 2))
    return c


@pytest.mark.parametrize("pod, expected", [
    (whole(gpus=2), [100, 60, 0, 0]),
    (whole(gpus=3), [0, 0, 0, 0]),       # no island or NUMA node holds 3 of 4 GPUs (split cannot hold 3)
    (whole(gpus=1), [100, 100, 100, 100]),  # one GPU: nothing to keep together
    (share(), [100, 100, 100, 100]),
    (cpu_only(), [100, 100, 100, 100]),
])
def test_topology_score(pod: PodRequest, expected: list[int]) -> None:
    assert scores(TopologyScore(), pod, topology_cluster()) == expected


@pytest.mark.parametrize("plugin", [HealthScore(), ForecastHeadroomScore(), ThermalPowerScore(), TopologyScore()])
@pytest.mark.parametrize("pod", [share(milli=300), whole(gpus=1), whole(gpus=2), cpu_only()])
def test_unknown_signals_score_a_constant(plugin, pod: PodRequest) -> None:
    # no telemetry and no topology: every feasible node gets the same score, whatever its load
    c = loaded_cluster()
    snap = c.snapshot()
    feasible = policy("BestFit").feasible(CycleState(), pod, snap)
    assert feasible.size >= 2
    values = set(plugin.score(CycleState(), pod, snap, feasible).tolist())
    assert len(values) == 1
    assert values <= {100, 0}  # 0: topology for a multi-GPU pod where no node has topology


def test_scores_follow_signal_changes_through_their_cache() -> None:
    c = Cluster([node("a"), node("b")])
    plugin = HealthScore()
    assert scores(plugin, share(), c) == [100, 100]
    c.set_gpu_signals(1, 0, health_score=20)
    c.set_gpu_signals(1, 1, health_score=30)
    assert scores(plugin, share(), c) == [100, 30]  # b's version moved: recomputed, not served stale


# -- GPU choice -------------------------------------------------------------------------------------------


def test_signal_aware_gpu_overrides_only_a_clearly_worse_pick() -> None:
    c = Cluster([node("a")])
    occupy(c, "a", {0: 700})  # a 200-milli pod packs onto GPU 0 (300 free): WasteGradient's pick
    pod = share(milli=200)
    wg = WasteGradientScore(TYPICAL)
    sel = SignalAwareGpu(CycleGpu(WasteGradientScore.gpu_key))
    assert sel.picks_from == WasteGradientScore.gpu_key  # the score cache keeps the score's pick under it

    def pick() -> tuple[int, ...]:
        cycle = CycleState()
        wg.score(cycle, pod, c.snapshot(), np.array([0]))
        return sel.select(cycle, pod, c.snapshot(), 0)

    assert pick() == (0,)
    c.set_gpu_signals(0, 0, temp_c=70)  # quality 100 - 4 * 5 = 80: within 25 of GPU 1's 100 -> kept
    assert pick() == (0,)
    c.set_gpu_signals(0, 0, temp_c=80)  # 40: more than 25 below GPU 1's 100 -> GPU 1
    assert pick() == (1,)
    c.set_gpu_signals(0, 1, health_score=45)  # now GPU 1 is worse (45 vs 40 + 25): the pick stands
    assert pick() == (0,)


def test_signal_aware_gpu_keeps_multi_gpu_pods_on_one_island() -> None:
    c = topology_cluster()
    sel = SignalAwareGpu(BestFitGpu())
    snap = c.snapshot()
    # "island": both islands idle, equal quality, equal free count -> island 0 (lowest id)
    assert sel.select(CycleState(), whole(gpus=2), snap, 0) == (0, 1)
    c.set_gpu_signals(0, 0, health_score=40)  # island 0 now holds a poor GPU: island 1 instead
    assert sel.select(CycleState(), whole(gpus=2), c.snapshot(), 0) == (2, 3)
    # "split" (GPUs 1 and 3 free, one per island and NUMA node): the first free GPUs
    assert sel.select(CycleState(), whole(gpus=2), snap, 3) == (1, 3)
    # one whole GPU: the best quality band, then the lowest index
    assert sel.select(CycleState(), whole(gpus=1), c.snapshot(), 0) == (1,)


def test_best_fit_gpu_honours_a_hard_topology_request() -> None:
    # GPUs 1, 2, 3 free; islands (0, 0, 1, 1): an nvlink pod needs 2 and 3, not the first free 1 and 2
    c = Cluster([topo_node("n", (0, 0, 1, 1), (0, 1, 0, 1))])
    occupy(c, "n", whole=(0,))
    nvlink = PodRequest("p", 1000, 0, 2, 1000, topology="nvlink")
    numa = PodRequest("p", 1000, 0, 2, 1000, topology="numa")
    assert BestFitGpu().select(CycleState(), nvlink, c.snapshot(), 0) == (2, 3)
    assert BestFitGpu().select(CycleState(), numa, c.snapshot(), 0) == (1, 3)  # NUMA (0, 1, 0, 1): 1 and 3
    assert BestFitGpu().select(CycleState(), whole(gpus=2), c.snapshot(), 0) == (1, 2)  # no request: first free


# -- GpuAware ---------------------------------------------------------------------------------------------


def test_gpu_aware_is_waste_gradient_plus_the_signal_scores() -> None:
    config = POLICIES[DEFAULT_PROFILE]
    assert config["score"][0] == POLICIES[OURS]["score"][0]  # same plugin, args and weight 1000
    assert config["score"][0] is not POLICIES[OURS]["score"][0]  # a copy: editing one leaves the other
    assert {e["name"]: e["weight"] for e in config["score"][1:]} == SIGNAL_WEIGHTS
    assert SIGNAL_WEIGHTS == {"health": 32, "thermal-power": 18, "forecast-headroom": 12, "topology": 11}
    for w in SIGNAL_WEIGHTS.values():  # no signal's weighted difference (0..100 points) ties packing points
        assert all((w * d) % 1000 for d in range(1, 101))
    assert OURS == "WasteGradient" and DEFAULT_PROFILE == "GpuAware"


def replay(name: str, nodes: list[NodeSpec], pods: list[PodRequest], signals=None, cached: bool = False,
           seed: int = 5) -> list:
    """Decisions of `name` on a trace with departures; `signals(i, cluster)` may change signals first."""
    c = Cluster(nodes)
    sched = policy(name, typical=TYPICAL, seed=seed, tie_rank=np.random.default_rng(seed).permutation(len(nodes)))
    s = CachedScheduler(sched) if cached else sched
    out, live = [], []
    for i, pod in enumerate(pods):
        if signals is not None:
            signals(i, c)
        d = s.schedule(pod, c.snapshot())
        if isinstance(d, Decision):
            c.reserve(pod, d.node, d.gpus)
            live.append(pod.name)
            out.append((d.node, d.gpus))
        else:
            out.append(d.code)
        if i % 4 == 0 and len(live) > 30:
            c.unreserve(live.pop(0))
    c.check()
    return out


def test_gpu_aware_decides_exactly_as_waste_gradient_without_signals() -> None:
    from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods

    nodes = synthetic_nodes(40, seed=1)
    pods = synthetic_pods(500, seed=2, gpu_types=("T4", "G2"), typed_fraction=0.2)
    ours = replay(OURS, nodes, pods)
    assert sum(isinstance(d, tuple) for d in ours) > 300
    assert replay(DEFAULT_PROFILE, nodes, pods) == ours


def packing_pair(first_used: int, second_used: int) -> Cluster:
    c = Cluster([node("x"), node("y")])
    occupy(c, "x", {0: first_used})
    occupy(c, "y", {0: second_used})
    return c


def test_packing_scores_behind_the_override_table() -> None:
    # WasteGradient on the typical pods above, a 500-milli pod: 300 taken -> 55, 400 taken -> 56, 200 -> 54
    c = Cluster([node("u200"), node("u300"), node("u400")])
    for name, used in (("u200", 200), ("u300", 300), ("u400", 400)):
        occupy(c, name, {0: used})
    assert scores(WasteGradientScore(TYPICAL), share(milli=500), c) == [54, 55, 56]


def both_gpus(**signals):
    def apply(c: Cluster) -> None:
        for g in (0, 1):
            c.set_gpu_signals(1, g, **signals)
    return apply


def degrade_both(c: Cluster) -> None:
    for g in (0, 1):
        c.set_gpu_health(1, g, DEGRADED)


# node x (index 0) vs node y (index 1); the signal hits both GPUs of y; a 500-milli pod. Weighted sum:
# 1000 * packing + 32 health + 18 thermal-power + 12 forecast + 11 topology (topology: constant 100)
@pytest.mark.parametrize("x_used, y_used, signal, expected", [
    (300, 400, None, "y"),                               # packing: y 56 vs x 55 -> y by 1000
    (300, 400, both_gpus(health_score=80), "y"),         # 32 * 20 = 640 < 1000: packing wins
    (300, 400, degrade_both, "x"),                       # DEGRADED -> 40: 32 * 60 = 1920 > 1000
    (200, 400, degrade_both, "y"),                       # two packing points (54 vs 56): 2000 > 1920
    (300, 400, both_gpus(temp_c=90), "x"),               # thermal 0: 18 * 100 = 1800 > 1000
    (300, 400, both_gpus(temp_c=74), "y"),               # thermal 64: 18 * 36 = 648 < 1000
    (300, 400, both_gpus(power_frac=1.0), "x"),          # at the power limit: 0 -> 1800
    (300, 400, both_gpus(util_forecast=1.0), "y"),       # 0.5 overshoot -> 50: 12 * 50 = 600 < 1000
    (300, 300, both_gpus(util_forecast=1.0), "x"),       # packing tied: the forecast breaks the tie
    (300, 300, both_gpus(health_score=95), "x"),         # packing tied: 32 * 5 = 160 decides
])
def test_gpu_aware_avoids_a_clearly_bad_node(x_used: int, y_used: int, signal, expected: str) -> None:
    c = packing_pair(x_used, y_used)
    if signal is not None:
        signal(c)
    # tie ranks favour y, so a tie is broken by the signal and not by the rank. The pod checkpoints, so
    # DEGRADED GPUs are open to it (GpuFit) and only the health *score* steers it.
    pod = dataclasses.replace(share(milli=500), checkpointable=True)
    d = policy(DEFAULT_PROFILE, typical=TYPICAL, tie_rank=np.array([1, 0])).schedule(pod, c.snapshot())
    assert isinstance(d, Decision) and d.node_name == expected
    wg = policy(OURS, typical=TYPICAL, tie_rank=np.array([1, 0])).schedule(pod, c.snapshot())
    assert isinstance(wg, Decision) and wg.node_name == "y"  # WasteGradient alone ignores the signals


@pytest.mark.parametrize(("checkpointable", "qos", "allowed"), [
    (False, "", False), (False, "guaranteed", False), (True, "", True), (False, "best-effort", True),
    (False, "BE", True),  # openb's spelling
])
def test_degraded_gpus_take_only_work_that_tolerates_failure(checkpointable: bool, qos: str, allowed: bool) -> None:
    c = packing_pair(300, 400)
    degrade_both(c)  # y's GPUs are DEGRADED; x is healthy and fits too
    pod = dataclasses.replace(share(milli=500), checkpointable=checkpointable, qos=qos)
    for name in (OURS, DEFAULT_PROFILE, "BestFit"):
        d = policy(name, typical=TYPICAL, tie_rank=np.array([1, 0])).schedule(pod, c.snapshot())
        assert isinstance(d, Decision)
        if not allowed:
            assert d.node_name == "x", name  # every profile: the filter, not a score
    # WasteGradient alone prefers y (packing 56 vs 55): it goes there exactly when the pod may
    wg = policy(OURS, typical=TYPICAL, tie_rank=np.array([1, 0])).schedule(pod, c.snapshot())
    assert isinstance(wg, Decision) and wg.node_name == ("y" if allowed else "x")
    # with x full, an intolerant pod waits rather than run on a degraded GPU
    occupy(c, "x", {0: 700, 1: 700})
    got = policy(OURS, typical=TYPICAL).schedule(pod, c.snapshot())
    assert isinstance(got, Decision) == allowed
    if not allowed:  # and is told why, per node: x is full, y's GPUs are unhealthy for it
        assert list(node_reasons(pod, c.snapshot())[0]) == ["insufficient_gpu", "unhealthy_gpus"]


def test_gpu_aware_prefers_the_nvlink_island_for_multi_gpu_pods() -> None:
    # "island" and "flat" are both idle (equal packing); the 2-GPU pod goes to the NVLink pair, on one island
    c = Cluster([topo_node("flat"), topo_node("island", (0, 0, 1, 1), (0, 0, 1, 1))])
    d = policy(DEFAULT_PROFILE, typical=TYPICAL).schedule(whole(gpus=2, cpu=8000), c.snapshot())
    assert isinstance(d, Decision) and (d.node_name, d.gpus) == ("island", (0, 1))


def signal_noise(rng: np.random.Generator):
    """Telemetry arriving mid-trace: every third pod, a few GPUs report new (noisy) values."""
    def apply(i: int, c: Cluster) -> None:
        if i % 3:
            return
        for _ in range(3):
            n = int(rng.integers(c.num_nodes))
            if c.gpu_count[n] == 0:
                continue
            g = int(rng.integers(c.gpu_count[n]))
            c.set_gpu_signals(n, g, health_score=float(rng.choice([100, 98, 90, 60, 30])),
                              temp_c=float(rng.uniform(40, 95)), power_frac=float(rng.uniform(0.3, 1.05)),
                              util_forecast=float(rng.uniform(0, 1)))
            if rng.random() < 0.1:
                c.set_gpu_health(n, g, DEGRADED)
    return apply


def test_cached_scheduler_decides_like_the_scheduler_while_signals_change() -> None:
    from gpuaware.sim.synthetic import synthetic_pods

    islands = {8: (0, 0, 0, 0, 1, 1, 1, 1), 4: (0, 0, 1, 1), 2: (0, 0)}
    nodes = [NodeSpec(f"n{i:02d}", 96_000, 393_216, gpus, "V100M32" if gpus > 2 else "T4",
                      nvlink_islands=islands[gpus] if i % 3 else (), numa_nodes=islands[gpus])
             for i, gpus in enumerate([8, 4, 2, 2, 4, 8, 2, 2, 4, 2] * 4)]
    pods = synthetic_pods(700, seed=7)
    pods = [p if p.num_gpu < 2 or i % 5 else PodRequest(p.name, p.cpu_milli, p.memory_mib, 2, 1000, topology="nvlink")
            for i, p in enumerate(pods)]
    bare = replay(DEFAULT_PROFILE, nodes, pods, signal_noise(np.random.default_rng(3)))
    cached = replay(DEFAULT_PROFILE, nodes, pods, signal_noise(np.random.default_rng(3)), cached=True)
    assert cached == bare
    # and the signals did change decisions: WasteGradient under the same telemetry differs
    assert replay(OURS, nodes, pods, signal_noise(np.random.default_rng(3))) != bare


def test_gpu_aware_is_cacheable() -> None:
    sched = policy(DEFAULT_PROFILE, typical=TYPICAL)
    cached = CachedScheduler(sched)
    assert cached.cacheable and cached.gpu_key == WasteGradientScore.gpu_key


def test_the_cache_counts_the_decisions_forecasts_changed_as_the_profile_decides_without_them() -> None:
    # ground truth per decision: the same profile on the same snapshot with every forecast blanked
    from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods

    nodes = synthetic_nodes(30, seed=4)
    pods = synthetic_pods(400, seed=5)
    rank = np.random.default_rng(5).permutation(len(nodes))
    blind = policy(DEFAULT_PROFILE, typical=TYPICAL, seed=5, tie_rank=rank)
    effect = SignalEffect("forecast")
    cached = CachedScheduler(policy(DEFAULT_PROFILE, typical=TYPICAL, seed=5, tie_rank=rank), observers=[effect])
    rng = np.random.default_rng(6)
    c = Cluster(nodes)
    live: list[str] = []
    scored = node_changed = gpu_changed = 0
    for i, pod in enumerate(pods):
        if i >= 100 and i % 3 == 0:  # forecasts arrive from the 100th pod on: none counted before
            for _ in range(4):
                n = int(rng.integers(c.num_nodes))
                if c.gpu_count[n]:
                    c.set_gpu_signals(n, int(rng.integers(c.gpu_count[n])), util_forecast=float(rng.uniform(0, 1)))
        snap = c.snapshot()
        d = cached.schedule(pod, snap)
        if not isinstance(d, Decision):
            continue
        if "forecast" in snap.signals:
            other = blind.schedule(pod, snap.without_signal("forecast"))
            assert isinstance(other, Decision)
            scored += 1
            node_changed += other.node != d.node
            gpu_changed += other.node == d.node and other.gpus != d.gpus
        c.reserve(pod, d.node, d.gpus)
        live.append(pod.name)
        if i % 4 == 0 and len(live) > 40:
            c.unreserve(live.pop(0))
    assert (effect.scored, effect.changed, effect.gpu_changed) == (scored, node_changed, gpu_changed)
    assert scored > 150 and 0 < node_changed < scored and gpu_changed > 0  # forecasts decided some, not all


def test_without_signal_blanks_one_kind_and_leaves_the_view_alone() -> None:
    c = Cluster([node("a"), node("b")])
    c.set_gpu_signals(0, 1, util_forecast=0.8, temp_c=80.0, health_score=60)
    snap = c.snapshot()
    blind = snap.without_signal("forecast")
    assert np.isnan(blind.gpu_util_forecast).all() and blind.signals == snap.signals - {"forecast"}
    assert blind.gpu_temp_c[0, 1] == 80.0 and blind.gpu_health_score[0, 1] == 60  # other kinds kept
    assert snap.gpu_util_forecast[0, 1] == pytest.approx(0.8)  # the live view untouched
    assert (snap.without_signal("health").gpu_health_score == 100).all()


def test_a_profile_without_a_score_reading_the_signal_shows_its_observer_nothing() -> None:
    effect = SignalEffect("forecast")
    cached = CachedScheduler(policy(OURS, typical=TYPICAL), observers=[effect])
    c = Cluster([node("a"), node("b")])
    c.set_gpu_signals(0, 0, util_forecast=0.9)
    assert isinstance(cached.schedule(share(milli=500), c.snapshot()), Decision)
    assert (effect.scored, effect.changed, effect.gpu_changed) == (0, 0, 0)
