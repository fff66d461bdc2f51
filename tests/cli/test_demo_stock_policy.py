"""KubeDefault, the demo's stock-Kubernetes baseline: whole GPUs only, first fit in node order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaware.placement import (
    POLICIES,
    Cluster,
    Code,
    Decision,
    NodeSpec,
    PodRequest,
    Status,
    WholeGpuOnly,
    canonical_policy,
    policy,
)
from gpuaware.placement.cache import CachedScheduler
from gpuaware.placement.session import Framework, Placed, Session
from gpuaware.placement.stock import KUBE_DEFAULT


def cluster(*gpus: int) -> Cluster:
    return Cluster([NodeSpec(f"n{i}", 64_000, 262_144, g, "A100") for i, g in enumerate(gpus)])


def fill(c: Cluster, node: str, gpu: int, milli: int, name: str) -> None:
    c.reserve(PodRequest(name, 0, 0, 1, milli), c.index[node], (gpu,))


def place(c: Cluster, pod: PodRequest) -> Decision:
    (got,) = Session(c, Framework.of(policy(KUBE_DEFAULT))).run([pod])
    assert isinstance(got, Placed), got
    return got.decision


def test_registered_under_its_name() -> None:
    assert KUBE_DEFAULT in POLICIES and canonical_policy("kubedefault") == KUBE_DEFAULT


@pytest.mark.parametrize(("pods", "expected"), [
    # whole-GPU pods: first node with room, first free GPUs there
    ([PodRequest("a", 0, 0, 1, 1000), PodRequest("b", 0, 0, 1, 1000), PodRequest("c", 0, 0, 1, 1000)],
     [("n0", (0,)), ("n0", (1,)), ("n1", (0,))]),
    # fractional pods each take a GPU of their own while whole GPUs are free (0.3 + 0.3 would fit on one)
    ([PodRequest("a", 0, 0, 1, 300), PodRequest("b", 0, 0, 1, 300), PodRequest("c", 0, 0, 1, 300)],
     [("n0", (0,)), ("n0", (1,)), ("n1", (0,))]),
    # a 2-GPU pod skips n0 once it has a GPU taken
    ([PodRequest("a", 0, 0, 1, 500), PodRequest("b", 0, 0, 2, 1000)], [("n0", (0,)), ("n1", (0, 1))]),
])
def test_first_fit_with_whole_gpus(pods: list[PodRequest], expected: list[tuple[str, tuple[int, ...]]]) -> None:
    c = cluster(2, 2)
    assert [(d.node_name, d.gpus) for d in (place(c, p) for p in pods)] == expected


def test_a_fraction_prefers_a_later_node_with_a_whole_gpu_over_sharing() -> None:
    c = cluster(1, 1)
    fill(c, "n0", 0, 500, "half")  # n0 has 0.5 free but no whole GPU
    assert place(c, PodRequest("p", 0, 0, 1, 300)).node_name == "n1"


@pytest.mark.parametrize("cached", [False, True])
def test_when_no_whole_gpu_is_left_a_fraction_waits(cached: bool) -> None:
    # stock Kubernetes rounds 0.3 GPU up to one whole GPU: n0 (0.5 free) and n1 (0.8 free) both fit
    # 300 milli, neither has a whole GPU, so the pod stays pending; it is not unresolvable (it would
    # fit an idle GPU) and it is placed once a whole GPU comes back
    c = cluster(1, 1)
    fill(c, "n0", 0, 500, "x")
    fill(c, "n1", 0, 200, "y")
    sched = policy(KUBE_DEFAULT)
    assert any(isinstance(f, WholeGpuOnly) for f in sched.filters)
    s = CachedScheduler(sched) if cached else sched
    if cached:
        assert s.cacheable  # the filter is per node: the cached scheduler still applies
    pod = PodRequest("p", 0, 0, 1, 300)
    r = s.schedule(pod, c.snapshot())
    assert isinstance(r, Status) and r.code == Code.UNSCHEDULABLE
    c.unreserve("y")
    d = s.schedule(pod, c.snapshot())
    assert isinstance(d, Decision) and (d.node_name, d.gpus) == ("n1", (0,))


def test_whole_gpu_pods_are_unchanged_by_the_filter() -> None:
    # a 1-GPU pod needs a whole GPU anyway: the filter passes it, GpuFit decides (n1 is idle)
    c = cluster(1, 1)
    fill(c, "n0", 0, 500, "x")
    assert place(c, PodRequest("p", 0, 0, 1, 1000)).node_name == "n1"


def test_a_plain_placement_process_knows_the_policy(tmp_path: Path) -> None:
    # no preload, no launcher: the service's own settings resolve KubeDefault in a fresh interpreter
    # (what the demo's baseline starts: python -m gpuaware.services.placement)
    probe = ("import sys\nfrom gpuaware.services.placement.settings import PlacementSettings\n"
             "s = PlacementSettings.from_env()\nprint(s.policy_name, s.policy_config['gpu'], sys.argv[1:])\n")
    (tmp_path / "probe.py").write_text(probe)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAWARE_PLACEMENT_")}
    env.update(PYTHONPATH=str(tmp_path), GPUAWARE_PLACEMENT_POLICY="kubedefault")
    plain = subprocess.run([sys.executable, "-m", "probe", "x"], capture_output=True, text=True, env=env, check=True)
    assert plain.stdout.strip() == "KubeDefault whole-gpu ['x']"
