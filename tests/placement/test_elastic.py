"""Elastic jobs in the planner: a core placed as a gang, extra workers grown onto idle GPUs only, spares
taken back first (a shrink), and the lease / re-queue cap that protect stopped jobs."""

from __future__ import annotations

import dataclasses

from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.elastic import grow_order, spares
from gpuaware.placement.ledger import Phase, PodEntry
from gpuaware.placement.model import NodeSpec, PodRequest
from gpuaware.placement.planner import Decided, Parked, Planner, PlannerConfig
from gpuaware.placement.preempt import running_victims


def worker(job: str, k: int, *, lo: int = 1, hi: int = 4, queue: str = "a", priority: int = 0) -> PodRequest:
    return PodRequest(f"{job}-{k}", 1000, 1024, 1, 1000, queue=queue, priority=priority, gang_id=job,
                      gang_min_members=lo, gang_max_members=hi, checkpointable=True)


def whole(name: str, gpus: int, *, queue: str = "b", priority: int = 0) -> PodRequest:
    return PodRequest(name, 1000 * gpus, 1024 * gpus, gpus, 1000, queue=queue, priority=priority, checkpointable=True)


NOW = [1000.0]
"""the tests' world clock (each test's planner starts it again at 1,000 s)"""


def planner(gpus: int = 4, nodes: int = 1, order: str = "priority", **cfg) -> Planner:
    NOW[0] = 1000.0
    now = NOW
    sort = {"name": order, "args": {"min_runtime_s": 0.0}} if order == "fair-share" else {"name": order}
    p = Planner(PlannerConfig(policy_name="BestFit", policy_config={**REGISTRY.policy_config("BestFit"), "queue_sort": sort},
                              learn_typical=False, prior={(1000, 1, 1000, ""): 1.0}, **cfg), clock=lambda: now[0])
    for i in range(nodes):
        p.view.set_node(NodeSpec(f"n{i}", cpu_milli=64_000, memory_mib=256_000, num_gpu=gpus, gpu_model="A100"), None)
    return p


def bind_all(p: Planner, outcomes) -> list[Decided]:
    decided = [o for o in outcomes if isinstance(o, Decided)]
    for d in decided:
        p.ledger.bound(d.entry.uid, d.entry.attempt, d.node, d.gpus, now=NOW[0])
    return decided


def test_an_elastic_job_grows_onto_idle_gpus_when_nobody_else_waits() -> None:
    p = planner()
    placed = []
    for k in range(4):
        placed += bind_all(p, p.submit(f"e-{k}", 0, worker("e", k)))
    assert len(placed) == 4
    assert p.counters.elastic_grows == 3  # the first worker is the core; three more grew
    assert spares(p.ledger) == {"e-1", "e-2", "e-3"}


def test_a_grow_waits_while_another_pod_waits_and_comes_after_it() -> None:
    p = planner()
    bind_all(p, p.submit("e-0", 0, worker("e", 0)))
    bind_all(p, p.submit("big", 0, whole("big", 3)))
    assert isinstance(p.submit("wide", 0, whole("wide", 3))[0], Parked)  # 0 GPUs free: it waits
    grow = p.submit("e-1", 0, worker("e", 1))
    assert isinstance(grow[0], Parked) and grow[0].reason == "elastic_grow"
    # "big" ends: three GPUs free; the waiting pod gets them before the grow
    p.forget("big")
    p.ledger.release("big")
    out, _ = p.retry()
    decided = {o.entry.uid for o in out if isinstance(o, Decided)}
    assert decided == {"wide"}


def test_a_grow_takes_what_is_left_after_everyone_else_in_a_retry() -> None:
    p = planner()
    bind_all(p, p.submit("e-0", 0, worker("e", 0)))
    bind_all(p, p.submit("big", 0, whole("big", 3)))
    p.submit("small", 0, whole("small", 1))
    p.submit("e-1", 0, worker("e", 1))
    p.forget("big")
    p.ledger.release("big")
    out, more = p.retry()
    decided = [o.entry.uid for o in out if isinstance(o, Decided)]
    assert decided == ["small", "e-1"] and not more


