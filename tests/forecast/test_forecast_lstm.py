"""The LSTM learns what persistence cannot; the exported streaming graph matches torch; bad models and
bad series get a reason and a persistence forecast, never an exception."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from forecast_helpers import square_wave

from gpuaware.forecast.evaluate import evaluate, served
from gpuaware.forecast.features import Features
from gpuaware.forecast.model import (
    LSTMForecaster,
    TrainConfig,
    TrainResult,
    TrainSeries,
    export_onnx,
    predict,
    train,
)
from gpuaware.forecast.runtime import ModelError, StreamingModel, Streams, replay

TINY = TrainConfig(horizons_min=(10, 30, 60), hidden=16, layers=1, window=48, burn_in=12, batch=32,
                   max_iters=250, eval_every=50, lr=1e-2, max_seconds=60)


@pytest.fixture(scope="module")
def square_model() -> tuple[TrainResult, bytes]:
    s = square_wave(2_000)
    result = train([TrainSeries(s, 1_400, 1_700)], TINY)
    return result, export_onnx(result)


def test_lstm_learns_a_square_wave_persistence_cannot(square_model) -> None:
    # period 6 steps of 10 min: 30 min ahead is the other half of the wave, so persistence is off by
    # the full amplitude (RMSE 10) every time; the state can count the phase and be nearly exact
    _, blob = square_model
    s = square_wave(2_000)
    ev = evaluate([(s, 1_400, 1_700, 2_000)], [10, 30, 60], {"lstm": served(StreamingModel.load(blob))})
    rmse = ev.summary()["models"]
    assert rmse["persistence"]["rmse_at"]["30"] == pytest.approx(10.0)
    assert rmse["lstm"]["rmse_at"]["30"] < 2.0
    assert rmse["lstm"]["rmse_at"]["10"] < 0.5 * rmse["persistence"]["rmse_at"]["10"]


def test_onnx_streaming_matches_torch_within_1e4(square_model) -> None:
    result, blob = square_model
    s = square_wave(500, noise=0.3, seed=3)
    want = predict(result.model, result.features, s, len(s))           # torch, the whole sequence at once
    got, reasons = replay(StreamingModel.load(blob), [s])[0]             # onnxruntime, one step at a time
    model_rows = np.array([r is None for r in reasons])
    assert model_rows.sum() > 400
    assert np.abs(want[model_rows] - got[model_rows]).max() <= 1e-4


def test_onnx_parity_with_an_untrained_2x64_model_over_a_batch() -> None:
    torch.manual_seed(7)
    model = LSTMForecaster([1, 3, 6], [0.5, 0.9], hidden=64, layers=2)
    result = TrainResult(model.eval(), Features(step_s=600.0), [1, 3, 6], 0, 0.0, float("nan"), [])
    runtime = StreamingModel.load(export_onnx(result))
    series = [square_wave(300, noise=1.0, seed=k) for k in range(4)]
    for s, (got, reasons) in zip(series, replay(runtime, series), strict=True):
        want = predict(model, result.features, s, len(s))
        rows = np.array([r is None for r in reasons])  # the others are persistence (cold start)
        assert rows.sum() > 250
        assert np.abs(want[rows] - got[rows]).max() <= 1e-4
    assert (got[..., 1] >= got[..., 0]).all()  # p90 >= p50 by construction


@pytest.mark.parametrize("blob, reason", [
    (b"", "empty model file"),
    (b"\x08\x07garbage-not-a-protobuf" * 10, "onnxruntime cannot load the model"),
])
def test_a_corrupt_model_file_is_a_model_error_with_the_reason(blob: bytes, reason: str) -> None:
    with pytest.raises(ModelError, match=reason):
        StreamingModel.load(blob)


def test_a_truncated_model_file_is_a_model_error(square_model) -> None:
    _, blob = square_model
    with pytest.raises(ModelError):
        StreamingModel.load(blob[: len(blob) // 2])


def test_bad_series_get_persistence_and_a_reason(square_model) -> None:
    _, blob = square_model
    model = StreamingModel.load(blob)
    need = model.min_history
    streams = Streams(model, 3)
    t0 = 1_700_000_000.0
    rng = np.random.default_rng(0)
    for k in range(model.constant_after + 5):  # a day of 10-minute steps: long enough to be "constant"
        # series 0: healthy noise; 1: constant 4; 2: only NaN
        r = streams.step(np.array([rng.normal(10, 2), 4.0, np.nan]), t0 + 600 * k)
        if k == 0:
            assert r.reasons[0].startswith("too little history")
    assert r.reasons[0] is None
    assert r.reasons[1].startswith("constant series") and (r.values[1] == 4.0).all()
    assert r.reasons[2] == "no observed values" and np.isfinite(r.values).all()
    # a gap in a healthy series: the last value is held, then too many gaps -> persistence with a reason
    for k in range(need):
        r = streams.step(np.array([np.nan, 4.0, np.nan]), t0 + 600 * (model.constant_after + 5 + k))
    assert r.reasons[0] is not None and "gaps" in r.reasons[0]
    assert np.isfinite(r.values[0]).all()


def test_without_a_model_every_row_is_persistence_and_says_so() -> None:
    streams = Streams(None, 2, step_s=60.0, horizons=[10], quantiles=[0.5, 0.9])
    r = streams.step(np.array([3.0, np.nan]), 0.0)
    assert r.reasons == ["no model in the registry"] * 2
    assert r.values[0].tolist() == [[3.0, 3.0]]


def test_training_refuses_too_short_series() -> None:
    s = square_wave(40)
    with pytest.raises(ValueError, match="burn-in"):
        train([TrainSeries(s, 10, 30)], dataclasses.replace(TINY, burn_in=20))
