"""The replay's accounting on hand-made cases (powered-off node-hours, shortfall events and node-minutes,
the boot delay, busy nodes kept on, the cluster's total changing) and the oracle: never short, and never
more nodes powered than the steps within the boot delay need."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.power import Oracle, Recommendation, Step, boot_steps, replay


class Fixed:
    """Asks for ``targets[t]`` nodes at the end of step ``t`` (the last one again past the end)."""

    def __init__(self, *targets: int) -> None:
        self.targets = targets
        self.seen: list[Step] = []

    def decide(self, step: Step, history: np.ndarray) -> int:
        assert len(history) == step.index + 1 and history[-1] == step.demand
        self.seen.append(step)
        return self.targets[min(step.index, len(self.targets) - 1)]


def test_boot_steps_round_a_delay_up_to_whole_steps() -> None:
    assert [boot_steps(s, 600.0) for s in (0.0, 1.0, 600.0, 601.0, 1200.0)] == [0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        boot_steps(-1.0, 600.0)


def test_shortfall_events_minutes_and_powered_off_hours_on_a_hand_made_case() -> None:
    r = replay("fixed", Fixed(6), [5, 5, 9, 9, 5], [10] * 5, 600.0, 0.0, start=1000.0)
    assert r.powered.tolist() == [10, 6, 6, 6, 6]  # every node on at the start
    assert r.short.tolist() == [0, 0, 3, 3, 0]
    assert (r.shortfall_events, r.shortfall_episodes) == (2, 1)
    assert r.shortfall_node_minutes == 60.0  # 3 nodes x 2 steps x 10 minutes
    assert r.off_node_hours == pytest.approx(16 / 6)  # 4 nodes off for 4 steps of 10 minutes
    assert r.recommendations == (Recommendation("power-down", 4, 1600.0),)


def test_a_node_switched_on_serves_only_after_the_boot_delay() -> None:
    policy = Fixed(4, 9)
    r = replay("late", policy, [4, 4, 8, 8, 8, 8], [10] * 6, 600.0, 1200.0)  # two steps of booting
    assert r.powered.tolist() == [10, 4, 9, 9, 9, 9]  # booting nodes are powered (they draw power) ...
    assert r.ready.tolist() == [10, 4, 4, 4, 9, 9]  # ... switched on after step 1, they boot through 2 and 3
    assert r.short.tolist() == [0, 0, 4, 4, 0, 0]
    assert r.recommendations == (Recommendation("power-down", 6, 600.0), Recommendation("power-up", 5, 1200.0))
    assert [s.booting for s in policy.seen] == [0, 0, 5, 5, 0]


def test_busy_nodes_are_never_switched_off_and_targets_stay_within_the_cluster() -> None:
    r = replay("greedy", Fixed(0), [7, 3, 3], [10] * 3, 600.0, 0.0)
    assert r.powered.tolist() == [10, 7, 3]
    r = replay("eager", Fixed(50), [1, 1, 1], [10] * 3, 600.0, 0.0)
    assert r.powered.tolist() == [10, 10, 10] and r.recommendations == ()


def test_the_cluster_growing_and_shrinking() -> None:
    r = replay("keep", Fixed(5), [5, 5, 5, 5], [10, 6, 12, 12], 600.0, 0.0)
    assert r.powered.tolist() == [10, 5, 11, 5]  # 6 joined on at step 2; the policy lets them go after
    r = replay("boot", Fixed(2, 8), [2, 2, 8, 8], [4, 4, 10, 10], 600.0, 600.0)
    # 6 switched on after step 1 while 6 joined on at step 2: 4 boots called off, the cluster holds 10
    assert r.powered.tolist() == [4, 2, 10, 10] and r.short.tolist() == [0, 0, 0, 0]


def test_demand_must_be_finite() -> None:
    with pytest.raises(ValueError, match="held"):
        replay("x", Fixed(1), [1.0, np.nan], [2, 2], 600.0, 0.0)


@pytest.mark.parametrize("boot_delay_s", [0.0, 600.0, 1800.0])
def test_the_oracle_is_never_short_and_keeps_no_node_a_step_does_not_need(boot_delay_s: float) -> None:
    rng = np.random.default_rng(int(boot_delay_s))
    k = boot_steps(boot_delay_s, 600.0)
    for _ in range(20):
        n = 300
        demand = np.clip(150 + np.cumsum(rng.integers(-12, 13, n)) + 60 * (rng.random(n) < 0.03), 0, 300)
        total = np.full(n, 320)
        r = replay("oracle", Oracle(demand, boot_delay_s, 600.0), demand, total, 600.0, boot_delay_s)
        assert r.shortfall_events == 0
        need = [max(demand[t - 1], demand[t: t + k + 1].max()) for t in range(1, n)]
        assert r.powered[1:].tolist() == need
        total[100:110] = 200  # the cluster loses nodes for a while (Philly's total does)
        demand_capped = np.minimum(demand, total)
        r = replay("oracle", Oracle(demand_capped, boot_delay_s, 600.0), demand_capped, total, 600.0, boot_delay_s)
        assert r.shortfall_events == 0
