"""PlacementState without a server: the decisions, verdicts and retries the handlers publish."""

from __future__ import annotations

import logging
import time

import msgspec
import pytest
from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES
from gpuaware.schemas.binder import PodBound, PodFinished, PodOutcome
from gpuaware.schemas.health import GpuScored, GpuStateChanged, HealthState
from gpuaware.schemas.telemetry import GpuRolledUp, GpuRollup, RollupWindow, Stats
from gpuaware.services.placement.permit import AdmittedAndStored
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


def test_other_clusters_and_an_empty_view_are_not_decided(caplog: pytest.LogCaptureFixture) -> None:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="DotProd",
                        policy_config=POLICIES["DotProd"])
    # a pod for a cluster this instance does not serve was acked with no word: counted, and
    # said once per cluster in the log
    with caplog.at_level(logging.WARNING, logger="gpuaware.services.placement.state"):
        assert st.on_pending(pending("other", "z")) == []
        assert st.on_pending(pending("other", "y")) == []
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "is for cluster 'other'; this placement serves 'c'" in said[0]
    assert st.counters.other_cluster == 2 and st.other_clusters == {"other"}
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


# -- preemption ------------------------------------------------------------------------------------


def _bound(d) -> PodBound:
    return PodBound(source="binder", emitted_at=0.0, cluster="c", pod_uid=d.pod_uid, pod_name=d.pod_name,
                    namespace="ns", node=d.node, slices=d.slices, bound_at=0.0, decision_id=d.decision_id)


def _full_of_low_priority(st: PlacementState) -> list:
    """Both 2-GPU nodes taken by 2-GPU pods of priority 0; only `low1` can checkpoint."""
    events = []
    for i in range(2):
        d = st.on_pending(pending("c", f"low{i}", num_gpu=2, checkpointable=i == 1))[0].msg
        st.apply_bound(_bound(d))
        events += [d, _bound(d)]
    return events


def test_a_more_important_pod_preempts_and_a_standby_agrees() -> None:
    from gpuaware.schemas.binder import PodPreempted

    st = _state()
    history = _full_of_low_priority(st)
    hi = st.on_pending(pending("c", "hi", num_gpu=2, priority=1000))[0]
    assert isinstance(hi, Decided)
    plan = hi.msg.preemptions
    # equal priorities: the checkpointable victim loses no work, so it is the one (and only one)
    assert [(v.pod_uid, v.checkpoint_first, v.reason) for v in plan] == [("low1", True, "priority")]
    assert hi.msg.node == next(m for m in history if m.pod_uid == "low1").node and hi.msg.priority == 1000
    st.ledger.check()  # the victim's GPUs are the preemptor's now, in the view
    assert st.counters.preemptions_planned == 1 and st.counters.victims_planned == 1

    standby = _state()
    for m in history:
        (standby.apply_decided if hasattr(m, "decided_at") else standby.apply_bound)(m)
    standby.apply_decided(hi.msg)
    assert standby.ensure_cluster()
    standby.ledger.check()
    assert standby.ledger.cluster.allocations == st.ledger.cluster.allocations

    gone = PodPreempted(source="binder", emitted_at=0.0, cluster="c", pod_uid="low1", pod_name="pod-low1",
                        namespace="ns", node=hi.msg.node, reason="priority", preempted_at=0.0,
                        decision_id=history[2].decision_id, preemptor_pod_uid="hi", checkpointed=True,
                        requeued=True)
    for s in (st, standby):
        s.apply_preempted(gone)
        s.apply_bound(_bound(hi.msg))
        s.ledger.check()
        assert "low1" not in s.ledger.pods and s.ledger.pods["hi"].phase == "bound"
    assert standby.ledger.cluster.allocations == st.ledger.cluster.allocations


def test_a_plan_that_falls_through_gives_the_victims_their_gpus_back() -> None:
    from gpuaware.schemas.binder import PodBindFailed

    st = _state()
    _full_of_low_priority(st)
    hi = st.on_pending(pending("c", "hi", num_gpu=2, priority=1000))[0].msg
    victim = hi.preemptions[0].pod_uid
    assert victim not in st.ledger.cluster.allocations
    st.apply_bind_failed(PodBindFailed(source="binder", emitted_at=0.0, cluster="c", pod_uid="hi", pod_name="hi",
                                       namespace="ns", node=hi.node, decision_id=hi.decision_id,
                                       reason="victim_not_evicted", transient=False, failed_at=0.0))
    st.ledger.check()
    assert victim in st.ledger.cluster.allocations and "hi" not in st.ledger.cluster.allocations


