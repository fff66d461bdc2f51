"""gpuaware's node-power planner: the band over the boot delay and the lead, the buffer, the idle time, the
hold after a shortfall, and switching nodes on one boot delay ahead of the demand the forecast expects."""

from __future__ import annotations

import numpy as np

from gpuaware.power import (
    CesPolicy,
    Planner,
    PlannerParams,
    Recommendation,
    Step,
    persistence_outlook,
    plan_step,
    replay,
)


def step(index: int = 20, demand: int = 90, ready: int = 200, booting: int = 0, total: int = 420) -> Step:
    return Step(index=index, at=6000.0, demand=demand, ready=ready, booting=booting, total=total)


def band(*values: float) -> np.ndarray:
    out = np.full(10, np.nan)
    out[: len(values)] = values
    return out


RECENT = np.array([90, 90, 90])


def test_the_target_is_the_band_over_boot_delay_and_lead_plus_the_buffer() -> None:
    p = PlannerParams(boot_delay_s=600.0, lead_steps=1, buffer=5)
    assert p.reach == 3  # one step booting, the step it serves, one of lead
    d = plan_step(step(), RECENT, band(100, 98, 99, 150), hold_until=0, params=p)
    assert d.target == 105  # the 150 four steps out is past the reach
    assert d.recommendation == Recommendation("power-down", 95, 6000.0)
    d = plan_step(step(), RECENT, band(100, 98, 99, 150), hold_until=0, params=PlannerParams(lead_steps=2, buffer=5))
    assert d.target == 155
    d = plan_step(step(), RECENT, band(100.2), hold_until=0, params=PlannerParams(buffer=0))
    assert d.target == 101  # a fractional p90 is rounded up
    d = plan_step(step(), RECENT, band(), hold_until=0, params=PlannerParams(buffer=7))
    assert d.target == 97  # no forecast: demand now and the buffer


def test_nodes_idle_for_less_than_idle_steps_stay_on() -> None:
    recent = np.array([180, 100, 90])
    d = plan_step(step(), recent, band(95), hold_until=0, params=PlannerParams(idle_steps=3, buffer=5))
    assert d.target == 185
    d = plan_step(step(), recent, band(95), hold_until=0, params=PlannerParams(idle_steps=2, buffer=5))
    assert d.target == 105
    d = plan_step(step(), recent, band(95), hold_until=0, params=PlannerParams(idle_steps=1, buffer=5))
    assert d.target == 100


def test_a_shortfall_switches_on_demand_plus_buffer_and_holds() -> None:
    p = PlannerParams(buffer=5, hold=10)
    short = step(index=20, demand=150, ready=120)
    d = plan_step(short, np.array([100, 120, 150]), band(110), hold_until=0, params=p)
    assert (d.target, d.hold_until) == (155, 30)
    assert d.recommendation == Recommendation("power-up", 35, 6000.0)
    held = plan_step(step(index=25, demand=60, ready=155), np.array([60, 60, 60]), band(60), d.hold_until, p)
    assert (held.target, held.hold_until, held.recommendation) == (155, 30, None)
    free = plan_step(step(index=30, demand=60, ready=155), np.array([60, 60, 60]), band(60), d.hold_until, p)
    assert free.target == 65 and free.recommendation == Recommendation("power-down", 90, 6000.0)


def test_small_power_downs_are_not_worth_a_switch_and_the_cluster_caps_the_target() -> None:
    d = plan_step(step(ready=106), RECENT, band(100), hold_until=0, params=PlannerParams(buffer=5, min_change=2))
    assert (d.target, d.recommendation) == (106, None)
    d = plan_step(step(ready=107), RECENT, band(100), hold_until=0, params=PlannerParams(buffer=5, min_change=2))
    assert d.target == 105
    d = plan_step(step(ready=400), RECENT, band(430), hold_until=0, params=PlannerParams(buffer=5))
    assert (d.target, d.recommendation) == (420, Recommendation("power-up", 20, 6000.0))


def test_power_downs_name_only_idle_ready_nodes() -> None:
    d = plan_step(step(demand=90, ready=95, booting=50), RECENT, band(60), hold_until=0,
                  params=PlannerParams(buffer=0, idle_steps=1))
    assert d.target == 90 and d.recommendation == Recommendation("power-down", 5, 6000.0)


def test_nodes_are_switched_on_one_boot_delay_ahead_of_the_demand_the_band_expects() -> None:
    demand = np.array([100] * 12 + [200] * 8)
    total = np.full(len(demand), 300)
    upper = np.full((len(demand), 10), np.nan)
    for o in range(len(demand)):  # a band that sees the step up coming
        ahead = demand[o + 1: o + 11]
        upper[o, : len(ahead)] = ahead
    p = PlannerParams(boot_delay_s=1200.0, step_s=600.0, lead_steps=0, buffer=5)
    planner = Planner(upper, p)
    r = replay("planner", planner, demand, total, 600.0, 1200.0)
    ups = [x for x in r.recommendations if x.action == "power-up"]
    # the band reaches step 12 at the end of step 9: switched on then, booting through 10 and 11, in time
    assert ups == [Recommendation("power-up", 100, 10 * 600.0)]
    assert r.shortfall_events == 0 and planner.recommendations == list(r.recommendations)
    assert (r.powered[9], r.powered[10], r.ready[11], r.ready[12]) == (105, 205, 105, 205)
    ces = replay("ces", CesPolicy(persistence_outlook(demand, 59).point), demand, total, 600.0, 1200.0)
    assert ces.short[12:15].tolist() == [80, 80, 80]  # CES switches on once demand is there, then boots
