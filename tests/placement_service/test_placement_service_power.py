"""The node-power planner in placement: the leader recommends idle nodes off once per step, no pod goes
to a node recommended off (nor to one booting until it is ready), the binder's answers are followed (a
refusal gives the node back at once, an echo read after its answer changes nothing), and the forecast
read is the cluster total's p90. PlacementState without a server."""

from __future__ import annotations

import time
from typing import Literal

from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES
from gpuaware.schemas import DemandPredicted, DemandSeries, NodePowerChanged, NodePowerRecommended
from gpuaware.services.placement.power import PowerPlanning, total_p90_path
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, PlacementState

T = 1_800_000_000.0
NODES = ("a", "b", "c", "d")


def _planning() -> PowerPlanning:
    st = PlacementState(cluster_name="x", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"])
    for n in NODES:
        st.apply_inventory(inventory("x", n, gpus=4))
    st.ensure_cluster()
    s = PlacementSettings(cluster="x", power_planner=True, power_buffer_nodes=0, power_idle_steps=1)
    return PowerPlanning(st, s, "placement/test")


def _answer(rec: NodePowerRecommended, state: Literal["off", "booting", "on"], *, ready_at: float | None = None, reason: str = "") -> NodePowerChanged:
    return NodePowerChanged(source="binder/test", emitted_at=time.time(), cluster="x", node=rec.node, state=state,
                            ready_at=ready_at, changed_at=T, recommendation_id=rec.recommendation_id, reason=reason)


def test_idle_nodes_are_recommended_off_and_take_no_pod_from_then_on() -> None:
    power = _planning()
    st = power.state
    placed = st.on_pending(pending("x", "p0"))[0]
    assert isinstance(placed, Decided)
    assert power.step(T) == []  # the first step: every idle node idle for less than a step
    recs = power.step(T + 600)
    assert {r.action for r in recs} == {"power-down"} and len(recs) == 3
    assert placed.msg.node not in {r.node for r in recs}  # the busy node stays on
    assert recs[0].powered_target == 1 and recs[0].demand_nodes == 1
    assert power.step(T + 900) == []  # half a step later: not due
    assert st.planner.unpowered == {r.node for r in recs}
    for i in range(1, 4):  # the only powered node takes every pod that fits; none goes elsewhere
        out = st.on_pending(pending("x", f"p{i}"))[0]
        assert isinstance(out, Decided) and out.msg.node == placed.msg.node


def test_answers_refusals_late_echoes_and_boots() -> None:
    power = _planning()
    power.step(T)
    down = power.step(T + 600)
    first, second = down[0], down[1]
    power.apply_changed(_answer(first, "off"))
    assert power.apply_changed(_answer(second, "on", reason="node_busy: pods bound")) is True  # given back
    assert power.apply_recommended(second) is False  # its echo, read after the answer: nothing changes
    assert second.node not in power.state.planner.unpowered and first.node in power.state.planner.unpowered
    up = NodePowerRecommended(source="placement/test", emitted_at=T, recommendation_id="up-1", node=first.node,
                              action="power-up", recommended_at=T + 1200, reason="test", powered_target=2,
                              demand_nodes=2)
    power.apply_changed(_answer(up, "booting", ready_at=T + 1800))
    assert first.node in power.state.planner.unpowered  # booting: no pod yet
    assert power.tick(T + 1799) is False
    assert power.tick(T + 1800) is True and first.node not in power.state.planner.unpowered
    counts = power.counts()
    assert counts["refused"] == 1 and counts["off"] == 1 and counts["booting"] == 0


def test_an_unsent_recommendation_gives_the_node_back() -> None:
    power = _planning()
    power.step(T)
    rec = power.step(T + 600)[0]
    power.unsent(rec)
    assert rec.node not in power.state.planner.unpowered


def _forecast(total: list[float], queue: list[float], extra: dict[str, str] | None = None) -> DemandPredicted:
    return DemandPredicted(
        source="forecasting/test", emitted_at=time.time(), cluster="x", model="m", model_version="1",
        issued_at=T, start=T + 600, step_s=600.0, horizon_steps=len(total), quantiles=(0.1, 0.5, 0.9),
        series=(DemandSeries(metric="gpus_requested", labels={"cluster": "x", "queue": "q"},
                             values=(tuple(queue), tuple(queue), tuple(queue))),
                DemandSeries(metric="gpus_requested", labels={"cluster": "x", **(extra or {})},
                             values=(tuple(v - 2 for v in total), tuple(v - 1 for v in total), tuple(total)))))


def test_the_forecast_read_is_the_cluster_totals_p90_at_the_planners_steps() -> None:
    ev = _forecast([4.0, 9.0, 12.0, 3.0], [50.0] * 4)
    assert total_p90_path(ev, 600.0, 3) == [4.0, 9.0, 12.0]
    power = _planning()
    power.apply_demand_forecast(ev)
    assert power.forecast == [4.0, 9.0, 12.0]  # reach: one step booting, the step it serves, one of lead
    power.step(T)
    d = power.last
    assert d is not None and d.forecast_nodes == 3.0  # 12 GPUs on 4-GPU nodes


def test_the_hours_ahead_path_of_the_total_is_not_read() -> None:
    power = _planning()
    power.apply_demand_forecast(_forecast([4.0, 9.0, 12.0, 3.0], [50.0] * 4))
    hours = _forecast([40.0] * 4, [50.0] * 4, extra={"horizon": "hours"})
    assert total_p90_path(hours, 600.0, 3) is None
    power.apply_demand_forecast(hours)
    assert power.forecast == [4.0, 9.0, 12.0]  # the 10-minute path's stands
