"""The forecasting service over real NATS and PostgreSQL: rollups in, forecasts out, saying who made them;
the baseline (and why) when the registry is empty or its model unusable; hot reload of a new version."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import numpy as np
import psycopg
import pytest
from forecasting_helpers import T0, eventually, forecasting, model_bytes, recorder

from gpuaware import bus, tsdb
from gpuaware.forecast import registry
from gpuaware.forecast.runtime import ModelError
from gpuaware.runtime import SettingsError
from gpuaware.schemas import FORECAST_DURATION, DurationReply, DurationRequest
from gpuaware.services.forecasting.settings import ForecastingSettings

pytestmark = pytest.mark.timeout(120)


async def test_empty_registry_serves_persistence_and_says_so(nats_proc, fresh_database_url: str, cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        for minute, utils in enumerate([[10.0, 50.0], [20.0, 60.0], [30.0, 70.0]]):
            await rec.rollup("node-a", minute, utils)
        # windows 0 and 1 close when the next one starts, window 2 after flush_s
        await eventually(lambda: len(rec.gpu) >= 3 and len(rec.demand) >= 3, what="three windows of forecasts")
        last = rec.gpu[-1]
        assert last.model == "persistence" and last.model_version == "baseline: no model in the registry"
        assert last.node == "node-a" and last.quantiles == (0.5, 0.9) and last.horizon_steps == 6
        by_gpu = {g.gpu_uuid: g.values for g in last.gpus}
        assert by_gpu["GPU-node-a-0"] == ((30.0,) * 6, (30.0,) * 6)  # the last value held, both quantiles
        assert rec.demand[-1].series[0].labels["node"] == "node-a" and rec.demand[-1].series[0].values[0][0] == 50.0
        assert svc.stats().unusable == "no model in the registry"
    # every forecast stored, and the ones whose target window arrived carry the actual
    with psycopg.connect(fresh_database_url) as conn:
        n, models, p10s = conn.execute("SELECT count(*), array_agg(DISTINCT model), count(p10) "
                                       "FROM forecast_points").fetchone()
    assert n == 3 * 3 * 3 and models == ["persistence"]  # 3 windows x 3 series x 3 horizons
    assert p10s == 0  # utilisation publishes p50 and p90 only: no p10 stored


async def test_a_twin_on_a_scaled_clock_gets_per_gpu_forecasts_from_its_samples(
        nats_proc, fresh_database_url: str, cluster: str) -> None:
    # time_scale 600: a GPU-minute lasts 0.1 s of the telemetry's clock, so a one-minute rollup would span
    # ten hours of the GPUs' lives. Samples 0.25 s apart each close a window of their own; rollups are
    # ignored; the path is on the telemetry's clock (600 GPU-seconds = 1 s); nothing is stored.
    scale = 600.0
    async with recorder(nats_proc.url, cluster) as rec, forecasting(
            nats_proc.url, fresh_database_url, cluster, time_scale=scale) as svc:
        await rec.rollup("node-a", 0, [99.0, 99.0])  # not a GPU-minute: no forecast from it
        t0 = time.time()
        for k, utils in enumerate([[10.0, 50.0], [20.0, None], [30.0, 70.0]]):
            await rec.sample("node-a", t0 + 0.25 * k, utils, seq=k)
        await eventually(lambda: len(rec.gpu) >= 3, what="a forecast per sampled window")
        first, last = rec.gpu[0], rec.gpu[-1]
        assert [ev.model for ev in rec.gpu] == ["persistence"] * len(rec.gpu)
        assert {g.gpu_uuid: g.values[1][0] for g in first.gpus} == {"GPU-node-a-0": 10.0, "GPU-node-a-1": 50.0}
        assert {g.gpu_uuid: g.values[1][0] for g in last.gpus} == {"GPU-node-a-0": 30.0, "GPU-node-a-1": 70.0}
        assert last.step_s == 600.0 / scale and last.start == pytest.approx(last.issued_at + 1.0)
        window_end = (np.floor((t0 + 0.5) * scale / 60) * 60 + 60) / scale  # the last sample's GPU-minute
        assert last.issued_at == pytest.approx(window_end, abs=1e-6)
        assert svc.stats().windows == 3 and svc.stats().late_windows == 0
    with psycopg.connect(fresh_database_url) as conn:
        assert conn.execute("SELECT count(*) FROM forecast_points").fetchone() == (0,)


async def test_a_twins_scrape_round_arriving_out_of_order_is_stepped_in_order_and_lost_nowhere(
        nats_proc, fresh_database_url: str, cluster: str) -> None:
    # one scrape round straddles GPU-minutes (0.1 s each at 600x) and its samples arrive in any order:
    # node-b's earlier minute arrives after node-a's later one; both count, stepped oldest first
    scale = 600.0
    async with recorder(nats_proc.url, cluster) as rec, forecasting(
            nats_proc.url, fresh_database_url, cluster, time_scale=scale) as svc:
        t0 = float((np.floor(time.time() / 0.1) + 0.5) * 0.1)  # mid-window
        await rec.sample("node-a", t0 + 0.1, [40.0])
        await rec.sample("node-b", t0, [20.0])
        await eventually(lambda: len(rec.gpu) >= 2, what="both nodes' forecasts")
        assert [(ev.node, ev.gpus[0].values[1][0]) for ev in rec.gpu] == [("node-b", 20.0), ("node-a", 40.0)]
        assert rec.gpu[0].issued_at < rec.gpu[1].issued_at
        assert (svc.stats().windows, svc.stats().late_windows) == (2, 0)


async def test_gpu_model_series_from_the_inventories(nats_proc, fresh_database_url: str, cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec:
        await rec.inventory("node-a", ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])
        await rec.inventory("node-b", ["NVIDIA A100-SXM4-80GB"])
        async with forecasting(nats_proc.url, fresh_database_url, cluster):  # the inventories replayed at start
            for minute in range(3):
                await rec.rollup("node-a", minute, [10.0 + minute, 80.0])
                await rec.rollup("node-b", minute, [30.0 + minute])
            await eventually(lambda: any("gpu_model" in s.labels for ev in rec.demand for s in ev.series),
                             what="a GPU-model forecast")
            await eventually(lambda: len(rec.demand) >= 3, what="three windows of forecasts")
    last = {s.labels["gpu_model"]: s.values[0][0] for s in rec.demand[-1].series if "gpu_model" in s.labels}
    assert last == {"NVIDIA A100-SXM4-80GB": 22.0, "NVIDIA H100 80GB HBM3": 80.0}  # (12 + 32) / 2, and one H100
    with psycopg.connect(fresh_database_url) as conn:
        names = {r[0] for r in conn.execute("SELECT DISTINCT series FROM forecast_points")}
    assert {"model/NVIDIA A100-SXM4-80GB", "model/NVIDIA H100 80GB HBM3"} <= names


async def test_a_registry_model_is_served_named_and_hot_reloaded(nats_proc, fresh_database_url: str, cluster: str) -> None:
    await tsdb.migrate(fresh_database_url)
    async with await tsdb.connect(fresh_database_url) as conn:
        assert await registry.publish_async(conn, "test", model_bytes(0), {"rmse_at": {"30": 1.0}}) == 1
        with pytest.raises(ModelError):
            await registry.publish_async(conn, "test", b"corrupt")  # refused before it reaches the registry
        assert (await registry.latest_async(conn)).version == 1
    rng = np.random.default_rng(0)
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        assert svc.stats().model == "test@1"
        for minute in range(14):
            await rec.rollup("node-a", minute, list(rng.uniform(20, 80, 2)))
        await eventually(lambda: any(e.model == "lstm" for e in rec.gpu), what="a forecast from the model")
        early = [e for e in rec.gpu if e.model != "lstm"]
        assert early and all(e.model_version.startswith("baseline: too little history") for e in early)
        served = next(e for e in rec.gpu if e.model == "lstm")
        assert served.model_version == "test@1"
        assert all(np.isfinite(g.values).all() and all(b >= a for a, b in zip(*g.values, strict=True))
                   for g in served.gpus)  # p90 >= p50 at every step
        # a new version: served at the next poll, its rows cold (persistence) until warm again
        async with await tsdb.connect(fresh_database_url) as conn:
            await registry.publish_async(conn, "test", model_bytes(1))
        await eventually(lambda: svc.stats().model == "test@2", what="hot reload of version 2")
        seen = len(rec.gpu)
        for minute in range(14, 30):
            await rec.rollup("node-a", minute, list(rng.uniform(20, 80, 2)))
        await eventually(lambda: any(e.model_version == "test@2" for e in rec.gpu[seen:]), what="version 2 serving")
        assert svc.stats().reloads == 2


async def test_an_unusable_registry_model_falls_back_with_the_reason(nats_proc, fresh_database_url: str,
                                                                    cluster: str) -> None:
    await tsdb.migrate(fresh_database_url)
    with psycopg.connect(fresh_database_url) as conn:  # written around registry.publish, as a broken tool might
        conn.execute("INSERT INTO forecast_models (name, step_s, sha256, onnx) VALUES ('bad', 60, 'x', %s)",
                     (b"\x00not onnx",))
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster):
        await rec.rollup("node-b", 0, [5.0])
        await rec.rollup("node-b", 1, [6.0])
        await eventually(lambda: bool(rec.gpu), what="a forecast")
        assert rec.gpu[0].model == "persistence"
        assert rec.gpu[0].model_version.startswith("baseline: bad@1 unusable: onnxruntime cannot load the model")


async def test_demand_per_queue_from_pod_events(nats_proc, fresh_database_url: str, cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        await rec.pending("a", "team-a", 4, 0.0)
        await rec.pending("b", "team-b", 2, 0.5)
        await rec.finished("a", 2.2)  # closes minutes 0 and 1 (a, b counted), then a leaves
        await rec.pending("c", "team-b", 1, 3.1, priority_class="interactive")  # closes minute 2 (b only)
        await rec.pending("d", "team-b", 1, 11.5)  # closes minutes 3..10 (b and c)
        await eventually(lambda: len(rec.demand_of(None)) >= 11, what="eleven minutes of demand forecasts")
        total, team_a, team_b = rec.demand_of(None), rec.demand_of("team-a"), rec.demand_of("team-b")
        # persistence (no demand model): each minute's forecast is its demand, issued at the minute's end
        assert [(t - T0, v) for t, _, v in total[:4]] == [(60.0, 6.0), (120.0, 6.0), (180.0, 2.0), (240.0, 3.0)]
        assert [v for _, _, v in team_a[:4]] == [4.0, 4.0, 0.0, 0.0]
        assert [v for _, _, v in team_b[:4]] == [2.0, 2.0, 2.0, 3.0]
        # c is latency-sensitive: its own series from the minute it arrived, in neither queue's twice
        assert [(t - T0, v) for t, _, v in rec.demand_of(None, "latency-sensitive")[:2]] == [(240.0, 1.0), (300.0, 1.0)]
        assert {m for _, m, _ in total} == {"persistence"}
        # demand publishes a p10 beside the p50 and p90 (the same value until the series has errors)
        assert {ev.quantiles for ev in rec.demand if ev.series[0].metric == "gpus_requested"} == {(0.1, 0.5, 0.9)}
        stats = svc.stats()
        assert stats.demand_minutes == 11 and stats.demand_series == 4
        assert stats.demand_unusable == "no 'demand' model in the registry"
        # a minute's points are stored after its forecasts go out: the last one's before the service stops
        await eventually(lambda: _stored(fresh_database_url, "horizon_s <= 3600") >= 123, what="the points stored")
    with psycopg.connect(fresh_database_url) as conn:
        rows = conn.execute("SELECT series, count(*) FROM forecast_points WHERE series LIKE 'demand/%%' "
                            "AND horizon_s <= 3600 GROUP BY 1 ORDER BY 1").fetchall()  # the minute path's
        # the 10-minute forecast issued at minute 0's end (6 GPUs held) against the demand 10 minutes later
        point = conn.execute("SELECT p50, actual FROM forecast_points WHERE series = %s AND horizon_s = 600 AND "
                             "issued_at = to_timestamp(%s)", (f"demand/{cluster}/*", T0 + 60.0)).fetchone()
        bands = conn.execute("SELECT count(*), count(p10), count(*) FILTER (WHERE p10 <= p50 AND p50 <= p90) "
                             "FROM forecast_points WHERE series LIKE 'demand/%%' AND horizon_s <= 3600").fetchone()
    assert rows == [(f"demand/{cluster}/*", 33), (f"demand/{cluster}/class:latency-sensitive", 24),
                    (f"demand/{cluster}/team-a", 33), (f"demand/{cluster}/team-b", 33)]
    assert point == (6.0, 3.0)
    assert bands == (123, 123, 123)  # every demand point stored its p10, never above the p50


async def test_the_demand_model_serves_demand_only(nats_proc, fresh_database_url: str, cluster: str) -> None:
    await tsdb.migrate(fresh_database_url)
    async with await tsdb.connect(fresh_database_url) as conn:
        await registry.publish_async(conn, "demand", model_bytes(2))
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        stats = svc.stats()
        assert stats.demand_model == "demand@1" and stats.model == ""  # not taken for utilisation
        for minute in range(16):
            await rec.pending(f"p{minute}", "q", 1 + minute % 3, minute + 0.5)
        await eventually(lambda: any(m == "lstm" for _, m, _ in rec.demand_of(None)), what="a demand model forecast")
        served = [ev for ev in rec.demand if ev.model == "lstm"]
        assert all(ev.model_version == "demand@1" for ev in served)
        # a model trained for p50 and p90 still publishes the p10 the demand series carry, never above its p50
        assert all(ev.quantiles == (0.1, 0.5, 0.9) for ev in served)
        assert all(p10 <= p50 <= p90 for ev in served for s in ev.series
                   for p10, p50, p90 in zip(*s.values, strict=True))


async def test_job_durations_are_learnt_from_finished_pods_and_served(nats_proc, fresh_database_url: str,
                                                                       cluster: str) -> None:
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc, \
            bus.connected(nats_proc.url, name="asker") as nc:
        def ask(name: str, queue: str = "team-a", gpus: int = 2, on: str = cluster) -> Any:
            return bus.request(nc, FORECAST_DURATION, DurationRequest(
                source="test", emitted_at=time.time(), cluster=on, pod_name=name, queue=queue, num_gpu=gpus),
                DurationReply, timeout=5.0)

        nothing = await ask("train-bert-run1")
        assert (nothing.seconds, nothing.basis, nothing.runs_observed) == (3600.0, "default", 0)  # conservative
        # two runs of a recurring job (run tokens differ) and one short job of the same queue
        for i, (start, end) in enumerate([(0, 30), (40, 70)]):
            await rec.pending(f"u{i}", "team-a", 2, start, name=f"train-bert-run{i + 1}")
            await rec.finished(f"u{i}", end, started=start, name=f"train-bert-run{i + 1}")
        await rec.pending("u9", "team-a", 1, 71, name="notebook-x")
        await rec.finished("u9", 73, started=71, name="notebook-x")
        await eventually(lambda: svc.stats().runtimes_learnt == 3, what="three runtimes learnt")
        again = await ask("train-bert-run3")
        assert again.basis == "recurring (2 runs)" and again.runs_observed == 3
        assert 1500 < again.seconds < 1900, again  # 30 min twice, shrunk a little toward the queue's p75
        novel = await ask("eval-gpt-run1")
        assert novel.basis == "novel: tenant p75" and novel.seconds == pytest.approx(1800.0, rel=0.01)
        other = await ask("eval-gpt-run1", queue="team-z")
        assert other.basis == "novel: cluster p75"
        with pytest.raises(bus.ServiceError, match="serves cluster"):
            await ask("train-bert-run3", on="elsewhere")
    assert svc.jobs == {}  # every pod it followed has left


def _stored(url: str, where: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM forecast_points WHERE series LIKE 'demand/%%' AND {where}").fetchone()
    return int(row[0]) if row else 0


async def test_demand_hours_ahead_are_published_apart_labelled_and_stored(nats_proc, fresh_database_url: str,
                                                                          cluster: str) -> None:
    """Every 10 minutes of the pod events' clock, the demand series hours ahead: persistence (too little
    history), an hourly path to 12 h, each series labelled ``horizon``; stored at 3, 6 and 12 h."""
    boundaries = [m for m in range(25) if (T0 + 60 * (m + 1)) % 600 == 0]  # minutes that end on one
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster):
        await rec.pending("a", "team-a", 4, 0.0)
        await rec.pending("c", "team-b", 1, 0.5, priority_class="interactive")
        await rec.pending("d", "team-b", 2, 25.5)  # closes minutes 0..24: two or three 10-minute boundaries
        await eventually(lambda: len(rec.hours()) >= len(boundaries), what="the hours-ahead forecasts")
        await eventually(lambda: len(rec.demand_of(None)) >= 25, what="the minute path's")
        hours = rec.hours()
        assert [ev.issued_at for ev in hours] == [T0 + 60 * (m + 1) for m in boundaries]
        assert [(t, v) for t, _, v in rec.demand_of(None)][:2] == [(T0 + 60, 5.0), (T0 + 120, 5.0)]  # not mixed in
        for ev in hours:
            assert (ev.model, ev.model_version) == ("persistence", "baseline: too little history: 0 h (the ridge needs 72)")
            assert (ev.step_s, ev.horizon_steps, ev.start, ev.quantiles) == (3600.0, 12, ev.issued_at + 3600.0,
                                                                             (0.1, 0.5, 0.9))
            assert {s.labels.get("horizon") for s in ev.series} == {"hours"}
        last = hours[-1]
        by = {(s.labels.get("queue"), s.labels.get("class")): s.values[1] for s in last.series}
        assert by == {(None, None): (5.0,) * 12, ("team-a", None): (4.0,) * 12, ("team-b", None): (1.0,) * 12,
                      (None, "latency-sensitive"): (1.0,) * 12}
        n = len(boundaries)
        await eventually(lambda: _stored(fresh_database_url, "horizon_s > 3600") >= 12 * n, what="the points stored")
    with psycopg.connect(fresh_database_url) as conn:
        rows = conn.execute("SELECT horizon_s, count(*), count(*) FILTER (WHERE model = 'persistence' AND p50 = 5) "
                            "FROM forecast_points WHERE series = %s AND horizon_s > 3600 GROUP BY 1 ORDER BY 1",
                            (f"demand/{cluster}/*",)).fetchall()
    assert rows == [(10800.0, n, n), (21600.0, n, n), (43200.0, n, n)]


def test_hours_ahead_settings_refuse_what_they_cannot_forecast() -> None:
    base = {"cluster": "c", "instance_id": "f1"}
    assert msgspec.convert({**base, "hours_horizons": "1, 6,24"}, ForecastingSettings).hours_horizon_list() == (1, 6, 24)
    for bad in ({"hours_horizons": "6,3"}, {"hours_horizons": "0"}, {"hours_horizons": "1.5"},
                {"hours_horizons": ""}, {"hours_history_days": 0.5}):
        with pytest.raises((SettingsError, msgspec.ValidationError)):
            msgspec.convert({**base, **bad}, ForecastingSettings)
    assert msgspec.convert({**base, "hours_ahead": False, "hours_horizons": "x"}, ForecastingSettings)