def test_a_core_larger_than_one_is_placed_all_or_none() -> None:
    p = planner(gpus=2)
    assert isinstance(p.submit("g-0", 0, worker("g", 0, lo=3, hi=4))[0], Parked)
    assert isinstance(p.submit("g-1", 0, worker("g", 1, lo=3, hi=4))[0], Parked)
    out = p.submit("g-2", 0, worker("g", 2, lo=3, hi=4))  # three present, two GPUs: none placed
    assert not any(isinstance(o, Decided) for o in out)
    p.view.set_node(NodeSpec("n1", cpu_milli=64_000, memory_mib=256_000, num_gpu=2, gpu_model="A100"), None)
    out, _ = p.retry()
    assert sorted(o.entry.uid for o in out if isinstance(o, Decided)) == ["g-0", "g-1", "g-2"]


def test_preemption_shrinks_an_elastic_job_before_stopping_anyone() -> None:
    p = planner(gpus=4, nodes=2)
    for k in range(4):  # n0 (BestFit packs): the elastic job at full width
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k, priority=0)))
    bind_all(p, p.submit("low", 0, whole("low", 4, priority=0)))  # n1: a whole job of the same priority
    out = p.submit("hi", 0, whole("hi", 2, priority=10))
    d = out[0]
    assert isinstance(d, Decided)
    assert {v.uid for v in d.victims} <= {"e-1", "e-2", "e-3"} and len(d.victims) == 2
    assert d.preemption_reason == "shrink"
    assert p.counters.elastic_shrinks == 2


def test_the_newest_workers_are_the_spares() -> None:
    p = planner()
    for k in range(3):
        NOW[0] += 10
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k, lo=2)))
    assert spares(p.ledger) == {"e-2"}


def test_the_lease_and_the_requeue_cap_protect_whole_jobs_but_not_spares() -> None:
    p = planner(victim_min_run_s=600.0, victim_max_requeues=2)
    bind_all(p, p.submit("fresh", 0, whole("fresh", 1)))
    bind_all(p, p.submit("capped", 2, whole("capped", 1)))  # its third attempt: re-queued twice
    for k in range(2):
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k)))
    uids = {v.uid for v in running_victims(p.ledger, NOW[0], min_run_s=600.0, max_requeues=2)}
    assert uids == {"e-1"}  # the spare only: "fresh" inside its lease, "capped" at the cap, "e-0" inside its lease
    NOW[0] += 601
    uids = {v.uid for v in running_victims(p.ledger, NOW[0], min_run_s=600.0, max_requeues=2)}
    assert uids == {"fresh", "e-0", "e-1"}


def test_the_requeue_cap_counts_a_replacement_pods_job() -> None:
    """A controller's new pod for an evicted one starts at attempt 0; its job's preemptions still count."""
    p = planner(victim_max_requeues=2)
    replacement = dataclasses.replace(whole("again", 1), job_preemptions=2)
    bind_all(p, p.submit("again", 0, replacement))
    bind_all(p, p.submit("other", 0, whole("other", 1)))
    assert {v.uid for v in running_victims(p.ledger, NOW[0], max_requeues=2)} == {"other"}
    assert {v.uid for v in running_victims(p.ledger, NOW[0], max_requeues=3)} == {"again", "other"}


def _entry(uid: str, job: str, seq: int, queue: str = "a") -> PodEntry:
    return PodEntry(uid, 0, Phase.PARKED, worker(job, seq, queue=queue), seq=seq)


