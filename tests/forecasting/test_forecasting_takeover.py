"""A new forecasting leader publishes what it kept from its predecessor's last window on, path by path:
the demand subject carries the minute path (the pod events' clock), the hours path and the utilisation
model's per-node aggregates (the telemetry's clock), so the last forecast read there marks only its own
path. Before, one mark per subject let a per-node aggregate, later on its clock, drop every kept minute
of demand: the minutes closed while nobody led were lost."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import pytest

from gpuaware.schemas import DemandPredicted, DemandSeries, GpuForecast, GpuUtilPredicted
from gpuaware.services.forecasting import service as service_module
from gpuaware.services.forecasting.service import DEMAND_OUT, GPU_OUT, ForecastService
from gpuaware.services.forecasting.settings import ForecastingSettings

CLUSTER = "default"
VIRTUAL = 1_767_225_600.0
"""the pod events' clock (the twin's day)"""
WALL = 1_795_000_000.0
"""the telemetry's clock, far later"""
SCALE = 2160.0


def demand(origin: float, step_s: float) -> DemandPredicted:
    return DemandPredicted(source="forecasting/b", emitted_at=WALL, cluster=CLUSTER, model="m", model_version="1",
                           issued_at=origin, start=origin + step_s, step_s=step_s, horizon_steps=1, quantiles=(0.5,),
                           series=(DemandSeries(metric="gpus_requested", values=((1.0,),)),))


def gpu(origin: float) -> GpuUtilPredicted:
    return GpuUtilPredicted(source="forecasting/b", emitted_at=WALL, cluster=CLUSTER, model="m", model_version="1",
                            issued_at=origin, start=origin + 600 / SCALE, step_s=600 / SCALE, horizon_steps=1,
                            quantiles=(0.5,), node="n1", gpus=(GpuForecast(gpu_uuid="GPU-1", values=((5.0,),)),))


async def test_a_mark_on_the_demand_subject_holds_for_its_own_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = ForecastService(ForecastingSettings(time_scale=SCALE), js=None, pool=None, instance="b")
    demand_subject, gpu_subject = DEMAND_OUT.at(CLUSTER).subject, GPU_OUT.at(CLUSTER, "n1").subject
    minutes = [demand(VIRTUAL + 60.0 * m, 600.0) for m in range(1, 6)]
    node_aggregates = [demand(WALL + 0.5 * k, 600 / SCALE) for k in range(3)]
    gpus = [gpu(WALL + 0.5 * k) for k in range(3)]
    now = time.monotonic()
    svc.kept = deque((now, demand_subject if isinstance(ev, DemandPredicted) else gpu_subject, ev)
                     for ev in [*minutes, *node_aggregates, *gpus])

    async def marks() -> dict[tuple[str, float], float]:  # the stream's last forecast per subject, as read
        return {(demand_subject, 600 / SCALE): WALL + 0.5, (gpu_subject, 600 / SCALE): WALL + 0.5}

    published: list[tuple[str, Any, str | None]] = []

    async def publish(_js: Any, channel: Any, ev: Any, *, msg_id: str | None = None) -> None:
        published.append((channel.subject, ev, msg_id))

    monkeypatch.setattr(svc, "_marks", marks)
    monkeypatch.setattr(service_module.bus, "publish", publish)
    await svc._publish_kept()
    sent = [ev for _s, ev, _id in published]
    assert [ev for ev in sent if ev.step_s == 600.0] == minutes  # no mark on the minute path: every kept minute
    assert [ev for ev in sent if isinstance(ev, DemandPredicted) and ev.step_s != 600.0] == node_aggregates[1:]
    assert [ev for ev in sent if isinstance(ev, GpuUtilPredicted)] == gpus[1:]  # from the predecessor's last on
    assert all(msg_id and msg_id.startswith("fc/") for _s, _ev, msg_id in published)
    assert svc.publishing and svc.takeovers == [{"kept": 11, "published": 9, "marks": 2}]


async def test_a_standby_keeps_the_minutes_it_replays_and_a_leader_does_not_publish_them_again() -> None:
    from gpuaware.forecast import DemandRow

    standby = ForecastService(ForecastingSettings(hours_ahead=False), js=None, pool=None, instance="b")
    await standby._demand_step(DemandRow(start=VIRTUAL, demand={"team-a": 2.0}), publish=False)
    assert [ev.issued_at for _t, _s, ev in standby.kept] == [VIRTUAL + 60.0]  # a minute the leader may never reach

    leader = ForecastService(ForecastingSettings(hours_ahead=False), js=None, pool=None, instance="a")
    leader.publishing = True
    await leader._demand_step(DemandRow(start=VIRTUAL, demand={"team-a": 2.0}), publish=False)
    assert not leader.kept and leader.counts["demand_published"] == 0 and leader.counts["demand_minutes"] == 1