def test_no_preemption_when_disabled_not_more_important_or_cooling_down() -> None:
    t = [1000.0]
    off = _state(preemption=False)
    _full_of_low_priority(off)
    assert isinstance(off.on_pending(pending("c", "hi", num_gpu=2, priority=1000))[0], Unschedulable)

    same = _state()
    _full_of_low_priority(same)
    assert isinstance(same.on_pending(pending("c", "peer", num_gpu=2, priority=0))[0], Unschedulable)

    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"], clock=lambda: t[0], preemption_cooldown_s=30.0,
                        max_victims=1)
    st.apply_inventory(inventory("c", "a", gpus=4))
    _full_of_low_priority(st)  # two 2-GPU pods on the one 4-GPU node
    # 4 GPUs asked: two victims needed, one allowed -> no plan; the pod is parked
    assert isinstance(st.on_pending(pending("c", "big", num_gpu=4, priority=1000))[0], Unschedulable)
    st.max_victims = 2
    t[0] += 10.0
    assert st.retry() == ([], False)  # within the cooldown: not planned again
    t[0] += 30.0
    out, _ = st.retry()
    assert isinstance(out[0], Decided) and sorted(v.pod_uid for v in out[0].msg.preemptions) == ["low0", "low1"]
    st.ledger.check()


# -- signals: health scores, thermal/power rollups, forecasts ----------------------------------------


def _gpuaware_state() -> PlacementState:
    from gpuaware.placement import DEFAULT_PROFILE

    st = PlacementState(cluster_name="c", source="placement/test", policy_name=DEFAULT_PROFILE,
                        policy_config=POLICIES[DEFAULT_PROFILE])
    for n in ("a", "b"):
        inv = inventory("c", n, gpus=2)
        st.apply_inventory(msgspec.structs.replace(
            inv, gpus=tuple(msgspec.structs.replace(g, power_limit_w=400.0) for g in inv.gpus)))
    assert st.ensure_cluster()
    return st


def _rollup(node: str, temp: float, power: float) -> GpuRolledUp:
    return GpuRolledUp(source="collector", emitted_at=0.0, cluster="c", node=node, window=RollupWindow.MINUTE,
                       window_start=0.0, gpus=tuple(
                           GpuRollup(gpu_uuid=f"GPU-{node}-{i}", gpu_index=i, samples=60,
                                     temperature_c=Stats(mean=temp - 2, max=temp + 1, p95=temp),
                                     power_w=Stats(mean=power - 10, max=power + 5, p95=power)) for i in range(2)))


def _where(st: PlacementState, uid: str) -> str:
    out = st.on_pending(pending("c", uid, num_gpu=1))[0]
    assert isinstance(out, Decided)
    return out.msg.node


def test_no_signals_pack_as_usual_a_hot_power_capped_node_is_avoided() -> None:
    calm = _gpuaware_state()
    first = _where(calm, "x")
    hot = _gpuaware_state()
    # the node packing would pick runs at 88 degC p95 and 396 W of 400 W: thermal/power score 0 there
    assert hot.apply_rollup(_rollup(first, 88.0, 396.0))
    assert not hot.apply_rollup(_rollup(first, 88.4, 396.0))  # within the quantum: nothing changes
    assert _where(hot, "x") != first
    # an hour window never steers placement
    other = _gpuaware_state()
    hour = msgspec.structs.replace(_rollup(first, 88.0, 396.0), window=RollupWindow.HOUR)
    assert not other.apply_rollup(hour) and _where(other, "x") == first


def test_a_low_health_score_steers_pods_away() -> None:
    calm = _gpuaware_state()
    first = _where(calm, "x")
    st = _gpuaware_state()
    for i in range(2):
        assert st.apply_scored(GpuScored(source="health", emitted_at=0.0, cluster="c", node=first,
                                         gpu_uuid=f"GPU-{first}-{i}", gpu_index=i, score=20.0,
                                         state=HealthState.HEALTHY, scored_at=0.0))
    assert _where(st, "x") != first
    st.ledger.set_nodes(st.ledger.nodes)  # a rebuilt view keeps the scores
    assert _where(st, "y") != first


def test_a_forecast_of_a_busy_gpu_steers_sharing_pods_away() -> None:
    from gpuaware.schemas.forecast import GpuForecast, GpuUtilPredicted

    calm = _gpuaware_state()
    first = calm.on_pending(pending("c", "s", num_gpu=1, gpu_milli=500))[0].msg.node
    st = _gpuaware_state()
    fc = GpuUtilPredicted(source="forecasting", emitted_at=0.0, cluster="c", node=first, model="lstm",
                          model_version="1", issued_at=0.0, start=0.0, step_s=60.0, horizon_steps=2,
                          quantiles=(0.5, 0.9), gpus=tuple(
                              GpuForecast(gpu_uuid=f"GPU-{first}-{i}", values=((60.0, 70.0), (85.0, 95.0)))
                              for i in range(2)))
    assert st.apply_forecast(fc)  # p90 peak 95 % + a 0.5 share: over the top on both GPUs of that node
    assert st.on_pending(pending("c", "s", num_gpu=1, gpu_milli=500))[0].msg.node != first


