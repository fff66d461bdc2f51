"""The served forecast: the ridge on lags and calendar, the choice among models on recent data (with
persistence as the fallback), and bands calibrated on each model's own recent errors."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.forecast.accuracy import rmse
from gpuaware.forecast.calibration import band, coverage
from gpuaware.forecast.evaluate import evaluate
from gpuaware.forecast.ridge import ridge
from gpuaware.forecast.selection import better, choose, combine
from gpuaware.forecast.series import Series

DAY = 1440
T0 = 1_588_291_200.0  # 2020-05-01, a Friday


def wave(days: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A daily demand wave (minute steps) and the same wave with Gaussian noise."""
    rng = np.random.default_rng(seed)
    mean = 50 + 20 * np.sin(2 * np.pi * np.arange(days * DAY) / DAY)
    return mean, mean + rng.normal(0, noise, len(mean))


def test_the_band_covers_as_promised_on_known_noise() -> None:
    mean, observed = wave(20, noise=3.0)
    before = 3 * DAY
    b = band(observed, mean, 60, 3 * DAY, before=before)
    c = coverage(observed[before:], b)
    assert c["p90"] == pytest.approx(0.90, abs=0.03) and c["p10_p90"] == pytest.approx(0.80, abs=0.03)


def test_a_band_uses_only_errors_known_at_its_origin() -> None:
    """With a window of one error, the band at target t is the forecast plus the error at t - h."""
    actual = np.arange(20, dtype=np.float64) ** 2
    forecast = np.zeros(20)
    b = band(actual, forecast, 3, 1, before=5, min_errors=1)
    assert list(b.p90) == [actual[t - 3] for t in range(5, 20)]
    assert np.all(b.p10 <= 0.0)  # never above the point forecast


def test_the_ridge_learns_a_daily_rhythm_persistence_cannot() -> None:
    _, observed = wave(16, noise=2.0)
    s = Series("wave", T0, 60.0, observed)
    lo, hi = 14 * DAY, 16 * DAY
    h = 360
    r = ridge(s, lo, hi, [h], fit_end=13 * DAY)[h]
    last = s.filled()[np.arange(lo, hi) - h]
    actual = observed[lo:hi]
    assert rmse(actual, r) < 0.25 * rmse(actual, last)


def test_the_ridge_without_enough_history_is_persistence() -> None:
    s = Series("short", T0, 60.0, np.arange(40, dtype=np.float64))
    out = ridge(s, 30, 40, [5], fit_end=25)[5]
    assert list(out) == list(s.values[25:35])


def test_a_clear_and_significant_winner_is_served_alone() -> None:
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 1, 5000)
    errors = {"persistence": noise * 2.0, "ewma": noise * 1.9, "ridge": noise * 1.0}
    assert choose(errors, 10) == "ridge"
    assert better(errors["ridge"] ** 2, errors["persistence"] ** 2, 10)
    assert not better(errors["persistence"] ** 2, errors["persistence"] ** 2, 10)


def test_persistence_is_served_where_nothing_beats_it_and_near_ties_are_averaged() -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(0, 1, 5000)
    assert choose({"persistence": base, "ets": base * 1.01, "ridge": base * 1.2}, 10) == "persistence"
    near = {"persistence": base * 1.03, "ewma": base * 1.005, "ridge": base}
    assert choose(near, 10) == "ewma+ridge"  # within 2 % of each other: their mean
    assert list(combine("ewma+ridge", {"ewma": np.array([1.0, 3.0]), "ridge": np.array([3.0, 5.0])})) == [2.0, 4.0]
    assert choose({}, 10) == "persistence"


@pytest.mark.parametrize("seed", [0, 1])
def test_a_random_walk_is_served_about_persistence(seed: int) -> None:
    """Nothing beats the last value of a random walk: what is served does no worse than it (within the
    noise of three held-out days) at minutes ahead."""
    rng = np.random.default_rng(seed)
    n = 8 * DAY
    s = Series("walk", T0, 60.0, 1000 + np.cumsum(rng.normal(0, 1, n)).round())
    ev = evaluate([(s, n - 3 * DAY, n - 2 * DAY, n)], [10, 60])
    m = ev.results[0].metrics()
    for h in ("10", "60"):
        assert m["served"]["rmse_at"][h] <= 1.03 * m["persistence"]["rmse_at"][h], ev.results[0].served
