"""Forecast head-room: placement keeps free the latency-sensitive classes' forecast p90 (its peak over
the next 30 minutes of the pods' own clock, less what those classes hold), holding back only work that
can wait - deferrable or checkpointable pods - never a latency-sensitive pod or one that cannot wait,
and places what it held back once the forecast shrinks the room. PlacementState without a server."""

from __future__ import annotations

import time

from placement_service_helpers import inventory, pending

from gpuaware.placement import POLICIES, ForecastHeadroom, PodRequest
from gpuaware.schemas import LATENCY_SENSITIVE, DemandPredicted, DemandSeries, PodFinished, PodOutcome
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable

CLASSES = frozenset({"inference-critical", "interactive"})
T = 1_800_000_000.0


def _state(headroom: ForecastHeadroom) -> PlacementState:
    st = PlacementState(cluster_name="c", source="placement/test", policy_name="WasteGradient",
                        policy_config=POLICIES["WasteGradient"], permits=(headroom,))
    st.apply_inventory(inventory("c", "a", gpus=4))
    st.apply_inventory(inventory("c", "b", gpus=4))
    return st


def _forecast(p90: list[float], *, klass: str = LATENCY_SENSITIVE, cluster: str = "c",
              extra: dict[str, str] | None = None) -> DemandPredicted:
    """A demand forecast on a 10-minute grid (six steps), p50 one GPU under the p90."""
    return DemandPredicted(
        source="forecasting/test", emitted_at=time.time(), cluster=cluster, model="persistence", model_version="b",
        issued_at=T, start=T + 600, step_s=600.0, horizon_steps=6, quantiles=(0.5, 0.9),
        series=(DemandSeries(metric="gpus_requested", labels={"cluster": cluster, "class": klass, **(extra or {})},
                             values=(tuple(max(0.0, v - 1) for v in p90), tuple(p90))),))


def _fill(st: PlacementState, n: int) -> None:
    for i in range(n):
        assert isinstance(st.on_pending(pending("c", f"fill{i}", num_gpu=1))[0], Decided)


def test_the_room_is_the_p90_peak_within_thirty_minutes_less_what_the_classes_hold() -> None:
    room = ForecastHeadroom(CLASSES, horizon_s=1800.0)
    st = _state(room)
    assert isinstance(st.on_pending(pending("c", "inf", num_gpu=1, priority_class="interactive"))[0], Decided)
    # steps at +10, +20, +30 min count; the 6-GPU peak at +40 min is past the horizon
    assert not st.apply_demand_forecast(_forecast([2.0, 4.0, 3.0, 6.0, 6.0, 6.0]), room)
    assert room.forecast_gpus == 4.0 and room.held_milli == 1000 and room.room_milli == 3000
    # another cluster's forecast, a queue's series: not ours
    assert not st.apply_demand_forecast(_forecast([9.0] * 6, cluster="other"), room)
    assert not st.apply_demand_forecast(_forecast([9.0] * 6, klass="batch"), room)
    assert room.room_milli == 3000
    assert st.apply_demand_forecast(_forecast([1.0] * 6), room)  # shrank: the caller retries
    assert room.room_milli == 0


def test_the_hours_ahead_path_is_not_taken_for_the_head_room() -> None:
    room = ForecastHeadroom(CLASSES, horizon_s=1800.0)
    st = _state(room)
    assert not st.apply_demand_forecast(_forecast([2.0] * 6), room)
    assert room.forecast_gpus == 2.0
    assert not st.apply_demand_forecast(_forecast([9.0] * 6, extra={"horizon": "hours"}), room)
    assert room.forecast_gpus == 2.0  # the class's hours-ahead series: left alone


