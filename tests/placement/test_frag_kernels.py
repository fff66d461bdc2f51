"""The compiled fragmentation kernels: the fused waste-gradient kernels equal their parts composed in
numpy, FGD's GPU rule, the integer sigmoid, compiling without a cache folder, and the service's
warm-up compiling exactly what later decisions call."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import node, occupy

from gpuaware.placement import Cluster, PodRequest, TypicalPods, fit_kernels, row_kernels
from gpuaware.placement import frag_kernels as kernels
from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.cache import CachedScheduler
from gpuaware.placement.compiled import kernel
from gpuaware.placement.frag import frag_delta_share, frag_delta_whole, sigmoid_score
from gpuaware.placement.framework import CycleState, rows_view, usable_gpus
from gpuaware.placement.warmup import warm_up
from gpuaware.placement.waste import WasteGradientScore

TYPICAL = TypicalPods.from_counts({(1000, 1, 500, ""): 5, (2000, 1, 1000, ""): 4, (4000, 0, 0, ""): 3,
                                   (500, 1, 250, "G2"): 2, (2000, 2, 1000, ""): 2, (8000, 8, 1000, ""): 1})


def busy_cluster(seed: int) -> Cluster:
    rng = np.random.default_rng(seed)
    nodes = [node(f"n{i}", gpus=int(rng.choice([0, 1, 2, 4, 8])), model=str(rng.choice(["T4", "G2"])),
                  cpu=int(rng.choice([8000, 32_000, 96_000]))) for i in range(60)]
    c = Cluster(nodes)
    for n in nodes:
        used = {g: int(rng.choice([0, 0, 100, 250, 500, 700, 1000])) for g in range(n.num_gpu)}
        occupy(c, n.name, {g: u for g, u in used.items() if u}, int(rng.integers(0, n.cpu_milli // 2)))
    return c


def numpy_pick(delta: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FGD's GPU rule as numpy states it: best integer score among valid GPUs, first on ties."""
    gpu = np.where(valid, sigmoid_score(delta), -1).argmax(axis=1)
    return delta[np.arange(delta.shape[0]), gpu], gpu


def numpy_strand(score: WasteGradientScore, cpu: np.ndarray, total: np.ndarray, pod: PodRequest) -> np.ndarray:
    def stranded(c: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, g - c / score.rho)
    return score.strand_weight * (stranded(cpu, total)
                                  - stranded(cpu - pod.score_cpu_milli, total - pod.total_gpu_milli))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_waste_kernels_equal_their_parts(seed: int) -> None:
    c = busy_cluster(seed)
    snap = c.snapshot()
    score = WasteGradientScore(TYPICAL)
    st = score.frag_state(snap)
    rows = np.arange(c.num_nodes)
    pods = [PodRequest("s1", cpu_milli=1000, num_gpu=1, gpu_milli=250),
            PodRequest("s2", cpu_milli=6000, num_gpu=1, gpu_milli=700),
            PodRequest("w1", cpu_milli=2000, num_gpu=1, gpu_milli=1000),
            PodRequest("w4", cpu_milli=16_000, num_gpu=4, gpu_milli=1000),
            PodRequest("cpu", cpu_milli=3000)]
    for pod in pods:
        fits = (snap.gpu_free >= max(pod.gpu_milli, 1)).sum(axis=1) >= max(pod.num_gpu, 0)
        ok = rows[fits]
        got, gpu = score.deltas(pod, snap, ok)
        cpu = snap.cpu_free[ok].astype(np.float64)
        strand = numpy_strand(score, cpu, st.total[ok].astype(np.float64), pod)
        if pod.is_gpu_share:
            delta, valid = frag_delta_share(st, snap, ok, pod.gpu_milli, pod.score_cpu_milli)
            a = snap.gpu_free[ok]
            delta = delta + score.gap_weight * (score.gap[a] - score.gap[np.maximum(a - pod.gpu_milli, 0)])
            best, want_gpu = numpy_pick(delta, valid)
            assert gpu.tolist() == want_gpu.tolist(), pod.name
            want = best + strand
        else:
            want = frag_delta_whole(st, snap, ok, pod.num_gpu, pod.score_cpu_milli) + strand
            assert (gpu == -1).all()
        assert got == pytest.approx(want, rel=1e-12, abs=1e-9), pod.name