def test_grow_order_puts_tenants_below_their_share_first_then_the_largest_gain() -> None:
    grows = [_entry("x-1", "x", 1, "over"), _entry("y-1", "y", 2), _entry("z-1", "z", 3)]
    width = {"x": 1, "y": 4, "z": 1}
    got = grow_order(grows, width, below_share=lambda e: e.request is not None and e.request.queue != "over")
    assert [e.uid for e in got] == ["z-1", "y-1", "x-1"]  # narrowest first among those below share
    gain = {"y-1": 5.0, "z-1": 1.0, "x-1": 9.0}
    got = grow_order(grows, width, below_share=lambda e: True, gain=lambda uid, w: gain[uid])
    assert [e.uid for e in got] == ["x-1", "y-1", "z-1"]


def test_a_pod_of_priority_zero_takes_back_a_spare_but_stops_nobody() -> None:
    p = planner(gpus=4, nodes=1)
    for k in range(3):
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k)))
    bind_all(p, p.submit("low", 0, whole("low", 1)))
    d = p.submit("new", 0, whole("new", 2))[0]
    assert isinstance(d, Decided) and {v.uid for v in d.victims} == {"e-1", "e-2"}
    assert d.preemption_reason == "shrink"
    # with no spare left, a pod of priority 0 waits: it never stops the whole job or "low"
    bind_all(p, [d])
    p.ledger.release("e-1")
    p.ledger.release("e-2")
    assert isinstance(p.submit("other", 0, whole("other", 2))[0], Parked)


def test_a_grow_not_worth_its_restart_is_left_out() -> None:
    grows = [_entry("x-1", "x", 1), _entry("y-1", "y", 2)]
    got = grow_order(grows, {"x": 1, "y": 1}, below_share=lambda e: True,
                     gain=lambda uid, w: -1.0 if uid == "x-1" else 3.0)
    assert [e.uid for e in got] == ["y-1"]


def test_a_retry_with_only_grows_not_worth_it_says_nothing_is_left() -> None:
    p = planner()
    p.grow_gain = lambda uid, width: -1.0
    bind_all(p, p.submit("e-0", 0, worker("e", 0)))
    grow = p.submit("e-1", 0, worker("e", 1))
    assert isinstance(grow[0], Parked) and grow[0].reason == "elastic_grow"
    out, more = p.retry()
    assert out == [] and not more  # a caller looping while `more` would spin for ever otherwise


def test_a_grow_below_its_share_takes_a_spare_from_a_tenant_above_its_share() -> None:
    p = planner(order="fair-share")
    for k in range(4):
        bind_all(p, p.submit(f"eb-{k}", 0, worker("eb", k, queue="b")))
    NOW[0] += p.config.resize_hold_s  # b's grows are not fresh any more
    core = p.submit("ea-0", 0, worker("ea", 0, queue="a"))[0]
    assert isinstance(core, Decided) and core.preemption_reason == "shrink"  # a's core takes a spare
    bind_all(p, [core])
    p.ledger.release(core.victims[0].uid)
    before = spares(p.ledger)
    swap = p.submit("ea-1", 0, worker("ea", 1, queue="a"))[0]
    # a (1 running, 2 wanted) is owed 2 of 4 GPUs and b keeps its share of 2 without one spare: a swap
    assert isinstance(swap, Decided) and {v.uid for v in swap.victims} <= before
    assert all(v.uid.startswith("eb-") for v in swap.victims)
    bind_all(p, [swap])
    for v in swap.victims:
        p.ledger.release(v.uid)
    # a third worker of a: a (2 running, 3 wanted) is owed 2 of 4 (b wants 4): it waits, nothing swapped
    assert isinstance(p.submit("ea-2", 0, worker("ea", 2, queue="a"))[0], Parked)
    out, _ = p.retry()
    assert not any(isinstance(o, Decided) for o in out)


def test_a_grow_of_a_tenant_below_its_share_goes_before_a_pod_of_a_tenant_at_its_share() -> None:
    p = planner(order="fair-share")
    for k in range(3):
        bind_all(p, p.submit(f"b{k}", 0, whole(f"b{k}", 1)))
    bind_all(p, p.submit("ea-0", 0, worker("ea", 0, queue="a")))
    assert isinstance(p.submit("ea-1", 0, worker("ea", 1, queue="a"))[0], Parked)
    assert isinstance(p.submit("b3", 0, whole("b3", 1))[0], Parked)
    p.ledger.release("b2")  # b holds 2 of its share of 2, a 1 of 2: the idle GPU is a's
    decided = [o for o in p.retry()[0] if isinstance(o, Decided)]
    assert [o.entry.uid for o in decided] == ["ea-1"]