def test_only_work_that_can_wait_is_held_back_and_it_is_placed_when_the_room_shrinks() -> None:
    room = ForecastHeadroom(CLASSES)
    st = _state(room)
    _fill(st, 5)  # 3 of 8 GPUs free
    st.apply_demand_forecast(_forecast([3.0] * 6), room)  # keep 3 free
    assert room.room_milli == 3000
    for uid, kw in (("defer", {"deferrable": True}), ("ckpt", {"checkpointable": True})):
        held = st.on_pending(pending("c", uid, num_gpu=1, **kw))  # would leave 2 free
        assert isinstance(held[0], Unschedulable) and held[0].msg.reason.startswith("forecast_headroom")
    # neither a pod that cannot wait nor a latency-sensitive one is ever held back
    assert isinstance(st.on_pending(pending("c", "plain", num_gpu=1))[0], Decided)
    assert isinstance(st.on_pending(pending("c", "inf", num_gpu=1, deferrable=True,
                                            priority_class="inference-critical"))[0], Decided)
    assert room.held_back == 2
    # the forecast shrinks to 2 GPUs, 1 held by the classes: 1 kept free. One GPU is free: nothing fits yet
    assert st.apply_demand_forecast(_forecast([2.0] * 6), room) and room.room_milli == 1000
    assert not [o for o in st.retry()[0] if isinstance(o, Decided)]
    st.apply_finished(PodFinished(source="binder", emitted_at=time.time(), cluster="c", pod_uid="plain",
                                  pod_name="plain", namespace="ns", outcome=PodOutcome.SUCCEEDED,
                                  finished_at=time.time()))
    again, _ = st.retry()  # two free: the first held back takes one, the second would take the room
    assert [o.msg.pod_uid for o in again if isinstance(o, Decided)] == ["defer"]
    assert st.ledger.pods["ckpt"].reason.startswith("forecast_headroom")
    st.ledger.check()


def test_no_forecast_no_room() -> None:
    room = ForecastHeadroom(CLASSES)
    st = _state(room)
    _fill(st, 7)
    assert isinstance(st.on_pending(pending("c", "defer", num_gpu=1, deferrable=True))[0], Decided)
    assert room.held_back == 0


def test_the_room_is_kept_in_whole_gpus_slivers_on_shared_gpus_do_not_count() -> None:
    room = ForecastHeadroom(CLASSES)
    st = _state(room)
    _fill(st, 4)
    for i in range(3):  # one GPU each (two do not fit one): three slivers of 300 thousandths stay free
        assert isinstance(st.on_pending(pending("c", f"share{i}", num_gpu=1, gpu_milli=700))[0], Decided)
    st.apply_demand_forecast(_forecast([0.5] * 6), room)  # half a GPU kept: 900 free thousandths would cover it
    held = st.on_pending(pending("c", "defer", num_gpu=1, deferrable=True))  # takes the last whole GPU
    assert isinstance(held[0], Unschedulable) and held[0].msg.reason.startswith("forecast_headroom")


def test_a_retry_pass_leaves_work_the_room_certainly_holds_back_parked_without_a_cycle() -> None:
    room = ForecastHeadroom(CLASSES)
    st = _state(room)
    _fill(st, 5)  # 3 of 8 GPUs free
    st.apply_demand_forecast(_forecast([3.0] * 6), room)
    for uid in ("defer-0", "defer-1"):
        assert isinstance(st.on_pending(pending("c", uid, num_gpu=1, deferrable=True))[0], Unschedulable)
    assert room.held_back == 2
    assert st.ledger.cluster is not None
    snap = st.ledger.cluster.snapshot()
    assert room.certainly_denied(PodRequest(name="x", cpu_milli=1, num_gpu=1, gpu_milli=1000, deferrable=True), snap)
    assert not room.certainly_denied(PodRequest(name="x", cpu_milli=1, num_gpu=1, gpu_milli=500, deferrable=True), snap)  # may share
    for _ in range(3):  # nothing changed: no pass runs their cycles again
        assert not [o for o in st.retry()[0] if isinstance(o, Decided)]
    assert room.held_back == 2
    st.apply_demand_forecast(_forecast([2.0] * 6), room)  # the room shrinks to 2: one may go
    placed = [o.msg.pod_uid for o in st.retry()[0] if isinstance(o, Decided)]
    assert placed == ["defer-0"] and room.held_back == 3  # the second was tried and held back once
