"""The service's per-window logic: events say who produced each forecast; drift to persistence and back."""

from __future__ import annotations

import numpy as np
import torch

from gpuaware.forecast.features import Features
from gpuaware.forecast.model import LSTMForecaster, TrainResult, export_onnx
from gpuaware.forecast.runtime import StreamingModel
from gpuaware.forecast.serving import Server

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86_400


def _model(bias: float) -> StreamingModel:
    """A 60-s model whose output is ``bias`` scale units for every row (the head's weights zeroed)."""
    torch.manual_seed(0)
    m = LSTMForecaster([10, 30, 60], [0.5, 0.9], hidden=8, layers=1).eval()
    with torch.no_grad():
        m.head.weight.zero_()
        m.head.bias.fill_(bias)
    blob = export_onnx(TrainResult(m, Features(step_s=60.0, fast_halflife_s=300.0), [10, 30, 60], 0, 0.0, 0.0, []))
    return StreamingModel.load(blob)


def _run(server: Server, steps: range, rng: np.random.Generator) -> list:
    out = []
    for k in steps:
        # two GPUs of one node, noise around 50 %
        utils = 50 + rng.normal(0, 0.5, 2)
        res = server.step(T0 + 60 * k, [("n1", "g0", float(utils[0])), ("n1", "g1", float(utils[1]))])
        out.append((res, server.drift()))
    return out


def test_a_biased_model_drifts_to_persistence_raises_once_and_events_say_so() -> None:
    rng = np.random.default_rng(0)
    server = Server(_model(bias=3.0), "biased@1", drift_halflife=50, drift_min_points=30)
    steps = _run(server, range(200), rng)
    raised = [d for _, ds in steps for d in ds]
    assert len(raised) == 1 and raised[0].raised and raised[0].model_rmse > raised[0].baseline_rmse
    res, _ = steps[-1]
    assert all(r.startswith("model worse than persistence on recent data") for r in res.reasons)
    assert np.allclose(res.values[:, :, 0], res.held[:, None])  # persistence served: its p50 ...
    assert (res.values[:, :, 1] > res.values[:, :, 0]).all()  # ... under a p90 from its own recent errors
    events = server.events(res, "c", T0 + 60 * 200, ["n1"], 0.0, "test")
    assert {(e.model, e.model_version[:41]) for e in events} == {("persistence", "baseline: model worse than persistence on")}


def test_an_unbiased_model_is_served_and_named() -> None:
    rng = np.random.default_rng(1)
    server = Server(_model(bias=0.0), "flat@2", drift_halflife=50, drift_min_points=30)
    steps = _run(server, range(150), rng)
    assert not [d for _, ds in steps for d in ds]  # zero change = persistence exactly: never worse
    res, _ = steps[-1]
    assert res.reasons == [None, None, None]  # two GPUs and the node
    events = server.events(res, "c", T0 + 60 * 150, ["n1"], 0.0, "test")
    assert {(e.model, e.model_version) for e in events} == {("lstm", "flat@2")}
    assert events[0].horizon_steps == 6 and events[0].step_s == 600.0


def test_a_model_of_another_step_is_not_served_and_says_why() -> None:
    torch.manual_seed(0)
    m = LSTMForecaster([1, 3, 6], [0.5, 0.9], hidden=8, layers=1).eval()
    blob = export_onnx(TrainResult(m, Features(step_s=600.0), [1, 3, 6], 0, 0.0, 0.0, []))
    server = Server(StreamingModel.load(blob), "philly@3")
    res = server.step(T0, [("n1", "g0", 10.0)])
    events = server.events(res, "c", T0 + 60, ["n1"], 0.0, "test")
    assert events[0].model == "persistence"
    assert events[0].model_version == "baseline: philly@3's step is 600 s, the rollups' 60 s"


