"""The demo's power figures: node-hours off counted from the binder's answers within the window (a
boot counted as on, a node still off at the end counted to the end), the recommendations by action and
the refusals; nothing claimed for a run without the planner."""

from __future__ import annotations

from gpuaware.cli.demo_analysis import power_figures
from gpuaware.cli.demo_config import RunSpec
from gpuaware.cli.demo_record import RunLog, RunResult
from gpuaware.schemas import NodePowerChanged, NodePowerRecommended

C = "demo"
T0 = 1_767_225_600.0
H = 3600.0


def _rec(rid: str, node: str, action: str, reason: str = "keep 1 of 3 GPU nodes powered") -> NodePowerRecommended:
    return NodePowerRecommended(source="placement/0", emitted_at=T0, cluster=C, recommendation_id=rid, node=node,
                                action=action, recommended_at=T0, reason=reason, powered_target=1,  # type: ignore[arg-type]  # a Literal from a test's str
                                demand_nodes=1)


def _changed(node: str, state: str, at: float, reason: str = "") -> NodePowerChanged:
    return NodePowerChanged(source="binder/0", emitted_at=at, cluster=C, node=node, state=state, changed_at=at,  # type: ignore[arg-type]  # a Literal from a test's str
                            reason=reason)


def _run(log: RunLog) -> RunResult:
    return RunResult(spec=RunSpec("gpuaware", "GpuAware", C), log=log, gpus={}, nodes=4, started_at=T0,
                     virtual_end=T0 + 10 * H, wall_s=1.0, reached_end=True, messages={}, db={},
                     snapshot_violations=[], snapshot_pods=0, exit_codes={}, services={})


def test_node_hours_off_within_the_window() -> None:
    log = RunLog(C)
    for ev in (_rec("r1", "b", "power-down"), _rec("r2", "c", "power-down"), _rec("r3", "d", "power-down"),
               _rec("r4", "b", "power-up", reason="keep 2 of 4 GPU nodes powered: ...; 1 short")):
        log.on_event(ev, "placement.node.power_recommended.v1")
    for ev in (_changed("b", "off", T0 + 1 * H), _changed("b", "booting", T0 + 3 * H),  # 2 h off
               _changed("c", "off", T0 + 8 * H),  # off to the end of the 10-hour window: 2 h
               _changed("d", "on", T0 + 1 * H, reason="node_busy: pods bound")):  # refused: never off
        log.on_event(ev, "binder.node.power_changed.v1")
    f = power_figures(_run(log), 10 * H)
    assert f["node_hours_off"] == 4.0
    assert f["share_of_node_hours"] == 0.1  # 4 of 4 nodes x 10 h
    assert f["recommended"] == {"power-down": 3, "power-up": 1}
    assert f["refused"] == 1 and f["recommendations_after_a_shortfall"] == 1
    assert f["nodes_off_at_end"] == ["c"]
    assert log.counts()["arrived"] == 0 and not log.recorded  # no pods, and no rows the recorder keeps


def test_a_run_without_the_planner_claims_nothing() -> None:
    assert power_figures(_run(RunLog(C)), 10 * H) == {"planner": "not in this run"}
