"""Strict partitions as a Filter: a node reserved to some queues is never used by another queue's pod,
even idle, whatever the pods, the profile or the path (allocate, priority preemption, quota reclaim);
pods of the allowed queues still go anywhere. Property-tested with hypothesis, plus a small table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import node

from gpuaware.placement import POLICIES, Cluster, CycleState, PodRequest, TypicalPods
from gpuaware.placement.actions import reclaim as reclaim_for
from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.partitions import StrictPartitions
from gpuaware.placement.preempt import Victim
from gpuaware.placement.session import Placed, Session

QUEUES = ("a", "b", "c")


def _session(c: Cluster, filt: StrictPartitions, policy: str) -> Session:
    typical = TypicalPods.from_counts({(1000, 1, 1000, ""): 1.0, (1000, 1, 250, ""): 1.0})
    fw = REGISTRY.build_framework(POLICIES[policy], typical=typical, extra_filters=(filt,),
                                  default_post_filter={"name": "default-preemption", "args": {}})

    def running() -> list[Victim]:
        return [Victim(a.pod, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, 0, gpu_mem=a.gpu_mem)
                for a in c.allocations.values()]

    return Session(c, fw, running=running)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(2, 6),
    reserved=st.dictionaries(st.integers(0, 5), st.frozensets(st.sampled_from(QUEUES), max_size=2), max_size=4),
    pods=st.lists(st.tuples(st.sampled_from((*QUEUES, "", "default")), st.integers(1, 2), st.sampled_from((250, 1000)),
                            st.integers(0, 5)), min_size=1, max_size=24),
    policy=st.sampled_from(("BestFit", "WasteGradient", "DotProd")),
    reclaim=st.booleans(),
)
def test_no_pod_of_another_queue_ever_lands_on_a_reserved_node(nodes, reserved, pods, policy, reclaim) -> None:
    c = Cluster([node(f"n{i}", gpus=2) for i in range(nodes)])
    by_name = {f"n{i}": qs for i, qs in reserved.items() if i < nodes}
    filt = StrictPartitions(by_name, default_queue="c")
    s = _session(c, filt, policy)
    queue_of: dict[str, str] = {}
    for i, (queue, gpus, milli, prio) in enumerate(pods):
        p = PodRequest(f"p{i}", 1000, 1024, gpus if milli == 1000 else 1, milli, priority=prio, queue=queue)
        queue_of[p.name] = filt.queue_of(p)
        got = s.run([p])[0]
        if reclaim and not isinstance(got, Placed):
            reclaim_for(s, p, list(c.allocations))  # quota names every running pod: still never a reserved node
    for a in c.allocations.values():
        allowed = by_name.get(c.node_names[a.node])
        assert allowed is None or queue_of[a.pod] in allowed, (a.pod, queue_of[a.pod], c.node_names[a.node], allowed)
    c.check()


@pytest.mark.parametrize(("queue", "expected"), [
    ("a", [True, True, False]),    # a: its own partition and the open node
    ("b", [False, True, True]),    # b: the open node and the node it shares with c
    ("c", [False, True, True]),
    ("", [False, True, True]),     # no queue: the default queue (c)
    ("zzz", [False, True, False]),  # a queue no partition names: open nodes only
])
def test_the_mask_per_queue(queue: str, expected: list[bool]) -> None:
    c = Cluster([node("secure"), node("open"), node("shared")])
    filt = StrictPartitions({"secure": {"a"}, "shared": {"b", "c"}}, default_queue="c")
    mask = filt.filter(CycleState(), PodRequest("p", 0, 0, 1, 1000, queue=queue), c.snapshot())
    assert mask.tolist() == expected


def test_an_idle_reserved_node_stays_idle_for_others_and_the_owner_still_gets_it() -> None:
    c = Cluster([node("secure", gpus=2), node("open", gpus=2)])
    s = _session(c, StrictPartitions({"secure": {"clinical"}}), "BestFit")
    research = [s.run([PodRequest(f"r{i}", 1000, 1024, 1, 1000, queue="research")])[0] for i in range(3)]
    assert [isinstance(r, Placed) for r in research] == [True, True, False]  # secure stays idle
    assert {c.node_names[a.node] for a in c.allocations.values()} == {"open"}
    # a high-priority research pod preempts on the open node, never onto the partition
    hi = s.run([PodRequest("r-hi", 1000, 1024, 1, 1000, priority=99, queue="research")])[0]
    assert isinstance(hi, Placed) and hi.victims and c.node_names[hi.decision.node] == "open"
    assert {c.node_names[a.node] for a in c.allocations.values()} == {"open"}
    owner = s.run([PodRequest("clin", 1000, 1024, 2, 1000, queue="clinical")])[0]
    assert isinstance(owner, Placed) and c.node_names[c.allocations["clin"].node] == "secure"
    assert np.all(c.gpu_free[c.index["secure"]] == 0)