def test_gpu_pick_is_fgd_rule_with_ties_and_rows_without_a_fit() -> None:
    rng = np.random.default_rng(5)
    delta = rng.choice([-3000.0, -250.0, 0.0, 0.0, 10.0, 250.0, 2000.0], size=(200, 8))
    valid = rng.random((200, 8)) < 0.6
    valid[:7] = False  # rows where no GPU fits: GPU 0 and its delta
    got, gpu = kernels.gpu_pick(delta, valid)
    want, want_gpu = numpy_pick(delta, valid)
    assert gpu.tolist() == want_gpu.tolist()
    assert got.tolist() == want.tolist()


def test_sigmoid_scores_match_the_formula_in_any_shape() -> None:
    d = np.concatenate([np.linspace(-9000, 9000, 3601), [-1e9, -709_000.0, -1e6, 1e6, 1e9, 0.0, -0.0]])
    with np.errstate(over="ignore"):
        want = (1.0 / (1.0 + np.exp(-d / 1000.0)) * 100.0).astype(np.int64)
    assert sigmoid_score(d).tolist() == want.tolist()
    square = d[:3600].reshape(60, 60)
    assert sigmoid_score(square).shape == (60, 60)
    assert (sigmoid_score(square).ravel() == want[:3600]).all()


def test_a_kernel_without_a_cache_folder_compiles_per_process() -> None:
    namespace: dict = {}
    exec("def twice(x):\n    return 2 * x\n", namespace)  # no source file: numba has nowhere to cache it
    twice = kernel(namespace["twice"])
    assert twice(21) == 42
    assert twice.py_func is namespace["twice"]


def test_warm_up_compiles_what_decisions_and_preemption_plans_call() -> None:
    warm_up(REGISTRY.policy_config("GpuAware"))
    every = [getattr(m, name) for m in (kernels, fit_kernels, row_kernels) for name in m.__all__]
    compiled = [len(k.signatures) for k in every]
    assert kernels.waste_share.signatures and kernels.waste_whole.signatures and row_kernels.store_values.signatures
    c = busy_cluster(9)
    c.set_gpu_signals(2, 0, health_score=60.0, temp_c=80.0, power_frac=0.9, util_forecast=0.7)
    framework = REGISTRY.build_framework(REGISTRY.policy_config("GpuAware"), typical=TYPICAL)
    assert isinstance(framework.scheduler, CachedScheduler)
    for i, (num, milli) in enumerate([(1, 300), (1, 1000), (2, 1000), (0, 0), (1, 500)] * 4):
        pod = PodRequest(f"p{i}", cpu_milli=1000, num_gpu=num, gpu_milli=milli)
        d = framework.scheduler.schedule(pod, c.snapshot())
        if hasattr(d, "node"):
            c.reserve(pod, d.node, d.gpus)
        view = rows_view(c.snapshot(), np.array([1, 4, 7]))  # as preemption plans check what-if rows
        for f in framework.scheduler.inner.filters:
            f.filter(CycleState(), pod, view)
        usable_gpus(pod, view)
    assert [len(k.signatures) for k in every] == compiled


@pytest.mark.parametrize("policy", sorted(REGISTRY.policies))
def test_warm_up_compiles_what_every_registered_policy_calls(policy: str) -> None:
    config = REGISTRY.policy_config(policy)
    warm_up(config)
    every = [getattr(m, name) for m in (kernels, fit_kernels, row_kernels) for name in m.__all__]
    compiled = [len(k.signatures) for k in every]
    c = busy_cluster(4)
    framework = REGISTRY.build_framework(config, typical=TYPICAL)
    for i, (num, milli) in enumerate([(1, 300), (1, 1000), (2, 1000), (0, 0)] * 2):
        pod = PodRequest(f"p{i}", cpu_milli=1000, num_gpu=num, gpu_milli=milli)
        d = framework.scheduler.schedule(pod, c.snapshot())
        if hasattr(d, "node"):
            c.reserve(pod, d.node, d.gpus)
    assert [len(k.signatures) for k in every] == compiled, "a decision compiled a kernel warm_up left out"
