"""The example Filter plugin (libs/placement/README.md): CPU-only pods leave part of a GPU node's CPU."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import cpu_only, node, occupy, whole

from gpuaware.placement import REGISTRY, Cluster, CycleState, ProfileError
from gpuaware.placement.cpu_reserve import GpuNodeCpuReserve
from gpuaware.placement.session import Framework, Placed, Session, Waiting


@pytest.mark.parametrize(("cpu_used", "pod_cpu", "fraction", "passes"), [
    # 32 cores, a quarter (8,000 m) must stay free: 20,000 used + 4,000 asked leaves 8,000 -> passes
    (20_000, 4_000, 0.25, True),
    # 20,000 + 4,001 leaves 7,999 < 8,000 -> refused
    (20_000, 4_001, 0.25, False),
    # fraction 0: only the CPU itself limits (ResourcesFit's job)
    (28_000, 4_000, 0.0, True),
])
def test_cpu_only_pods_leave_the_reserve_on_gpu_nodes(cpu_used: int, pod_cpu: int, fraction: float,
                                                       passes: bool) -> None:
    c = Cluster([node("g", 2, cpu=32_000), node("c", 0, cpu=32_000)])
    occupy(c, "g", cpu_used=cpu_used)
    occupy(c, "c", cpu_used=cpu_used)
    mask = GpuNodeCpuReserve(fraction).filter(CycleState(), cpu_only(cpu=pod_cpu), c.snapshot())
    assert mask.tolist() == [passes, True]  # the GPU-less node is never held back
    assert GpuNodeCpuReserve(fraction).filter(CycleState(), whole(cpu=pod_cpu), c.snapshot()).all()


def test_in_a_profile_it_keeps_gpus_usable_for_the_gpu_pod_that_comes_later() -> None:
    profile = {"filter": [{"name": "resources-fit"}, {"name": "gpu-fit"},
                          {"name": "gpu-node-cpu-reserve", "args": {"fraction": 0.25}}],
               "score": [{"name": "bestfit", "weight": 1}], "gpu": "best"}
    for reserve, expect in ((True, Placed), (False, Waiting)):
        c = Cluster([node("g", 2, cpu=32_000)])
        config = profile if reserve else {**profile, "filter": profile["filter"][:2]}
        s = Session(c, Framework.of(REGISTRY.build(config)))
        s.run([cpu_only(f"c{i}", cpu=8_000) for i in range(4)])  # 3 fit under the reserve, 4 without it
        got = s.run([whole("gpu-pod", 1, cpu=4_000)])[0]
        assert isinstance(got, expect)
        assert np.all(c.cpu_free >= 0)


def test_a_fraction_outside_0_1_is_refused_naming_the_field() -> None:
    with pytest.raises(ProfileError, match=r"\$\.filter\[0\]\.args\.fraction"):
        REGISTRY.validate({"filter": [{"name": "gpu-node-cpu-reserve", "args": {"fraction": 1.5}}],
                           "score": [{"name": "bestfit"}]})