def test_each_gpu_model_gets_a_series_the_mean_of_its_gpus_across_nodes() -> None:
    server = Server(None, "", unusable="no model in the registry")
    models = {"a0": "A100", "a1": "A100", "h0": "H100"}  # "x" has no inventory yet: in no model's series
    window = [("n1", "a0", 20.0), ("n2", "a1", 60.0), ("n2", "h0", 90.0), ("n3", "x", 10.0)]
    for k in range(3):
        res = server.step(T0 + 60 * k, window, models)
    assert server.window_models == {"A100", "H100"}
    (event,) = [e for e in server.events(res, "c", T0 + 180, ["n1", "n2", "n3"], 0.0, "test")
                if e.__class__.__name__ == "DemandPredicted"]
    by_model = {s.labels["gpu_model"]: s.values[0][0] for s in event.series if "gpu_model" in s.labels}
    assert by_model == {"A100": 40.0, "H100": 90.0}  # persistence of each model's mean, not of a node's
    actuals = dict((name, v) for name, _, v in server.actuals(T0 + 180, window, models))
    assert actuals["model/A100"] == 40.0 and actuals["node/n2"] == 75.0 and "model/x" not in actuals
    names = {p.series for p in server.points(res, T0 + 180, ["n1"])}
    assert {"model/A100", "model/H100", "node/n1", "gpu/n1/a0"} <= names and "node/n2" not in names
    # a window where no H100 reported: its series is a gap, and it is not published for that window
    res = server.step(T0 + 240, window[:2], models)
    assert server.window_models == {"A100"}
    (event,) = [e for e in server.events(res, "c", T0 + 300, ["n1", "n2"], 0.0, "test")
                if e.__class__.__name__ == "DemandPredicted"]
    assert {s.labels.get("gpu_model") for s in event.series} == {None, "A100"}


def test_a_series_where_the_model_is_worse_is_served_persistence_by_name_without_the_pooled_alarm() -> None:
    rng = np.random.default_rng(0)
    server = Server(_model(bias=3.0), "biased@1", drift_halflife=50, drift_min_points=10**9, choice_min_points=30)
    steps = _run(server, range(200), rng)
    assert not [d for _, ds in steps for d in ds]  # the pooled drift condition never had its points
    res, _ = steps[-1]
    assert all(r.startswith("model worse than persistence on this series' recent data") for r in res.reasons)
    assert np.allclose(res.values[:, :, 0], res.held[:, None])
    events = server.events(res, "c", T0 + 60 * 200, ["n1"], 0.0, "test")
    assert {e.model for e in events} == {"persistence"}


def test_a_server_publishes_its_own_quantiles_a_p10_the_model_lacks_included() -> None:
    """A model trained for p50 and p90 served as a demand series with p10, p50 and p90: the p10 starts at
    the model's median (no band below before there are errors) and the bands open it below once the
    series has errors; each stored point carries it. A server without ``quantiles`` keeps the model's."""
    rng = np.random.default_rng(2)
    server = Server(_model(bias=0.0), "flat@2", quantiles=(0.1, 0.5, 0.9), band_min_errors=5, band_every=1)
    values = []
    for k in range(80):
        res = server.step_demand(T0 + 60 * k, "c", {"*": float(20 + rng.normal(0, 2.0))})
        values.append(res.values[0])
    assert values[0].shape == (3, 3)  # 3 horizons x (p10, p50, p90)
    assert np.allclose(values[0][:, 0], values[0][:, 1])  # no errors yet: the p10 is the median
    p10, p50, p90 = values[-1].T
    assert (p10 < p50).all() and (p50 < p90).all()  # calibrated on the series' own errors: a band
    event = server.demand_events(res, "c", T0 + 60 * 80, 0.0, "test")[0]
    assert event.quantiles == (0.1, 0.5, 0.9) and len(event.series[0].values) == 3
    points = server.points(res, T0 + 60 * 80, ["c"])
    assert [(p.p10, p.p50, p.p90) for p in points] == [tuple(float(x) for x in v) for v in values[-1]]
    util = Server(_model(bias=0.0), "flat@2")
    res = util.step(T0, [("n1", "g0", 10.0)])
    assert util.quantiles == (0.5, 0.9) and res.values.shape[-1] == 2
    assert all(p.p10 != p.p10 for p in util.points(res, T0 + 60, ["n1"]))  # NaN: stored as NULL
