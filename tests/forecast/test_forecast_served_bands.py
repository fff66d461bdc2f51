"""What the service publishes is calibrated and never knowingly worse than the last value: the p90 of
any served forecast comes from that series' own recent errors (split conformal, online), and a
series on which the model does worse than persistence at a horizon is served persistence there, by
name, while the other series keep the model."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.forecast import Bands, Choice
from gpuaware.forecast.serving import Server

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86_400


@pytest.mark.parametrize("sigma", [1.0, 5.0])
def test_persistence_on_a_noisy_series_gets_a_p90_that_covers_about_ninety_percent(sigma: float) -> None:
    """White noise around a level: persistence's error is the difference of two draws, so the band's
    width is known (p90 - p50 = 1.2816 * sqrt(2) * sigma) and its coverage must come out near 90 %."""
    rng = np.random.default_rng(3)
    server = Server(None, "", unusable="no model in the registry", quantiles=(0.1, 0.5, 0.9), band_window=2000)
    issued: list[tuple[float, np.ndarray]] = []
    values = 100 + rng.normal(0, sigma, 6000)
    for k, v in enumerate(values):
        res = server.step_demand(T0 + 60 * k, "c", {"*": float(v)})
        issued.append((T0 + 60 * k, res.values[0]))
    horizon = 30  # minutes: index 1 of (10, 30, 60)
    hits = between = n = 0
    for k in range(3000, 6000 - horizon):
        p10, _p50, p90 = issued[k][1][1]
        actual = values[k + horizon]
        hits += actual <= p90
        between += p10 <= actual <= p90
        n += 1
    assert abs(hits / n - 0.90) <= 0.03
    assert abs(between / n - 0.80) <= 0.03
    width = float(np.median([r[1][1][2] - r[1][1][1] for r in issued[3000:]]))
    assert width == pytest.approx(1.2816 * np.sqrt(2) * sigma, rel=0.1)


def test_no_band_before_enough_errors_and_quantiles_never_cross_the_median() -> None:
    bands = Bands(horizons=1, window=50, min_errors=5, every=1)
    flat = np.full((1, 1, 3), 10.0)
    for _ in range(4):
        bands.add(0, np.array([2.0]))
    assert np.array_equal(bands.apply(flat, (0.1, 0.5, 0.9)), flat)  # 4 errors: the forecaster's own quantiles
    bands.add(0, np.array([2.0]))
    out = bands.apply(flat, (0.1, 0.5, 0.9))
    assert out[0, 0, 2] == pytest.approx(12.0)  # always under-forecast by 2: p90 is 2 above
    assert out[0, 0, 0] == pytest.approx(10.0)  # p10 would be 12 too: held at the median, not above it


def test_an_infinite_error_counts_as_unknown_and_the_band_stays_finite() -> None:
    bands = Bands(horizons=1, window=50, min_errors=5, every=1)
    for k in range(10):
        bands.add(0, np.array([1.0 if k % 2 else np.inf]))
    assert bands.known(0).tolist() == [5]
    assert np.isfinite(bands.apply(np.full((1, 1, 2), 3.0), (0.5, 0.9))).all()


def test_the_error_window_forgets_an_old_regime() -> None:
    bands = Bands(horizons=1, window=20, min_errors=5, every=1)
    for _ in range(20):
        bands.add(0, np.array([50.0]))
    for _ in range(20):
        bands.add(0, np.array([1.0]))
    out = bands.apply(np.full((1, 1, 2), 0.0), (0.5, 0.9))
    assert out[0, 0, 1] == pytest.approx(1.0)


def test_choice_sets_the_model_aside_only_where_it_is_worse_with_enough_points() -> None:
    choice = Choice(horizons=2, halflife=50, min_points=10)
    for _ in range(9):
        # series 0: the model errs by 3, persistence by 1 at both horizons; series 1: the reverse
        choice.add(0, np.array([3.0, 1.0]), np.array([1.0, 3.0]))
        choice.add(1, np.array([3.0, np.nan]), np.array([1.0, 3.0]))  # series 1 not scored at horizon 1
    assert not choice.worse(2).any()  # nine points: not yet
    choice.add(0, np.array([3.0, 1.0]), np.array([1.0, 3.0]))
    choice.add(1, np.array([3.0, 1.0]), np.array([1.0, 3.0]))
    assert choice.worse(3).tolist() == [[True, True], [False, False], [False, False]]
    assert choice.rmse(0, 0) == pytest.approx((3.0, 1.0))


def test_a_new_set_of_quantiles_gets_its_offsets_at_once() -> None:
    """A server that replaces another (a reload) may publish other quantiles than the bands it adopts were
    last computed for: the missing quantiles' offsets are computed then, not ``every`` steps later."""
    bands = Bands(horizons=1, window=50, min_errors=5, every=10)
    for _ in range(10):
        bands.add(0, np.array([2.0]))
    bands.apply(np.full((1, 1, 2), 10.0), (0.5, 0.9))
    out = bands.apply(np.full((1, 1, 3), 10.0), (0.1, 0.5, 0.9))
    assert out[0, 0].tolist() == pytest.approx([10.0, 10.0, 12.0])
