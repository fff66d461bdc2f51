"""GPUQueue / GPUPolicy objects become the quota tree and a placement profile through the services'
own validators; bad sets are refused naming the object."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaware.k8s.crs import CustomResourceError, policy_profile, quota_config


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


@pytest.mark.parametrize(("objs", "match"), [
    ([_queue("a", weight=-1)], "GPUQueue a"),
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