def test_a_standby_reading_the_bind_failure_before_the_plan_keeps_the_victims() -> None:
    from gpuaware.schemas.binder import PodBindFailed

    st = _state()
    history = _full_of_low_priority(st)
    hi = st.on_pending(pending("c", "hi", num_gpu=2, priority=1000))[0].msg
    standby = _state()
    for m in history:
        (standby.apply_decided if hasattr(m, "decided_at") else standby.apply_bound)(m)
    assert standby.ensure_cluster()
    # the streams are followed separately: the binder's refusal may be read before the decision
    standby.apply_bind_failed(PodBindFailed(source="binder", emitted_at=0.0, cluster="c", pod_uid="hi",
                                            pod_name="hi", namespace="ns", node=hi.node,
                                            decision_id=hi.decision_id, reason="victim_not_evicted",
                                            transient=False, failed_at=0.0))
    standby.apply_decided(hi)
    standby.ledger.check()
    assert {"low0", "low1"} <= set(standby.ledger.cluster.allocations) and not standby.ledger.evicting()


def test_a_requeued_victim_is_kept_when_its_preempted_event_comes_after_its_next_attempt() -> None:
    """PodPreempted names the preemptor's decision (the contract): its attempt number says nothing
    about the victim's, and the victim's next attempt may be pending here before the event arrives."""
    from gpuaware.schemas.binder import PodPreempted

    st = _state()
    _full_of_low_priority(st)
    hi = st.on_pending(pending("c", "hi", num_gpu=2, priority=1000, attempt=3))[0]
    assert isinstance(hi, Decided) and [v.pod_uid for v in hi.msg.preemptions] == ["low1"]
    victim_node = st.ledger.pods["low1"].node
    again = st.on_pending(pending("c", "low1", num_gpu=2, checkpointable=True, attempt=1))  # re-queued, first
    assert [type(o) for o in again] == [Unschedulable] and again[0].msg.attempt == 1
    gone = PodPreempted(source="binder", emitted_at=0.0, cluster="c", pod_uid="low1", pod_name="low1",
                        namespace="ns", node=victim_node, reason="priority", preempted_at=0.0,
                        decision_id=hi.msg.decision_id, preemptor_pod_uid="hi", checkpointed=True, requeued=True)
    assert not st.apply_preempted(gone)  # nothing of attempt 1 is released or closed
    entry = st.ledger.pods["low1"]
    assert entry.attempt == 1 and entry.phase == "parked" and not st.ledger.is_stale("low1", 1)
    st.apply_finished(_finished("low0"))
    got, _ = st.retry()
    assert [o.msg.pod_uid for o in got if isinstance(o, Decided)] == ["low1"]  # placed when room came back
    st.ledger.check()


def test_a_decision_held_at_permit_is_recorded_when_stored_and_discarded_when_not() -> None:
    st = _state(permits=(AdmittedAndStored(),))
    first = st.on_pending(pending("c", "x", num_gpu=2))[0]
    second = st.on_pending(pending("c", "y", num_gpu=2))[0]
    assert isinstance(first, Decided) and isinstance(second, Decided) and first.msg.node != second.msg.node
    # held: the cluster holds both (the second did not take the first's GPUs), the ledger neither
    assert {"x", "y"} <= set(st.ledger.cluster.allocations)
    assert st.ledger.pods["x"].phase.value == "queued" and st.on_pending(pending("c", "x", num_gpu=2)) == []
    # the stream's echo of x proves it stored: recorded, and a second echo is known
    assert st.echoed(first.msg.decision_id) and st.ledger.pods["x"].phase.value == "decided"
    assert st.echoed(first.msg.decision_id)
    # stepping down discards y: its GPUs are free, the pod is queued, and its echo (if it was stored
    # after all) is news to be applied
    assert st.release_held() == 1
    assert "y" not in st.ledger.cluster.allocations and st.ledger.pods["y"].phase.value == "queued"
    assert not st.echoed(second.msg.decision_id)
    st.apply_decided(second.msg)
    assert st.ledger.pods["y"].phase.value == "decided"
    st.ledger.check()


def test_a_pod_that_leaves_while_its_decision_is_held_frees_its_gpus() -> None:
    st = _state(permits=(AdmittedAndStored(),))
    (d,) = st.on_pending(pending("c", "x", num_gpu=2))
    assert isinstance(d, Decided) and "x" in st.ledger.cluster.allocations
    # the binder reports on the pod before this instance saw the stream's ack: the decision reached
    # the world, so it is recorded first and the departure then frees its GPUs
    assert st.apply_finished(_finished("x"))
    assert "x" not in st.ledger.cluster.allocations and "x" not in st.ledger.pods
    st.allow("x")  # the late ack changes nothing
    assert "x" not in st.ledger.cluster.allocations
    st.ledger.check()
