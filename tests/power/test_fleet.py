"""The planner on a live cluster's named nodes: idle nodes off only after the idle time and never the last
of a GPU model, nodes back on ahead of a forecast rise, the hold after a shortfall, and no forecast meaning
the recent demand alone."""

from __future__ import annotations

from gpuaware.power import FleetPlanner, NodeFacts, PlannerParams

STEP = 600.0


def nodes(busy: int, total: int = 8, off: tuple[str, ...] = (), model: str = "A100") -> list[NodeFacts]:
    return [NodeFacts(f"n{i}", 8, model, i < busy, "off" if f"n{i}" in off else "on") for i in range(total)]


def run(planner: FleetPlanner, steps: int, facts: list[NodeFacts], forecast: list[float] | None,
        start: float = 0.0) -> list:
    out = []
    for k in range(steps):
        out.append(planner.decide(start + k * STEP, facts, held_gpus=8.0 * sum(n.busy for n in facts),
                                  pending_gpus=0.0, forecast_gpus=forecast))
    return out


def test_idle_nodes_go_off_only_after_the_idle_time_and_the_buffer_stays_powered() -> None:
    planner = FleetPlanner(PlannerParams(buffer=1, idle_steps=3))
    facts = nodes(busy=2)
    first = run(planner, 3, facts, forecast=[16.0, 16.0, 16.0])
    assert all(not d.actions for d in first)  # idle for less than three steps: nothing switched yet
    d = run(planner, 1, facts, forecast=[16.0, 16.0, 16.0], start=3 * STEP)[0]
    assert d.target == 3  # two busy nodes (16 GPUs forecast) + a buffer of one
    assert [a.action for a in d.actions] == ["power-down"] * 5
    assert {a.node for a in d.actions} == {"n2", "n3", "n4", "n5", "n6"}  # idle as long: by name
    assert "keep 3 of 8 GPU nodes powered" in d.reason


def test_the_last_node_of_a_gpu_model_stays_on() -> None:
    planner = FleetPlanner(PlannerParams(buffer=0, idle_steps=1))
    facts = [*nodes(busy=1, total=4), NodeFacts("h0", 8, "H100", False, "on")]
    d = run(planner, 2, facts, forecast=[8.0])[-1]
    assert "h0" not in {a.node for a in d.actions}
    assert {a.node for a in d.actions} == {"n1", "n2", "n3"}


def test_a_forecast_rise_switches_nodes_on_a_boot_delay_ahead() -> None:
    planner = FleetPlanner(PlannerParams(buffer=0, idle_steps=1, boot_delay_s=STEP))
    facts = nodes(busy=2, off=("n4", "n5", "n6", "n7"))
    d = run(planner, 1, facts, forecast=[16.0, 40.0, 16.0])[0]  # 5 nodes wanted in two steps
    assert d.forecast_nodes == 5.0
    assert [a.action for a in d.actions] == ["power-up"] * 1  # four on already: one more
    assert d.actions[0].node == "n4"


def test_a_shortfall_holds_every_power_down() -> None:
    planner = FleetPlanner(PlannerParams(buffer=0, idle_steps=1, hold=3))
    short = planner.decide(0.0, nodes(busy=2, total=4, off=("n2", "n3")), held_gpus=16.0, pending_gpus=16.0,
                           forecast_gpus=None)
    assert short.short == 2 and short.demand_nodes == 4  # 16 pending GPUs need two more nodes
    assert [a.action for a in short.actions] == ["power-up", "power-up"]
    quiet = nodes(busy=1, total=4)
    held = run(planner, 2, quiet, forecast=[8.0], start=STEP)
    assert all(not d.actions for d in held)  # a hold of three steps: the shortfall's and the two after it
    assert run(planner, 1, quiet, forecast=[8.0], start=3 * STEP)[0].actions  # then the idle nodes go


def test_without_a_forecast_the_recent_demand_decides() -> None:
    planner = FleetPlanner(PlannerParams(buffer=1, idle_steps=2))
    d = run(planner, 3, nodes(busy=3), forecast=None)[-1]
    assert d.forecast_nodes is None and "no forecast" in d.reason
    assert d.target == 4 and len(d.actions) == 4


def test_decisions_come_once_per_step() -> None:
    planner = FleetPlanner(PlannerParams(step_s=STEP))
    assert planner.due(0.0)
    planner.decide(0.0, nodes(busy=1), held_gpus=8.0, pending_gpus=0.0, forecast_gpus=None)
    assert not planner.due(STEP - 1) and planner.due(STEP)
