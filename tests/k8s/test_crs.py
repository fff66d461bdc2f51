"""GPUQueue / GPUPolicy objects become the quota tree and a placement profile through the services'
own validators; bad sets are refused naming the object."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaware.k8s.crds import all_crds
from gpuaware.k8s.crs import CustomResourceError, QueueSet, policy_profile, quota_config
from gpuaware.k8s.watch import Change


def _queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuaware.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
            "spec": {"name": name, **spec}}


def test_queues_make_the_quota_tree() -> None:
    cfg = quota_config([_queue("team-b", parent="org", guaranteed={"*": {"gpus": 4}}),
                        _queue("org", guaranteed={"*": {"gpus": 16}}),
                        _queue("team-a", parent="org", guaranteed={"*": {"gpus": 8}}, weight=2.0)],
                       default_queue="team-a")
    assert [q.name for q in cfg.queues] == ["org", "team-a", "team-b"] and cfg.default_queue == "team-a"
    assert cfg.queues[1].weight == 2.0 and cfg.queues[1].guaranteed["*"].gpus == 8


def test_a_queues_lease_and_the_trees_cap_reach_the_quota_tree() -> None:
    objs = [_queue("org", min_runtime_s=600), _queue("team", parent="org"), _queue("quick", parent="org", min_runtime_s=0)]
    cfg = quota_config(objs, tree_fields={"max_preemptions_per_pod": 3})
    assert cfg.max_preemptions_per_pod == 3 and quota_config(objs).max_preemptions_per_pod == 2
    s = QueueSet(tree_fields={"max_preemptions_per_pod": None})
    for o in objs:
        s.record(Change("added", o))
    assert s.reconcile()
    assert s.tree.config.max_preemptions_per_pod is None
    assert {q: s.tree.min_runtime(q) for q in ("org", "team", "quick")} == {"org": 600, "team": 600, "quick": 0}
    spec = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "GPUQueue")["spec"]["versions"][0]
    field = spec["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["min_runtime_s"]
    assert field == {"type": "number", "minimum": 0, "nullable": True}  # the apiserver refuses a negative lease


@pytest.mark.parametrize(("objs", "match"), [
    ([_queue("a", weight=-1)], "GPUQueue a"),
    ([_queue("a", min_runtime_s=-5)], r"GPUQueue a: Expected `float` >= 0.0 - at `\$.min_runtime_s`"),
    ([{"metadata": {"name": "a"}, "spec": {"name": "b"}}], "differs from metadata.name"),
    ([_queue("a", parent="ghost")], "ghost"),
    # children guaranteed more than their parent: 8 + 12 > 16
    ([_queue("org", guaranteed={"*": {"gpus": 16}}), _queue("x", parent="org", guaranteed={"*": {"gpus": 8}}),
      _queue("y", parent="org", guaranteed={"*": {"gpus": 12}})], "GPUQueues"),
])
def test_bad_queue_sets_are_refused_naming_the_object(objs: list[dict[str, Any]], match: str) -> None:
    with pytest.raises(CustomResourceError, match=match):
        quota_config(objs)


def test_policy_is_a_checked_profile() -> None:
    good = {"metadata": {"name": "packing"}, "spec": {"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}}
    assert policy_profile(good)["gpu"] == "fgd"
    with pytest.raises(CustomResourceError, match=r"GPUPolicy bad: .*nope"):
        policy_profile({"metadata": {"name": "bad"}, "spec": {"score": [{"name": "nope", "weight": 1}]}})
