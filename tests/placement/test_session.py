"""The scheduling session: statements commit or discard as a whole, the extension points run in
kube-scheduler's order, and GPU memory is part of what fits."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from placement_helpers import node, share, whole

from gpuaware.placement import Cluster, Code, CycleState, Decision, PodRequest, Snapshot, Status, policy
from gpuaware.placement.actions import reclaim
from gpuaware.placement.extensions import WAIT, DefaultPreemption, PermitVerdict
from gpuaware.placement.preempt import Victim
from gpuaware.placement.session import Framework, Placed, Session, Statement, Waiting


def _state(c: Cluster) -> tuple:
    return (c.cpu_free.copy(), c.mem_free.copy(), c.gpu_free.copy(), c.gpu_mem_free.copy(),
            c.tag_counts.copy(), dict(c.allocations), c.used_gpu_milli)


def _same(a: tuple, b: tuple) -> bool:
    return all((x == y).all() if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b, strict=True))


def _session(c: Cluster, name: str = "BestFit", **kw) -> Session:
    plugins = {k: kw.pop(k) for k in ("permits", "post_filters") if k in kw}
    return Session(c, Framework.of(policy(name), **plugins), **kw)


# -- statements -------------------------------------------------------------------------------------


def test_a_discarded_statement_leaves_the_cluster_exactly_as_it_was() -> None:
    c = Cluster([node("a", 2), node("b", 2)])
    held = c.reserve(share("held", 300), 0, (0,))
    before = _state(c)
    stmt = Statement(c)
    stmt.reserve(whole("w", 1), 1, (1,))
    stmt.evict("held")  # released, to be restored exactly
    stmt.reserve(share("s", 900), 0, (0,))  # takes what `held` gave back
    assert c.allocations["s"].gpus == (0,) and "held" not in c.allocations
    stmt.discard()
    assert _same(_state(c), before) and c.allocations["held"] == held
    c.check()


def test_committing_keeps_and_discarding_after_a_commit_changes_nothing() -> None:
    c = Cluster([node("a", 2)])
    stmt = Statement(c)
    stmt.reserve(whole("w", 2), 0, (0, 1))
    stmt.commit()
    stmt.discard()
    assert c.used_gpu_milli == 2000 and len(stmt) == 0


# -- the extension points -----------------------------------------------------------------------------


class DenyBig:
    """Permit: refuse pods asking more than one GPU (a quota stand-in)."""

    name: ClassVar[str] = "deny-big"

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        if pod.num_gpu > 1:
            return PermitVerdict(False, "over quota", retry_after_s=5.0)
        return PermitVerdict(True)


class RefuseNamed:
    """Permit: refuse the pod named 'refused' only."""

    name: ClassVar[str] = "refuse-named"

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        return PermitVerdict(pod.name != "refused", "refused by name")


def test_a_denied_permit_leaves_nothing_reserved_and_says_why() -> None:
    c = Cluster([node("a", 4)])
    s = _session(c, permits=[DenyBig()])
    got = s.run([whole("small", 1), whole("big", 2)])
    assert isinstance(got[0], Placed) and isinstance(got[1], Waiting)
    assert got[1].status == Status(Code.DENIED, "over quota", "deny-big") and got[1].retry_after_s == 5.0
    # the big pod was reserved before the permit ran; the denial undid it
    assert set(c.allocations) == {"small"} and c.used_gpu_milli == 1000 and s.stats.denied == 1
    c.check()


class Ask:
    """Permit: the answer comes from outside the session (quota over the bus)."""

    name: ClassVar[str] = "ask"

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        return WAIT


def test_a_waiting_permit_holds_the_pod_staged_until_it_is_allowed_or_rejected() -> None:
    c = Cluster([node("a", 2)])
    s = _session(c, permits=[Ask()])
    first, second = s.run([whole("first", 1), whole("second", 1)])
    assert isinstance(first, Placed) and isinstance(second, Placed)
    assert first.permit is not None and first.permit.waiting_on == ("ask",)
    assert second.decision.gpus != first.decision.gpus  # the held reservation is seen by the next pod
    assert second.permit is not None and second.permit.reject() and not second.permit.open
    assert set(c.allocations) == {"first"}
    assert first.permit.allow() and set(c.allocations) == {"first"}
    assert not first.permit.reject()  # committed: nothing left to undo
    assert set(c.allocations) == {"first"}
    c.check()


def test_a_waiting_gang_commits_only_once_every_member_is_allowed_and_is_rejected_whole() -> None:
    c = Cluster([node("a", 4)])
    s = _session(c, permits=[Ask()])
    gang = [PodRequest(f"m{i}", 1000, 0, 1, 1000, gang_id="g", gang_min_members=2) for i in range(2)]
    m0, m1 = s.run([gang])
    assert isinstance(m0, Placed) and isinstance(m1, Placed)
    permit = m0.permit
    assert permit is not None and permit is m1.permit and permit.pods == ("m0", "m1")
    assert not permit.allow("m0") and permit.open  # one member allowed: still open
    assert permit.reject() and not c.allocations  # a refusal takes back every member
    c.check()


def test_a_permit_refusal_and_a_failing_gang_member_undo_every_reservation() -> None:
    c = Cluster([node("a", 2), node("b", 2)])
    s = _session(c, permits=[RefuseNamed()])
    refused = s.run([whole("refused", 1)])
    assert isinstance(refused[0], Waiting) and refused[0].status.plugin == "refuse-named" and not c.allocations
    # three 2-GPU members on 4 GPUs: the first two stage, the third finds nothing; all are undone
    gang = [PodRequest(f"m{i}", 1000, 0, 2, 1000, gang_id="g", gang_min_members=3) for i in range(3)]
    out = s.run([gang])
    assert [type(r) for r in out] == [Waiting] * 3
    assert not c.allocations and c.used_gpu_milli == 0
    # the member that found no node says so; the other two wait for it
    assert sorted(r.status.plugin for r in out) == ["", "gang", "gang"]
    assert all(r.status.code == Code.UNSCHEDULABLE for r in out)
    c.check()


def test_preempt_runs_after_allocate_and_stages_the_plans_evictions() -> None:
    c = Cluster([node("a", 2)])
    low = [PodRequest(f"low{i}", 1000, 1024, 1, 1000, priority=1) for i in range(2)]
    for i, p in enumerate(low):
        c.reserve(p, 0, (i,))

    def running() -> list[Victim]:
        return [Victim(a.pod, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, 1, gpu_mem=a.gpu_mem)
                for a in c.allocations.values()]

    s = _session(c, post_filters=[DefaultPreemption(max_victims=4)], running=running)
    hi = PodRequest("hi", 1000, 1024, 1, 1000, priority=10)
    peer = PodRequest("peer", 1000, 1024, 1, 1000, priority=1)  # same priority: may not preempt
    got_hi, got_peer = s.run([hi, peer])
    assert isinstance(got_hi, Placed) and len(got_hi.victims) == 1 and got_hi.plan is not None
    victim = got_hi.victims[0].uid
    assert victim not in c.allocations and c.allocations["hi"].gpus == got_hi.decision.gpus
    assert isinstance(got_peer, Waiting) and got_peer.status.code == Code.UNSCHEDULABLE
    # a second high-priority pod in the same session does not plan the same victim again
    again = s.run([PodRequest("hi2", 1000, 1024, 1, 1000, priority=10)])[0]
    assert isinstance(again, Placed) and again.victims[0].uid != victim
    c.check()


def test_without_the_preempt_action_nothing_is_evicted() -> None:
    c = Cluster([node("a", 1)])
    c.reserve(PodRequest("low", 0, 0, 1, 1000, priority=1), 0, (0,))
    s = _session(c, actions=("allocate",), post_filters=[DefaultPreemption()],
                 running=lambda: [Victim("low", 0, (0,), 1000, 0, 0, 1)])
    assert isinstance(s.run([PodRequest("hi", 0, 0, 1, 1000, priority=9)])[0], Waiting)
    assert "low" in c.allocations


def test_unknown_actions_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: allocate, preempt"):
        _session(Cluster([node("a")]), actions=("allocate", "backfil"))


def test_a_shape_that_found_no_node_is_not_tried_again_and_limit_stops_allocation() -> None:
    c = Cluster([node("a", 2)])
    s = _session(c)
    pods = [whole(f"w{i}", 2) for i in range(4)]
    out = s.run(pods)
    # w0 takes both GPUs; w1 finds nothing; w2, w3 share w1's shape: skipped with its status
    assert [type(r) for r in out] == [Placed, Waiting, Waiting, Waiting]
    assert s.stats.shapes_skipped == 2 and out[2].status == out[1].status
    limited = _session(Cluster([node("a", 4)])).run([whole(f"x{i}") for i in range(4)], limit=2)
    assert [r.pod.name for r in limited] == ["x0", "x1"]  # x2, x3 not tried


# -- GPU memory ------------------------------------------------------------------------------------------


def test_gpu_memory_held_beyond_the_compute_share_keeps_sharing_pods_off_that_gpu() -> None:
    c = Cluster([node("a", 2, model="T4")])
    total = int(c.gpu_mem_total[0, 0])
    assert total > 0
    # GPU 0: 250 milli of compute but 90 % of the memory; GPU 1 empty
    c.reserve(PodRequest("heavy", 0, 0, 1, 250, gpu_memory_mib=total * 9 // 10), 0, (0,))
    s = _session(c, name="BestFit")  # BestFit's GPU choice is the tightest compute fit: GPU 0 ...
    got = s.run([PodRequest("p", 0, 0, 1, 500, gpu_memory_mib=total // 5)])[0]
    # ... but 20 % of the memory does not fit next to 90 %: GPU 1
    assert isinstance(got, Placed) and got.decision.gpus == (1,)
    # a pod asking memory in proportion to its compute (500 milli -> half the memory) fits GPU 1 only too
    prop = s.run([PodRequest("q", 0, 0, 1, 500)])[0]
    assert isinstance(prop, Placed) and prop.decision.gpus == (1,)
    # now no GPU has half its memory free: GpuFit refuses, the reservation would not have held either
    again = s.run([PodRequest("r", 0, 0, 1, 200, gpu_memory_mib=total // 2)])[0]
    assert isinstance(again, Waiting) and again.status.code == Code.UNSCHEDULABLE
    c.check()


def test_a_preemption_plan_counts_the_gpu_memory_its_victims_give_back() -> None:
    c = Cluster([node("a", 1, model="T4")])
    total = int(c.gpu_mem_total[0, 0])
    a = c.reserve(PodRequest("hog", 0, 0, 1, 100, gpu_memory_mib=total - 100, priority=1), 0, (0,))
    running = [Victim("hog", 0, (0,), a.gpu_milli, 0, 0, 1, gpu_mem=a.gpu_mem)]
    s = _session(c, post_filters=[DefaultPreemption()], running=lambda: running)
    # compute is free (900 milli) but memory is not: only evicting the hog makes room
    got = s.run([PodRequest("hi", 0, 0, 1, 300, gpu_memory_mib=total // 2, priority=5)])[0]
    assert isinstance(got, Placed) and [v.uid for v in got.victims] == ["hog"]
    c.check()


def test_a_plugin_refusing_one_pod_does_not_skip_the_next_pod_of_its_shape() -> None:
    c = Cluster([node("a", 2)])
    out = _session(c, permits=[RefuseNamed()]).run([whole("refused", 1), whole("fine", 1)])
    assert isinstance(out[0], Waiting) and isinstance(out[1], Placed)


# -- quota's reclaim plans ---------------------------------------------------------------------------


def _reclaim_world() -> tuple[Cluster, Session]:
    """Two nodes of 2 GPUs, full: b1/b2 on a, b3 (checkpointable) and g (a gang member) on b;
    every running pod has a higher priority than the owner's pod that reclaims."""
    c = Cluster([node("a", 2), node("b", 2)])
    pods = {"b1": (0, 0), "b2": (0, 1), "b3": (1, 0), "g": (1, 1)}
    for uid, (n, g) in pods.items():
        c.reserve(PodRequest(uid, 1000, 1024, 1, 1000, priority=5), n, (g,))

    def running() -> list[Victim]:
        return [Victim(a.pod, a.node, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib, 5,
                       checkpointable=a.pod == "b3", running_s=100.0, gang=a.pod == "g", gpu_mem=a.gpu_mem)
                for a in c.allocations.values()]

    return c, _session(c, post_filters=[DefaultPreemption()], running=running)


