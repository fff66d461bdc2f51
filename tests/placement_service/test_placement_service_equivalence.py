"""The service decides exactly what the evaluator measures: the same pods through the placement
service's state (wire messages in, PlacementDecided out) and through `gpuaware eval placement`'s
`run_one` give the same node and GPUs, pod by pod. Both go through one scheduling session, so a
figure in bench/results is a decision the service would make; this test keeps it so."""

from __future__ import annotations

import numpy as np
import pytest
from placement_service_helpers import inventory, pending

from gpuaware.placement import DEFAULT_PROFILE, OURS, POLICIES, TypicalPods
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable
from gpuaware.sim.evaluator import run_one
from gpuaware.sim.synthetic import synthetic_nodes, synthetic_pods


@pytest.mark.parametrize("profile", [DEFAULT_PROFILE, OURS, "FGD", "BestFit"])
def test_service_and_evaluator_decide_identically_pod_by_pod(profile: str) -> None:
    seed = 11
    nodes = synthetic_nodes(120, seed=1)  # names sort in list order, as the service orders its view
    requests = synthetic_pods(1200, seed=2, gpu_types=("G2", "T4", "V100M32"), typed_fraction=0.25)
    typical = TypicalPods.from_requests(requests)
    rank = np.random.default_rng(seed).permutation(len(nodes))  # the service's tie-break order for `seed`

    evaluated = run_one(nodes, requests, profile, seed, inflation=1.2, typical=typical, record_assignments=True,
                        tie_rank=rank)
    assert evaluated.assignments is not None

    st = PlacementState(cluster_name="c", source="placement/test", policy_name=profile,
                        policy_config=dict(POLICIES[profile]), typical=typical, learn_typical=False, seed=seed)
    for n in nodes:
        st.apply_inventory(inventory("c", n.name, model=n.gpu_model, gpus=n.num_gpu, cpu=n.cpu_milli,
                                     memory=n.memory_mib, islands=False))
    served = []
    for pod, _, _ in evaluated.assignments:
        out = st.on_pending(pending("c", pod.name, num_gpu=pod.num_gpu, gpu_milli=pod.gpu_milli or 1000,
                                    cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpu_types=pod.gpu_types))
        assert len(out) == 1
        if isinstance(out[0], Decided):
            served.append((pod.name, out[0].msg.node, tuple(s.gpu_index for s in out[0].msg.slices)))
        else:
            assert isinstance(out[0], Unschedulable)
            served.append((pod.name, "", ()))

    expected = [(pod.name, node, tuple(gpus)) for pod, node, gpus in evaluated.assignments]
    mismatches = [(e, s) for e, s in zip(expected, served, strict=True) if e != s]
    assert not mismatches, f"{len(mismatches)} of {len(expected)} decisions differ; first: {mismatches[:3]}"
    placed = sum(1 for _, node, _ in expected if node)
    # the workload is inflated past capacity: both placed most pods and refused the same others
    assert 0.6 * len(expected) < placed < len(expected)
    st.ledger.check()
