"""Preemption planning: the fewest, least important victims on the cheapest node, or no plan."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import node, share, whole

from gpuaware.placement import Cluster, NodeSpec, PodRequest, policy
from gpuaware.placement.preempt import Victim, plan_preemption


def _run(cluster: Cluster, pods: list[tuple[str, str, int, tuple[int, ...], int, bool, float, bool]]) -> list[Victim]:
    """Reserve (name, node, gpu_milli, gpus, priority, checkpointable, running_s, gang) pods; return them
    as the running set a plan may draw on."""
    out = []
    for name, node_name, milli, gpus, prio, ckpt, running, gang in pods:
        i = cluster.index[node_name]
        req = PodRequest(name, 1000, 1024, len(gpus), milli, priority=prio, gang_id="g" if gang else "")
        a = cluster.reserve(req, i, gpus)
        out.append(Victim(name, i, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, prio, ckpt, running, gang,
                          gpu_mem=a.gpu_mem))
    return out


def _sched():
    return policy("BestFit")  # a plan reads the profile's filters only


def _plan(cluster: Cluster, pod: PodRequest, running: list[Victim], **kw):
    return plan_preemption(pod, cluster.snapshot(), _sched(), running, **kw)


def _hi(gpus: int = 2, prio: int = 100, **kw) -> PodRequest:
    p = whole("hi", gpus=gpus)
    return PodRequest(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, priority=prio, **kw)


@pytest.mark.parametrize(("pods", "expected_node", "expected_victims"), [
    # a: two low-priority 2-GPU pods; b: two 2-GPU pods of priority 50. The 2-GPU pod needs one
    # victim; the lowest highest-victim-priority wins: one of a's (the reprieve keeps the other)
    ([("a1", "a", 1000, (0, 1), 10, False, 100.0, False), ("a2", "a", 1000, (2, 3), 10, False, 100.0, False),
      ("b1", "b", 1000, (0, 1), 50, False, 100.0, False), ("b2", "b", 1000, (2, 3), 50, False, 100.0, False)],
     "a", 1),
    # equal priorities: a's victims cannot checkpoint (2 GPUs x 100 s lost), b's can (0 lost): b
    ([("a1", "a", 1000, (0, 1), 10, False, 100.0, False), ("a2", "a", 1000, (2, 3), 10, False, 100.0, False),
      ("b1", "b", 1000, (0, 1), 10, True, 100.0, False), ("b2", "b", 1000, (2, 3), 10, True, 100.0, False)],
     "b", 1),
    # a: four 1-GPU pods of priority 10; b: 2-GPU pods of priority 20. Two of a's, not one of b's:
    # the highest victim priority (10 < 20) comes before the number of victims
    ([("a1", "a", 1000, (0,), 10, False, 5.0, False), ("a2", "a", 1000, (1,), 10, False, 5.0, False),
      ("a3", "a", 1000, (2,), 10, False, 5.0, False), ("a4", "a", 1000, (3,), 10, False, 5.0, False),
      ("b1", "b", 1000, (0, 1), 20, False, 5.0, False), ("b2", "b", 1000, (2, 3), 20, False, 5.0, False)],
     "a", 2),
])
def test_the_cheapest_minimal_plan_wins(pods, expected_node: str, expected_victims: int) -> None:
    cluster = Cluster([node("a", 4), node("b", 4)])
    running = _run(cluster, pods)
    plan = _plan(cluster, _hi(), running)
    assert plan is not None and plan.node_name == expected_node
    assert len(plan.victims) == expected_victims
    victims_gpus = {g for v in plan.victims for g in v.gpus}
    assert set(plan.gpus) <= victims_gpus and len(plan.gpus) == 2  # the pod takes what the victims free
    # the plan is minimal: without any one of its victims the pod no longer fits there
    freed = cluster
    for v in plan.victims:
        freed.unreserve(v.uid)
    freed.reserve(_hi(), plan.node, plan.gpus)
    freed.check()


@pytest.mark.parametrize("case", ["higher priority", "equal priority", "gang member", "excluded node"])
def test_no_plan_when_only_untouchable_pods_are_in_the_way(case: str) -> None:
    cluster = Cluster([node("a", 2)])
    prio = {"higher priority": 200, "equal priority": 100}.get(case, 10)
    running = _run(cluster, [("v", "a", 1000, (0, 1), prio, True, 10.0, case == "gang member")])
    exclude = np.array([case == "excluded node"])
    assert _plan(cluster, _hi(), running, exclude=exclude) is None


def test_a_plan_never_needs_more_than_max_victims() -> None:
    cluster = Cluster([node("a", 4)])
    running = _run(cluster, [(f"v{g}", "a", 1000, (g,), 0, False, 1.0, False) for g in range(4)])
    assert _plan(cluster, _hi(gpus=4), running, max_victims=3) is None
    plan = _plan(cluster, _hi(gpus=4), running, max_victims=4)
    assert plan is not None and len(plan.victims) == 4


def test_a_sharing_pod_evicts_only_what_it_needs_on_one_gpu() -> None:
    # GPU 0 holds 600 + 300 (priorities 5 and 1), GPU 1 holds 800 (priority 1). A 500-milli pod:
    # GPU 0 without the 300-milli pod has 400 free (not enough); without the 600 one 700 (enough);
    # GPU 1 without its pod has 1000. Candidates: {600-pod} (max priority 5) vs {800-pod} (1): GPU 1
    cluster = Cluster([node("a", 2)])
    running = _run(cluster, [("s600", "a", 600, (0,), 5, False, 1.0, False),
                             ("s300", "a", 300, (0,), 1, False, 1.0, False),
                             ("s800", "a", 800, (1,), 1, False, 1.0, False)])
    p = share("hi", milli=500)
    pod = PodRequest(p.name, p.cpu_milli, p.memory_mib, 1, 500, priority=10)
    plan = _plan(cluster, pod, running)
    assert plan is not None and [v.uid for v in plan.victims] == ["s800"] and plan.gpus == (1,)


def test_topology_requests_get_gpus_inside_one_island() -> None:
    # islands: GPUs 0,1 | 2,3; victims hold GPU 1 and GPU 2 (one per island) and GPU 3
    cluster = Cluster([NodeSpec("a", 32_000, 131_072, 4, "A100", nvlink_islands=(0, 0, 1, 1))])
    running = _run(cluster, [("v1", "a", 1000, (1,), 0, False, 1.0, False),
                             ("v2", "a", 1000, (2,), 0, False, 1.0, False),
                             ("v3", "a", 1000, (3,), 0, False, 9.0, False)])
    plan = _plan(cluster, _hi(topology="nvlink"), running)
    # evicting v1 frees island 0 (GPUs 0,1): one victim beats two (v2+v3 for island 1)
    assert plan is not None and [v.uid for v in plan.victims] == ["v1"] and plan.gpus == (0, 1)
