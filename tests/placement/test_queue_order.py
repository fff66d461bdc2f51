"""The fair-share queue order: who gets freed capacity first, and what a starved tenant may reclaim."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuaware.placement.builtin import REGISTRY
from gpuaware.placement.ledger import Phase, PodEntry
from gpuaware.placement.model import NodeSpec, PodRequest
from gpuaware.placement.planner import Decided, Planner, PlannerConfig
from gpuaware.placement.queue_order import FairShareOrder, PrioritySort, TenantDemand
from gpuaware.placement.registry import ProfileError


def pod(uid: str, queue: str, gpus: int = 1, *, priority: int = 0, checkpointable: bool = True) -> PodRequest:
    return PodRequest(name=uid, cpu_milli=100, num_gpu=gpus, gpu_milli=1000, queue=queue, priority=priority,
                      checkpointable=checkpointable)


def entry(uid: str, queue: str, phase: Phase, gpus: int = 1, *, seq: int = 0, since: float = 0.0,
          priority: int = 0, checkpointable: bool = True) -> PodEntry:
    return PodEntry(uid, 0, phase, pod(uid, queue, gpus, priority=priority, checkpointable=checkpointable),
                    since=since, seq=seq)


def test_fair_share_is_water_filled_over_running_plus_waiting_gpus():
    entries = [entry("a1", "a", Phase.BOUND, 2), entry("b1", "b", Phase.BOUND, 6), entry("b2", "b", Phase.PARKED, 4)]
    d = TenantDemand.of(entries, capacity=8)
    assert d.share == pytest.approx({"a": 2.0, "b": 6.0})
    assert d.capped("b") and not d.capped("a")
    assert d.attained("a") == pytest.approx(1.0) and d.attained("b") == pytest.approx(1.0)


def test_a_starved_tenant_goes_first_then_shortest_predicted_then_arrival():
    order = FairShareOrder(capacity=lambda: 8, starved_below=0.5, default_s=3600)
    held = [entry(f"big{i}", "big", Phase.BOUND) for i in range(8)]
    waiting = [entry("big-long", "big", Phase.PARKED, seq=1), entry("big-short", "big", Phase.PARKED, seq=2),
               entry("big-unknown", "big", Phase.PARKED, seq=3), entry("small", "small", Phase.PARKED, 2, seq=4)]
    order.predicted.update({"big-long": 7200.0, "big-short": 60.0})
    demand = order.demand([*held, *waiting])
    assert order.starved("small", demand) and not order.starved("big", demand)
    got = [e.uid for e in order.sort(waiting, demand)]
    assert got == ["small", "big-short", "big-unknown", "big-long"]  # unknown counts default_s (3600)


def test_a_capped_tenant_is_starved_only_far_below_its_share():
    order = FairShareOrder(capacity=lambda: 8, starved_below=1.0)
    held = [entry("a1", "a", Phase.BOUND), *(entry(f"b{i}", "b", Phase.BOUND) for i in range(7))]
    waiting = [entry(f"a-w{i}", "a", Phase.PARKED) for i in range(6)] + [entry("b-w", "b", Phase.PARKED, 4)]
    demand = order.demand([*held, *waiting])
    assert demand.capped("a") and demand.capped("b") and demand.share["a"] == pytest.approx(4.0)
    assert order.starved("a", demand)  # 1 of 4 running: under CAPPED_STARVED (0.75) of its share
    assert not order.starved("b", demand)
    held[1].evicting = "d"  # b loses one: a at 1/4 still starved, b (6 of 4) still not
    assert [order.starved(t, order.demand([*held, *waiting])) for t in "ab"] == [True, False]


def test_priority_still_comes_first():
    order = FairShareOrder(capacity=lambda: 4)
    waiting = [entry("starved-low", "s", Phase.PARKED, seq=1), entry("rich-high", "r", Phase.PARKED, seq=2, priority=10)]
    held = [entry(f"r{i}", "r", Phase.BOUND) for i in range(4)]
    got = [e.uid for e in order.sort(waiting, order.demand([*held, *waiting]))]
    assert got == ["rich-high", "starved-low"]


def test_reclaim_takes_only_what_capped_tenants_hold_above_their_share():
    order = FairShareOrder(capacity=lambda: 8, min_runtime_s=100)
    held = [entry(f"big{i}", "big", Phase.BOUND, since=float(i)) for i in range(7)]
    held.append(entry("young", "big", Phase.BOUND, since=950.0))  # runs 50 s at now=1000: too young
    waiting = [entry("big-more", "big", Phase.PARKED, 4), entry("small", "small", Phase.PARKED, 3)]
    demand = order.demand([*held, *waiting])
    assert demand.share["small"] == pytest.approx(3.0) and demand.share["big"] == pytest.approx(5.0)
    victims = order.reclaim_victims(waiting[1], held, demand, now=1000.0)
    # big holds 8 against a share of 5: any of its pods may go (newest first; the session takes the
    # fewest on one node), never the one under min runtime
    assert victims == ["big6", "big5", "big4", "big3", "big2", "big1", "big0"]
    # big, capped and above its share, is not starved: it reclaims nothing
    assert order.reclaim_victims(waiting[0], held, demand, now=1000.0) == []


def test_reclaim_spares_pods_that_cannot_checkpoint_or_outrank_the_starved_pod():
    order = FairShareOrder(capacity=lambda: 4, min_runtime_s=0)
    held = [entry("solid", "big", Phase.BOUND, checkpointable=False), entry("vip", "big", Phase.BOUND, priority=5),
            entry("ok", "big", Phase.BOUND), entry("ok2", "big", Phase.BOUND)]
    waiting = [entry("big-more", "big", Phase.PARKED, 2), entry("small", "small", Phase.PARKED, 1)]
    demand = order.demand([*held, *waiting])
    assert demand.share["big"] == pytest.approx(3.0)
    assert set(order.reclaim_victims(waiting[1], held, demand, now=10.0)) == {"ok", "ok2"}
    # at its share exactly, a tenant gives nothing
    at_share = order.demand([*held[:3], *waiting])
    assert order.reclaim_victims(waiting[1], held[:3], at_share, now=10.0) == []


def test_the_queue_sort_is_a_profile_entry_with_typed_arguments():
    fgd = REGISTRY.policy_config("BestFit")
    with pytest.raises(ProfileError, match="unknown queue sort 'lottery'; known: fair-share, priority"):
        REGISTRY.validate({**fgd, "queue_sort": {"name": "lottery"}})
    with pytest.raises(ProfileError, match=r"\$\.queue_sort\.args\.starved_below"):
        REGISTRY.validate({**fgd, "queue_sort": {"name": "fair-share", "args": {"starved_below": 0}}})
    entry = {"name": "fair-share", "args": {"starved_below": 0.5, "turn_due": 0.1, "min_runtime_s": 60.0}}
    built = REGISTRY.build_framework({**fgd, "queue_sort": entry}, capacity=lambda: 8.0).queue_sort
    assert isinstance(built, FairShareOrder) and built.tenant_aware
    assert (built.starved_below, built.turn_due, built.min_runtime_s, built.capacity()) == (0.5, 0.1, 60.0, 8.0)
    assert built.owed is not None  # turn-taking on
    with pytest.raises(ValueError, match="needs the cluster's GPU capacity"):
        REGISTRY.build_framework({**fgd, "queue_sort": entry})
    assert REGISTRY.build_framework(fgd).queue_sort is None  # none named: priority, then arrival
    priority = REGISTRY.build_framework({**fgd, "queue_sort": {"name": "priority"}}).queue_sort
    assert isinstance(priority, PrioritySort) and not priority.tenant_aware


def test_priority_sort_orders_by_priority_then_arrival_and_starves_nobody():
    order = PrioritySort()
    waiting = [entry("late-high", "a", Phase.PARKED, seq=3, priority=5), entry("early", "b", Phase.PARKED, seq=1),
               entry("later", "a", Phase.PARKED, seq=2)]
    demand = order.demand(waiting)
    assert [e.uid for e in order.sort(waiting, demand)] == ["late-high", "early", "later"]
    assert not order.starved("a", demand) and order.reclaim_victims(waiting[1], [], demand, now=0.0) == []


def _planner(order: str, **args: float) -> Planner:
    now = [1000.0]
    sort = {"name": order, "args": {"min_runtime_s": 60.0, **args}} if order == "fair-share" else {"name": order}
    p = Planner(PlannerConfig(policy_name="BestFit", policy_config={**REGISTRY.policy_config("BestFit"),
                                                                    "queue_sort": sort},
                              learn_typical=False, prior={(100, 1000, 1, ""): 1.0}), clock=lambda: now[0])
    p.view.set_node(NodeSpec("n0", cpu_milli=64_000, memory_mib=256_000, num_gpu=4, gpu_model="A100"), None)
    p.now = now  # type: ignore[attr-defined]  # the test's clock handle rides on the planner (tests below use it)
    return p


def _fill_with_big(p: Planner) -> None:
    for i in range(4):
        out = p.submit(f"big{i}", 0, pod(f"big{i}", "big"))
        d = out[0]
        assert isinstance(d, Decided)
        p.ledger.bound(d.entry.uid, 0, d.node, d.gpus, now=0.0)
    for i in range(4, 8):  # big wants more than the cluster: it is capped at its share
        p.submit(f"big{i}", 0, pod(f"big{i}", "big"))


def test_the_planner_reclaims_for_a_starved_tenant_in_its_retry_pass():
    p = _planner("fair-share")
    _fill_with_big(p)
    assert p.submit("small", 0, pod("small", "small", 2))[0].__class__.__name__ == "Parked"
    outcomes, _ = p.retry()
    decided = [o for o in outcomes if isinstance(o, Decided)]
    assert [o.entry.uid for o in decided] == ["small"]
    assert len(decided[0].victims) == 2 and {v.uid for v in decided[0].victims} <= {f"big{i}" for i in range(4)}
    assert decided[0].preemption_reason == "reclaim"
    assert p.counters.fair_reclaims == 1


def test_the_priority_order_never_reclaims():
    p = _planner("priority")
    _fill_with_big(p)
    p.submit("small", 0, pod("small", "small", 2))
    outcomes, _ = p.retry()
    assert not [o for o in outcomes if isinstance(o, Decided)]


def test_predictions_are_kept_only_for_pods_the_planner_holds():
    p = _planner("fair-share")
    p.submit("w", 0, pod("w", "t"))
    p.predict("w", 42.0)
    p.predict("ghost", 1.0)
    assert p.order is not None and p.order.predicted == {"w": 42.0}
    p.forget("w")
    assert p.order.predicted == {}



def test_a_reservation_holds_the_node_that_frees_first_by_predicted_ends():
    order = FairShareOrder(capacity=lambda: 16, default_s=1000.0)
    # n0: 8 GPUs, 6 used by pods predicted to end at 100 and 5,000; n1: 8 GPUs, 6 used ending at 300
    held = [PodEntry("a", 0, Phase.BOUND, pod("a", "x", 3), since=0.0, node="n0"),
            PodEntry("b", 0, Phase.BOUND, pod("b", "x", 3), since=0.0, node="n0"),
            PodEntry("c", 0, Phase.BOUND, pod("c", "x", 6), since=0.0, node="n1")]
    order.predicted.update({"a": 100.0, "b": 5000.0, "c": 300.0})
    wide = entry("wide", "small", Phase.PARKED, 6)
    r = order.reserve(wide, held, {"n0": 8, "n1": 8}, {}, now=50.0)
    # n0 has 2 free + 3 at t=100 = 5 < 6 (it needs b too: 5,000); n1 frees 8 at 300
    assert r is not None and (r.node, r.shadow) == ("n1", 300.0)
    assert r.admits(250.0) and not r.admits(251.0)  # a pod ending by 300 may backfill n1


def test_an_overdue_pod_is_expected_to_run_as_long_again():
    order = FairShareOrder(capacity=lambda: 8, default_s=100.0)
    held = [PodEntry("old", 0, Phase.BOUND, pod("old", "x", 8), since=0.0, node="n0")]  # predicted 100, ran 1,000
    r = order.reserve(entry("w", "s", Phase.PARKED, 4), held, {"n0": 8}, {}, now=1000.0)
    assert r is not None and r.shadow == 2000.0
    assert order.reserve(entry("huge", "s", Phase.PARKED, 9), held, {"n0": 8}, {}, now=1000.0) is None


def _two_nodes_full_of_big() -> Planner:
    """n0 and n1 (4 GPUs each) full of big's pods that cannot checkpoint (no reclaim possible),
    bound at t=1000; those on n0 predicted to end at 1060, those on n1 at 11,000. One node may be held."""
    p = _planner("fair-share")
    p.config = replace(p.config, max_reservations=1)  # none by default
    p.view.set_node(NodeSpec("n1", cpu_milli=64_000, memory_mib=256_000, num_gpu=4, gpu_model="A100"), None)
    for i in range(8):
        req = pod(f"big{i}", "big", checkpointable=False)
        d = p.submit(req.name, 0, req)[0]
        assert isinstance(d, Decided)
        p.ledger.bound(d.entry.uid, 0, d.node, d.gpus, now=1000.0)
        p.predict(req.name, 60.0 if d.node == "n0" else 10_000.0)
    return p


def test_the_planner_holds_the_reserved_node_for_the_starved_pod_and_backfills_short_ones():
    p = _two_nodes_full_of_big()
    for name, runtime in (("big-long", 5000.0), ("big-short", 30.0)):
        p.submit(name, 0, pod(name, "big"))
        p.predict(name, runtime)
    p.submit("wide", 0, pod("wide", "small", 4))  # starved: small wants 4 GPUs and runs none
    p.retry()
    assert "wide" in p.reservations and p.reservations["wide"].node == "n0"
    assert p.reservations["wide"].shadow == pytest.approx(1060.0)
    # two GPUs free on n0: only a pod that ends before the wide pod's turn may take one
    on_n0 = [e.uid for e in p.ledger if e.node == "n0"]
    for uid in on_n0[:2]:
        p.ledger.release(uid)
        p.forget(uid)
    outcomes, _ = p.retry()
    placed = {o.entry.uid: o.node for o in outcomes if isinstance(o, Decided)}
    assert placed == {"big-short": "n0"}, placed  # big-long (5,000 s) waits although a GPU is free


def test_a_pod_kept_off_the_reserved_node_waits_for_gpus_not_for_the_binder():
    p = _two_nodes_full_of_big()
    p.submit("wide", 0, pod("wide", "small", 4))
    p.retry()
    assert p.reservations["wide"].node == "n0"
    uid = next(e.uid for e in p.ledger if e.node == "n0")
    p.ledger.release(uid)
    p.forget(uid)
    out = p.submit("long", 0, pod("long", "big"))  # the default runtime (3,600 s) outlasts the reservation
    assert [type(o).__name__ for o in out] == ["Parked"] and out[0].reason == "insufficient_gpu"


def test_the_worlds_clock_is_its_latest_event_plus_the_time_since_not_this_clock():
    p = _planner("fair-share")
    assert p.world.now() == 1000.0  # nothing heard from the world yet: this clock
    p.world.event(50_000.0)  # the digital twin's virtual time, on its own epoch
    p.now[0] += 10.0  # type: ignore[attr-defined]  # the test planner's clock is a list the test advances
    assert p.world.now() == 50_010.0
    p.world.event(40_000.0)  # an older event read late does not turn the clock back
    assert p.world.now() == 50_010.0


def test_a_pod_is_not_reclaimed_before_its_minimum_runtime_on_the_worlds_clock():
    p = _planner("fair-share")  # this clock says 1,000; reclaim_min_runtime_s is 60
    _fill_with_big(p)  # bound at world time 0
    p.world.event(30.0)  # the world is 30 s past those binds: too young to evict
    p.submit("small", 0, pod("small", "small", 2))
    outcomes, _ = p.retry()
    assert not [o for o in outcomes if isinstance(o, Decided)]
    p.world.event(100.0)
    outcomes, _ = p.retry()
    assert [o.entry.uid for o in outcomes if isinstance(o, Decided)] == ["small"]


def test_each_starved_tenants_first_wide_pod_holds_its_own_node_and_one_gpu_pods_none():
    p = _two_nodes_full_of_big()
    p.config = replace(p.config, max_reservations=2)
    p.submit("wide", 0, pod("wide", "small", 4))
    p.submit("pair", 0, pod("pair", "other", 2))
    p.submit("pair-2", 0, pod("pair-2", "other", 2))  # the same tenant's second wide pod waits its turn
    p.submit("one", 0, pod("one", "third", 1))
    p.retry()
    assert set(p.reservations) == {"wide", "pair"}
    assert {r.node for r in p.reservations.values()} == {"n0", "n1"}
    p.config = replace(p.config, max_reservations=1)
    p.retry()
    assert set(p.reservations) == {"wide"}  # the most starved tenant's


def test_a_turn_takes_from_tenants_above_their_share_once_the_starved_tenant_is_owed_enough():
    order = FairShareOrder(capacity=lambda: 8, min_runtime_s=0, turn_due=0.1, turn_lease_s=300)
    held = [entry(f"{t}{i}", t, Phase.BOUND, 2, since=0.0) for t in "ab" for i in range(2)]
    waiting = [entry("a-more", "a", Phase.PARKED, 2), entry("b-more", "b", Phase.PARKED, 2),
               entry("wide", "w", Phase.PARKED, 4)]
    demand = order.demand([*held, *waiting])
    assert demand.share["w"] == pytest.approx(8 / 3)
    # fair reclaim alone: a and b would drop below their share (4 - 2 < 2.67), so nothing
    assert order.reclaim_victims(waiting[2], held, demand, now=600.0) == []
    order.observe(demand, 0.0)
    order.observe(demand, 60.0)  # owed 0.03 of its share after a minute: not due
    assert not order.due_turn("w", demand) and order.reclaim_victims(waiting[2], held, demand, now=60.0) == []
    order.observe(demand, 600.0)  # 0.11 after ten minutes: due, and a and b are owed nothing
    assert order.due_turn("w", demand) and not order.due_turn("a", demand)
    assert set(order.reclaim_victims(waiting[2], held, demand, now=600.0)) == {"a0", "a1", "b0", "b1"}
    assert order.reclaim_victims(waiting[2], held, demand, now=200.0) == []  # none past the lease yet
    assert order.reclaim_victims(waiting[0], held, demand, now=600.0) == []  # a is not starved nor due


def test_a_turn_takes_from_tenants_exactly_at_their_share_unless_they_are_owed():
    """The philly demo's case: each big node holds one long pod of a tenant wanting just what it runs,
    so its share is exactly what it holds. Such a tenant yields to a tenant due a turn, unless it was
    kept below its share lately and is owed a turn itself."""
    order = FairShareOrder(capacity=lambda: 8, min_runtime_s=0, turn_due=0.1, turn_lease_s=300)
    held = [entry(f"{t}0", t, Phase.BOUND, 2, since=0.0) for t in "abc"]
    wide = entry("wide", "w", Phase.PARKED, 4)
    demand = order.demand([*held, wide])
    assert {t: demand.share[t] for t in "abcw"} == pytest.approx({"a": 2, "b": 2, "c": 2, "w": 2})
    order.observe(demand, 0.0)
    assert order.reclaim_victims(wide, held, demand, now=60.0) == []  # not owed enough yet
    order.observe(demand, 600.0)
    assert set(order.reclaim_victims(wide, held, demand, now=600.0)) == {"a0", "b0", "c0"}
    # c waited 20 minutes below its share before its pod ran: owed a turn, it keeps its pod
    order = FairShareOrder(capacity=lambda: 8, min_runtime_s=0, turn_due=0.1, turn_lease_s=0)
    order.observe(order.demand([*held[:2], entry("c0", "c", Phase.PARKED, 2), wide]), 0.0)
    order.observe(demand, 1200.0)
    assert order.due_turn("w", demand) and not order.due_turn("c", demand)  # c holds its share now
    assert set(order.reclaim_victims(wide, held, demand, now=1200.0)) == {"a0", "b0"}


def test_a_turn_takes_pods_of_any_priority_lower_first():
    order = FairShareOrder(capacity=lambda: 8, min_runtime_s=0, turn_due=0.1, turn_lease_s=0)
    held = [entry("a0", "a", Phase.BOUND, 2, priority=5), entry("b0", "b", Phase.BOUND, 2),
            entry("c0", "c", Phase.BOUND, 2, since=100.0)]
    wide = entry("wide", "w", Phase.PARKED, 4)
    demand = order.demand([*held, wide])
    order.observe(demand, 0.0)
    order.observe(demand, 600.0)
    # a marks its pod high: that does not keep it from yielding, it only puts it last
    assert order.reclaim_victims(wide, held, demand, now=600.0) == ["b0", "c0", "a0"]
    # without turns, nothing: a, b and c hold exactly their shares
    plain = FairShareOrder(capacity=lambda: 8, min_runtime_s=0)
    assert plain.reclaim_victims(wide, held, plain.demand([*held, wide]), now=600.0) == []


def _turn_planner(turn_due: float) -> Planner:
    p = _planner("fair-share", turn_due=turn_due, turn_lease_s=60.0)
    for t in "ab":  # a and b run 2 GPUs each of 4 and want 2 more
        d = p.submit(f"{t}0", 0, pod(f"{t}0", t, 2))[0]
        assert isinstance(d, Decided)
        p.ledger.bound(d.entry.uid, 0, d.node, d.gpus, now=0.0)
    for uid, t in (("a-more", "a"), ("b-more", "b"), ("wide", "w")):
        p.submit(uid, 0, pod(uid, t, 2))
    return p


@pytest.mark.parametrize("turn_due, reclaims", [(0.0, 0), (0.1, 1)])
def test_the_planner_takes_a_turn_for_a_tenant_owed_service(turn_due, reclaims):
    p = _turn_planner(turn_due)
    p.now[0] = 1000.0  # type: ignore[attr-defined]  # the test planner's clock is a list the test advances
    first, _ = p.retry()
    assert not [o for o in first if isinstance(o, Decided)]  # a and b hold 2 each against 1.33: no fair reclaim
    p.now[0] = 1600.0  # type: ignore[attr-defined]  # the test planner's clock is a list the test advances
    later, _ = p.retry()
    decided = [o for o in later if isinstance(o, Decided)]
    assert [o.entry.uid for o in decided] == ["wide"] * reclaims
    assert p.counters.fair_reclaims == reclaims


def test_a_starved_pod_behind_a_higher_priority_one_is_tried_once_and_the_others_after():
    """The order puts priority first, so a starved tenant's pod may come after another tenant's pod of
    higher priority: the pass still tries the starved pods first, each once, then the others."""
    p = _planner("fair-share", starved_below=0.5)
    for i in range(4):  # big holds the whole node at priority 1: nobody below may preempt it
        d = p.submit(f"big{i}", 0, pod(f"big{i}", "big", priority=1))[0]
        assert isinstance(d, Decided)
        p.ledger.bound(d.entry.uid, 0, d.node, d.gpus, now=0.0)
    assert [type(o).__name__ for o in p.submit("big-high", 0, pod("big-high", "big", priority=1))] == ["Parked"]
    assert [type(o).__name__ for o in p.submit("small", 0, pod("small", "small"))] == ["Parked"]
    p.ledger.release("big0")
    p.ledger.release("big1")
    # two GPUs free; shares 3 (big) and 1 (small): big runs 2 of 3 (not starved below 0.5), small 0 of 1
    outcomes, more = p.retry()
    assert [o.entry.uid for o in outcomes if isinstance(o, Decided)] == ["small", "big-high"] and not more


def test_a_retry_that_changes_nothing_about_a_waiting_gang_explains_nothing_again():
    """A gang that fits nowhere is explained once, when it is parked; each later retry pass that leaves it
    waiting for the same reason computes no explanation (a pass over many waiting gangs stays cheap)."""
    p = _planner("priority")
    explained: list[str] = []
    explain = p.explain_request
    p.explain_request = lambda req, max_classes=50: explained.append(req.name) or explain(req, max_classes)  # type: ignore[method-assign]  # counting the calls
    for m in ("g0", "g1"):  # two 3-GPU members: the 4-GPU node holds one
        p.submit(m, 0, replace(pod(m, "a", 3), gang_id="g", gang_min_members=2))
    assert sorted(explained) == ["g0", "g1"]
    assert {p.ledger.pods[m].reason for m in ("g0", "g1")} == {"insufficient_gpu"}
    assert p.retry() == ([], False)
    assert sorted(explained) == ["g0", "g1"] and p.ledger.pods["g0"].phase == Phase.PARKED
