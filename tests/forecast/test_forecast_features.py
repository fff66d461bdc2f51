"""The compiled block computation of the LSTM's inputs equals ``Features.update`` run step by step:
training (blocks) and the streaming service (one step per rollup) see the same rows."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.forecast.features import FEATURES, Features, FeatureState, compute


def _stepwise(features: Features, values: np.ndarray, start: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, steps = values.shape
    state = FeatureState.zeros(n)
    x = np.empty((n, steps, len(FEATURES)), dtype=np.float32)
    scale = np.empty((n, steps))
    held = np.empty((n, steps))
    for k in range(steps):
        x[:, k], scale[:, k], held[:, k] = features.update(state, values[:, k], start + k * features.step_s)
    return x, scale, held


@pytest.mark.parametrize("step_s", [60.0, 600.0, 3600.0])
def test_block_equals_step_by_step(step_s: float) -> None:
    rng = np.random.default_rng(int(step_s))
    values = rng.poisson(20, (3, 3_000)).astype(np.float64) * rng.choice([1.0, 10.0, 0.1], (3, 1))
    values[0, :50] = np.nan  # a series that starts late
    values[1, rng.random(3_000) < 0.2] = np.nan  # gaps: held values, observed = 0
    values[2, 1_000:1_400] = np.nan  # a long outage
    values[2, 2_000:2_010] = 5_000.0  # a burst: clipped features
    features = Features(step_s=step_s, floor=0.5)
    start = 1_767_225_600.0 + 17 * step_s
    block, stepwise = compute(features, values, start), _stepwise(features, values, start)
    for got, want in zip(block, stepwise, strict=True):
        np.testing.assert_array_equal(got, want)
    assert np.abs(block[0][..., :3]).max() == pytest.approx(10.0)  # the clip was exercised


def test_an_all_missing_series_is_zeros_at_the_floor() -> None:
    x, scale, held = compute(Features(step_s=60.0), np.full((1, 20), np.nan), 0.0)
    assert (x[..., :4] == 0).all() and (scale == 1.0).all() and (held == 0).all()
