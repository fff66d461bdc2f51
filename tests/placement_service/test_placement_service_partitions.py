"""Strict partitions from the quota tree file in placement's view (no server): the queues a partition
reserves a node to get it, nobody else does even when it is idle, and a tree that does not validate
stops placement with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES
from gpuaware.runtime import SettingsError
from gpuaware.services.placement.partitions import partition_filters
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable

TREE = """
default_queue: research
queues:
  - {name: org}
  - {name: genomics, parent: org}
  - {name: clinical, parent: genomics}
  - {name: research, parent: org}
partitions:
  - {name: secure, nodes: [secure-1], queues: [genomics]}
"""


def _state(tree: Path) -> PlacementState:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"], extra_filters=partition_filters(str(tree)))
    st.apply_inventory(inventory("c", "secure-1", gpus=2))
    st.apply_inventory(inventory("c", "open-1", gpus=2))
    return st


def test_a_reserved_node_serves_its_queues_only(tmp_path: Path) -> None:
    tree = tmp_path / "queues.yaml"
    tree.write_text(TREE)
    st = _state(tree)
    first = st.on_pending(pending("c", "r1", num_gpu=2, queue="research"))
    assert isinstance(first[0], Decided) and first[0].msg.node == "open-1"
    # secure-1 is idle, yet neither research nor a pod naming no queue (defaulted to research) go there
    for uid, queue in (("r2", "research"), ("d1", "default")):
        (verdict,) = st.on_pending(pending("c", uid, num_gpu=1, queue=queue))
        assert isinstance(verdict, Unschedulable), verdict
    # clinical is below genomics, the partition's queue: secure-1 is its
    (clin,) = st.on_pending(pending("c", "c1", num_gpu=2, queue="clinical"))
    assert isinstance(clin, Decided) and clin.msg.node == "secure-1"
    why = st.explain_pending(pending("c", "r3", num_gpu=1, queue="research"))
    assert not why.schedulable


def test_no_file_no_partitions_and_a_bad_tree_says_why(tmp_path: Path) -> None:
    assert partition_filters("") == ()
    bad = tmp_path / "bad.yaml"
    bad.write_text("queues:\n  - {name: a, parent: b}\n  - {name: b, parent: a}\n")
    with pytest.raises(SettingsError, match="QUOTA_TREE"):
        partition_filters(str(bad))
    with pytest.raises(SettingsError, match="cannot read"):
        partition_filters(str(tmp_path / "missing.yaml"))
