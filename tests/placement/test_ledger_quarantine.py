"""A binding holds its GPUs in the view even when one of them is quarantined after it was bound: the
view rebuilt over it (a new leader's, a node set that changed) must not show the pod's other GPUs as
free, or new pods are decided onto GPUs the world holds full and the binder refuses them."""

from __future__ import annotations

from gpuaware.placement import QUARANTINED
from gpuaware.placement.ledger import Ledger
from gpuaware.placement.model import NodeSpec, PodRequest

NODE = NodeSpec("n1", cpu_milli=64_000, memory_mib=512_000, num_gpu=8, gpu_model="A100-SXM4-80GB")
WIDE = PodRequest("wide", cpu_milli=8_000, memory_mib=64_000, num_gpu=8, gpu_milli=1000)
SMALL = PodRequest("small", cpu_milli=1_000, memory_mib=8_000, num_gpu=1, gpu_milli=1000)


def _ledger_with_wide_pod_bound() -> Ledger:
    ledger = Ledger()
    ledger.set_nodes([NODE])
    assert ledger.bound("wide", 0, "n1", range(8), WIDE, "d-wide", now=1.0)
    return ledger


def test_a_rebuild_after_a_quarantine_keeps_the_binding_on_every_gpu() -> None:
    ledger = _ledger_with_wide_pod_bound()
    assert ledger.set_gpu_health("n1", 3, QUARANTINED) is False
    assert ledger.set_nodes([NODE]) == []  # rebuilt: the binding is placed again, quarantine or not
    cluster = ledger.cluster
    assert cluster is not None and cluster.allocations["wide"].gpus == tuple(range(8))
    assert all(cluster.gpu_free[0, g] == 0 for g in range(8))  # no GPU of the node looks free


def test_a_binding_reported_onto_a_quarantined_gpu_is_taken_as_the_truth() -> None:
    ledger = Ledger()
    ledger.set_nodes([NODE])
    ledger.set_gpu_health("n1", 0, QUARANTINED)  # quarantined between the decision and the binding
    assert ledger.bound("small", 0, "n1", [0], SMALL, "d-small", now=1.0)
    cluster = ledger.cluster
    assert cluster is not None and "small" in cluster.allocations


def test_a_quarantined_gpu_still_takes_no_new_decision() -> None:
    ledger = Ledger()
    ledger.set_nodes([NODE])
    ledger.set_gpu_health("n1", 0, QUARANTINED)
    ledger.decide("small", 0, "d-small", "n1", [0], SMALL, now=1.0)
    cluster = ledger.cluster
    assert cluster is not None and "small" not in cluster.allocations and ledger.stats.conflicts == 1
