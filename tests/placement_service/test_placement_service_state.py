"""PlacementState without a server: the decisions, verdicts and retries the handlers publish."""

from __future__ import annotations

import time

from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES
from gpuaware.schemas.binder import PodFinished, PodOutcome
from gpuaware.schemas.health import GpuStateChanged, HealthState
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable


def _state(**kw) -> PlacementState:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"], **kw)
    st.apply_inventory(inventory("c", "a", gpus=2))
    st.apply_inventory(inventory("c", "b", gpus=2))
    return st


def _finished(uid: str) -> PodFinished:
    return PodFinished(source="binder", emitted_at=time.time(), cluster="c", pod_uid=uid, pod_name=uid,
                       namespace="ns", outcome=PodOutcome.SUCCEEDED, finished_at=time.time())


def test_decide_park_and_retry_when_capacity_is_freed() -> None:
    st = _state()
    out = [st.on_pending(pending("c", f"p{i}", num_gpu=2)) for i in range(3)]
    assert [type(o[0]) for o in out] == [Decided, Decided, Unschedulable]
    assert out[2][0].msg.reason == "insufficient_gpu" and out[2][0].msg.pod is not None
    assert st.on_pending(pending("c", "p2", num_gpu=2)) == []  # redelivered: nothing new
    # nothing freed: a retry pass decides nothing and publishes nothing
    assert st.retry() == ([], False)
    assert st.apply_finished(_finished("p0"))
    again, more = st.retry()
    assert not more and len(again) == 1 and isinstance(again[0], Decided)
    assert again[0].msg.decision_id == "p2/0" and again[0].msg.node == out[0][0].msg.node
    st.ledger.check()


def test_a_quarantined_gpu_takes_no_pod_and_is_explained() -> None:
    st = _state()
    for g in range(2):
        st.apply_health(GpuStateChanged(source="health", emitted_at=0.0, cluster="c", node="a",
                                        gpu_uuid=f"GPU-a-{g}", gpu_index=g, current=HealthState.QUARANTINED,
                                        score=5.0, changed_at=0.0))
    st.ensure_cluster()
    first = st.on_pending(pending("c", "x", num_gpu=2))
    assert isinstance(first[0], Decided) and first[0].msg.node == "b"
    blocked = st.on_pending(pending("c", "y", num_gpu=2))
    assert isinstance(blocked[0], Unschedulable) and blocked[0].msg.reason == "unhealthy_gpus"
    # the quarantine lifts: capacity is back, the parked pod is placed on a
    assert st.apply_health(GpuStateChanged(source="health", emitted_at=0.0, cluster="c", node="a",
                                           gpu_uuid="GPU-a-0", gpu_index=0, current=HealthState.HEALTHY,
                                           previous=HealthState.QUARANTINED, score=90.0, changed_at=1.0))
    st.apply_health(GpuStateChanged(source="health", emitted_at=0.0, cluster="c", node="a", gpu_uuid="GPU-a-1",
                                    gpu_index=1, current=HealthState.HEALTHY, previous=HealthState.QUARANTINED,
                                    score=90.0, changed_at=1.0))
    out, _ = st.retry()
    assert isinstance(out[0], Decided) and out[0].msg.pod_uid == "y" and out[0].msg.node == "a"


def test_the_request_mix_is_learned_from_pending_pods() -> None:
    st = _state(typical_min_pods=20, typical_window=50)
    prior = st.typical
    for i in range(20):
        st.on_pending(pending("c", f"s{i}", gpu_milli=250, cpu_milli=1000))
        st.apply_finished(_finished(f"s{i}"))
    assert st.typical is not prior and st.typical.keys == ((1000, 1, 250, ""),)
    assert st.counters.scheduler_rebuilds >= 2


def test_other_clusters_and_an_empty_view_are_not_decided() -> None:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="DotProd",
                        policy_config=POLICIES["DotProd"])
    assert st.on_pending(pending("other", "z")) == []
    try:
        st.on_pending(pending("c", "z"))
    except RuntimeError as exc:
        assert "no nodes" in str(exc)
    else:
        raise AssertionError("an empty cluster view must not decide (the message is retried later)")


def test_gpu_memory_held_by_sharing_pods_is_respected() -> None:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"])
    st.apply_inventory(inventory("c", "t1", model="T4", gpus=1))  # 15 GiB
    st.apply_inventory(inventory("c", "t2", model="T4", gpus=1))
    a = st.on_pending(pending("c", "a", gpu_milli=300, gpu_memory_mib=12 * 1024))[0]
    # compute would fit beside a (300 + 300 milli), 8 GiB of memory would not: b goes to the other GPU
    b = st.on_pending(pending("c", "b", gpu_milli=300, gpu_memory_mib=8 * 1024))[0]
    assert isinstance(a, Decided) and isinstance(b, Decided) and a.msg.node != b.msg.node
    # a third 8 GiB share fits nowhere (each T4 has <= 7 GiB left): parked for GPU memory
    c = st.on_pending(pending("c", "c", gpu_milli=100, gpu_memory_mib=8 * 1024))[0]
    assert isinstance(c, Unschedulable) and c.msg.reason == "insufficient_gpu_memory"
    # a share without explicit memory holds its proportional part: 300 milli of 15 GiB = 4.5 GiB
    d = st.on_pending(pending("c", "d", gpu_milli=300))[0]
    assert isinstance(d, Decided) and d.msg.slices[0].memory_mib == 15360 * 300 // 1000
    st.ledger.check()


def test_a_node_the_binder_refused_is_avoided_on_the_next_attempt() -> None:
    from gpuaware.schemas.binder import PodBindFailed

    st = _state()
    first = st.on_pending(pending("c", "x", num_gpu=2))[0].msg
    st.apply_bind_failed(PodBindFailed(source="binder", emitted_at=0.0, cluster="c", pod_uid="x", pod_name="x",
                                       namespace="ns", node=first.node, decision_id=first.decision_id,
                                       reason="conflict", transient=True, failed_at=0.0))
    again = st.on_pending(pending("c", "x", num_gpu=2, attempt=1))[0].msg
    assert again.decision_id == "x/1" and again.node != first.node