@pytest.mark.parametrize(("gpus", "named", "expected"), [
    (1, ["b2"], {"b2"}),                 # only a named pod goes, whatever its priority
    (1, ["b1", "b3"], {"b3"}),           # the cheapest of the named: checkpointable loses no work
    (2, ["b1", "b2", "b3"], {"b1", "b2"}),  # both on one node: b3 alone cannot make room for 2 GPUs
    (2, ["b3", "g"], None),              # a gang member is never evicted, so b3 alone is too little
    (1, ["g"], None),
    (1, ["ghost"], None),                # quota named a pod placement does not see running
    (2, ["b1", "b3"], None),             # named victims on different nodes: no one node gets room
])
def test_a_reclaim_evicts_only_pods_quota_named_and_the_fewest_on_one_node(gpus, named, expected) -> None:
    c, s = _reclaim_world()
    before = _state(c)
    owner = PodRequest("owner", 1000, 1024, gpus, 1000, priority=0)
    got = reclaim(s, owner, named)
    if expected is None:
        assert got is None and _same(_state(c), before)  # nothing staged, nothing evicted
        return
    assert isinstance(got, Placed) and {v.uid for v in got.victims} == expected
    assert "owner" in c.allocations and not expected & set(c.allocations)
    c.check()


def test_a_pod_evicted_by_one_reclaim_is_not_counted_again_by_the_next() -> None:
    c, s = _reclaim_world()
    first = reclaim(s, PodRequest("o1", 1000, 1024, 1, 1000), ["b3"])
    assert isinstance(first, Placed) and [v.uid for v in first.victims] == ["b3"]
    assert reclaim(s, PodRequest("o2", 1000, 1024, 1, 1000), ["b3"]) is None  # b3's GPU is o1's now
    second = reclaim(s, PodRequest("o2", 1000, 1024, 1, 1000), ["b3", "b1"])
    assert isinstance(second, Placed) and [v.uid for v in second.victims] == ["b1"]
    assert c.allocations["o1"].gpus != c.allocations["o2"].gpus or c.allocations["o1"].node != c.allocations["o2"].node
    c.check()