def test_a_spare_a_grow_just_gave_is_no_swaps_donor_until_the_resize_hold_passes() -> None:
    p = planner(order="fair-share", max_reclaims=0)  # only a swap could take b's spare
    for k in range(3):
        bind_all(p, p.submit(f"eb-{k}", 0, worker("eb", k, queue="b")))
    bind_all(p, p.submit("ea-0", 0, worker("ea", 0, queue="a")))  # the last idle GPU
    # a (1 running, 2 wanted) is owed 2 of 4; b holds 3, its spares grown a moment ago: a's grow waits
    assert isinstance(p.submit("ea-1", 0, worker("ea", 1, queue="a"))[0], Parked)
    NOW[0] += p.config.resize_hold_s / 2
    assert not any(isinstance(o, Decided) for o in p.retry()[0])
    NOW[0] += p.config.resize_hold_s / 2
    swapped = [o for o in p.retry()[0] if isinstance(o, Decided)]
    assert [o.entry.uid for o in swapped] == ["ea-1"] and swapped[0].victims[0].uid == "eb-2"


def test_a_job_shrunk_moments_ago_does_not_grow_back_until_the_resize_hold_passes() -> None:
    p = planner(gpus=4)
    for k in range(4):
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k)))
    hi = p.submit("hi", 0, whole("hi", 1, priority=10))[0]
    assert isinstance(hi, Decided) and [v.uid for v in hi.victims] == ["e-3"]
    bind_all(p, [hi])
    p.ledger.release("e-3")
    p.submit("e-3", 1, worker("e", 3))  # the shrunk worker waits again as a grow
    NOW[0] += 60.0
    p.ledger.release("hi")  # its GPU is idle again within the hold: e stays at 3
    assert not any(isinstance(o, Decided) for o in p.retry()[0])
    NOW[0] += p.config.resize_hold_s
    grown = [o for o in p.retry()[0] if isinstance(o, Decided)]
    assert [o.entry.uid for o in grown] == ["e-3"]


def test_the_requeue_cap_counts_an_elastic_jobs_stops_whichever_worker_was_last() -> None:
    p = planner(gpus=1, victim_max_requeues=2)
    for k in range(3):  # each stop finds another worker of the job running (attempt 0 each time)
        bind_all(p, p.submit(f"e-{k}", 0, worker("e", k, hi=3)))
        out = p.submit(f"hi{k}", 0, whole(f"hi{k}", 1, priority=10))[0]
        if k < 2:
            assert isinstance(out, Decided) and [v.uid for v in out.victims] == [f"e-{k}"]
            p.ledger.release(f"e-{k}")
            p.ledger.release(f"hi{k}")
        else:  # stopped twice: the job is stopped no more, though this worker was never re-queued
            assert isinstance(out, Parked)
    assert p.stops == {"e": 2}


def test_a_shrink_takes_the_spare_of_the_narrowest_job() -> None:
    p = planner(gpus=4, nodes=2)
    for k in range(4):  # n0: one job at width 4
        bind_all(p, p.submit(f"w-{k}", 0, worker("w", k)))
    for k in range(2):  # n1: two jobs at width 2
        bind_all(p, p.submit(f"x-{k}", 0, worker("x", k)))
        bind_all(p, p.submit(f"y-{k}", 0, worker("y", k)))
    d = p.submit("new", 0, whole("new", 1))[0]
    # every spare is free to take; the narrow jobs' restart two workers, the wide one's four
    assert isinstance(d, Decided) and [v.uid for v in d.victims] in (["x-1"], ["y-1"])
