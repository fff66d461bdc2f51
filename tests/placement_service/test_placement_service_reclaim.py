"""PlacementState executing quota's reclaim plans, without a server: the decision that carries the
victims as planned preemptions, how a standby replays it, and what is never done twice."""

from __future__ import annotations

import time

from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES
from gpuaware.schemas.binder import PodBound, PodFinished, PodOutcome, PodPreempted
from gpuaware.services.placement.permit import AdmittedAndStored
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable


def _state(**held: object) -> PlacementState:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"], preemption_cooldown_s=0.0, **held)
    st.apply_inventory(inventory("c", "a", gpus=2))
    st.apply_inventory(inventory("c", "b", gpus=2))
    return st


def _bound(st: PlacementState, d: Decided) -> None:
    m = d.msg
    st.apply_bound(PodBound(source="binder", emitted_at=time.time(), cluster="c", pod_uid=m.pod_uid,
                            pod_name=m.pod_name, namespace=m.namespace, node=m.node, slices=m.slices,
                            bound_at=time.time(), decision_id=m.decision_id))


def _full(**held_at_permit: object) -> tuple[PlacementState, dict[str, Decided]]:
    """b1..b4 (one GPU each, priority 5, b3 checkpointable) fill both nodes."""
    st = _state(**held_at_permit)
    held = {}
    for uid in ("b1", "b2", "b3", "b4"):
        (d,) = st.on_pending(pending("c", uid, num_gpu=1, priority=5, checkpointable=uid == "b3"))
        assert isinstance(d, Decided)
        st.allow(uid)
        _bound(st, d)
        held[uid] = d
    return st, held


def test_a_reclaim_decision_carries_quotas_victims_checkpoint_first() -> None:
    st, held = _full()
    (parked,) = st.on_pending(pending("c", "owner", num_gpu=1, priority=0))
    assert isinstance(parked, Unschedulable) and parked.msg.reason == "insufficient_gpu"
    d = st.reclaim("owner", ["b3", "b4"])
    assert d is not None and [(p.pod_uid, p.reason, p.checkpoint_first) for p in d.msg.preemptions] == [
        ("b3", "reclaim", True)]
    assert d.msg.node == held["b3"].msg.node and d.msg.slices == held["b3"].msg.slices
    assert st.ledger.pods["b3"].evicting == d.msg.decision_id
    # asked again (a second answer from quota, a retry): the pod is decided, nothing new happens
    assert st.reclaim("owner", ["b3", "b4"]) is None
    st.ledger.check()
    # a standby replaying the decision evicts the same victim and reserves the same GPUs
    standby, _ = _full()
    standby.apply_decided(d.msg)
    assert standby.ledger.pods["b3"].evicting == d.msg.decision_id
    assert standby.ledger.pods["owner"].gpus == st.ledger.pods["owner"].gpus
    # the binder preempts the victim and binds the owner: the view agrees
    ev = PodPreempted(source="binder", emitted_at=time.time(), cluster="c", pod_uid="b3", pod_name="b3",
                      namespace="ns", node=d.msg.node, reason="reclaim", preempted_at=time.time(),
                      decision_id=d.msg.decision_id)
    for s in (st, standby):
        s.apply_preempted(ev)
        _bound(s, d)
        assert s.ledger.pods["owner"].phase.value == "bound" and "b3" not in s.ledger.cluster.allocations
        s.ledger.check()


def test_a_reclaim_that_cannot_make_room_leaves_the_pod_parked_and_nothing_evicted() -> None:
    st, _ = _full()
    (parked,) = st.on_pending(pending("c", "owner", num_gpu=2))
    assert isinstance(parked, Unschedulable)
    node_of = {u: st.ledger.pods[u].node for u in ("b1", "b2", "b3", "b4")}
    apart = next(u for u in ("b2", "b3", "b4") if node_of[u] != node_of["b1"])
    assert st.reclaim("owner", ["b1", apart]) is None  # one GPU freed on each node: 2 fit on neither
    assert not any(st.ledger.pods[u].evicting for u in node_of)
    assert st.ledger.pods["owner"].phase.value == "parked"
    together = next(u for u in ("b2", "b3", "b4") if node_of[u] == node_of["b1"])
    d = st.reclaim("owner", ["b1", apart, together])
    assert d is not None and {p.pod_uid for p in d.msg.preemptions} == {"b1", together}
    st.ledger.check()


def test_a_decision_admitted_with_a_plan_gets_the_plans_victims_once() -> None:
    st, _ = _full(permits=(AdmittedAndStored(),))
    st.apply_finished(PodFinished(source="binder", emitted_at=time.time(), cluster="c", pod_uid="b1", pod_name="b1",
                                  namespace="ns", outcome=PodOutcome.SUCCEEDED, finished_at=time.time()))
    (d,) = st.on_pending(pending("c", "owner", num_gpu=1))
    assert isinstance(d, Decided) and not d.msg.preemptions
    msg = st.reclaim_for(d.msg, ["b2", "ghost"])
    assert [(p.pod_uid, p.reason) for p in msg.preemptions] == [("b2", "reclaim")]
    assert st.reclaim_for(msg, ["b2"]) is msg  # idempotent
    assert "b2" not in st.ledger.cluster.allocations  # evicted in the decision's open statement
    # the decision is not published after all: the victim holds again, nothing was recorded
    assert st.reject("owner") == []
    assert not st.ledger.pods["b2"].evicting and "b2" in st.ledger.cluster.allocations
    assert st.ledger.pods["owner"].phase.value == "queued" and "owner" not in st.ledger.cluster.allocations
    st.ledger.check()
    # decided again and stored this time: the ledger records the decision and its victim
    (again,) = st.on_pending(pending("c", "owner", num_gpu=1))
    msg = st.reclaim_for(again.msg, ["b2"])
    st.allow("owner")
    assert st.ledger.pods["b2"].evicting == again.msg.decision_id
    assert st.ledger.pods["owner"].phase.value == "decided"
    st.ledger.check()
