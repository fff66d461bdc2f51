"""Baselines as rolling-origin forecasts, and the Philly check that the data handling is the published one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from forecast_helpers import shared_data

from gpuaware.forecast import Series, rmse, smape
from gpuaware.forecast.baselines import ets, ewma, persistence, seasonal_naive
from gpuaware.forecast.evaluate import evaluate


def _series(values: list[float], step_s: float = 600.0) -> Series:
    return Series("s", 0.0, step_s, np.array(values, dtype=float))


def test_persistence_holds_the_last_observation_through_gaps() -> None:
    # targets 3..5 at horizon 2: origins 1, 2, 3 -> values 2, 2 (gap at 2 holds 2), 4
    s = _series([1, 2, np.nan, 4, 5, 6])
    assert persistence(s, 3, 6, [2])[2].tolist() == [2, 2, 4]


def test_seasonal_naive_is_one_day_before_the_target() -> None:
    # step of 6 h: a day is 4 steps; target 5 at horizon 1 -> value at 1
    s = _series([0, 1, 2, 3, 4, 5, 6], step_s=21_600.0)
    assert seasonal_naive(s, 5, 7, [1])[1].tolist() == [1, 2]


def test_ewma_picks_alpha_on_validation() -> None:
    # a constant level with alternating noise: the smoothest alpha wins on validation
    v = [10 + (1 if k % 2 else -1) for k in range(200)]
    pred = ewma(_series(v), 150, 200, [1], fit_end=100)[1]
    assert np.abs(pred - 10).max() < 1.0


def test_ets_rolling_forecasts_equal_statsmodels_forecast_at_each_origin() -> None:
    from statsmodels.tsa.statespace.exponential_smoothing import ExponentialSmoothing

    rng = np.random.default_rng(1)
    v = np.cumsum(rng.normal(0.2, 1.0, 300)) + 50
    s = _series(list(v))
    pred = ets(s, 250, 300, [1, 5], fit_end=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ExponentialSmoothing(v[:200], trend=True, damped_trend=True).fit(disp=False)
        for origin in (249, 270):
            fc = res.apply(v[: origin + 1]).forecast(5)
            assert pred[1][origin + 1 - 250] == pytest.approx(fc[0], rel=1e-9)
            assert pred[5][origin + 5 - 250] == pytest.approx(fc[4], rel=1e-9)


@pytest.mark.parametrize("a, f, expected", [
    ([100, 0], [90, 0], 100 * 20 / 190 / 2),  # 0/0 counts as a perfect 0, not NaN
    ([np.nan, 4], [1, 2], 200 * 2 / 6),         # an unobserved target does not count
])
def test_smape(a: list[float], f: list[float], expected: float) -> None:
    assert smape(np.array(a, float), np.array(f, float)) == pytest.approx(expected)


def test_philly_persistence_at_10_minutes_is_the_published_10_33() -> None:
    from gpuaware.forecast.datasets import load_philly, split_philly

    src = shared_data() / "philly-node-sequence" / "philly_node_sequence.csv"
    if not src.is_file():
        pytest.skip(f"{src} not found (set GPUAWARE_SHARED_DATA to the shared/data folder)")
    s = load_philly(src)[0]
    sp = split_philly(s)
    assert sp.test_end - sp.valid_end == 2016  # 14 days of 10-minute points
    ev = evaluate([(s, sp.train_end, sp.valid_end, sp.test_end)], [10, 60],
                  {"persistence_only": lambda *a: persistence(*a)})
    got = ev.summary()["models"]["persistence"]
    assert round(got["rmse_at"]["10"], 2) == 10.33 and round(got["smape_at"]["10"], 2) == 1.20
    assert round(got["rmse_at"]["60"], 2) == 18.07
    assert rmse(ev.results[0].actual, ev.results[0].forecasts["seasonal_naive_1d"][10]) == pytest.approx(38.62, abs=0.005)
