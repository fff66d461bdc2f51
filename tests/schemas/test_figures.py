"""The one percentile definition (gpuaware.schemas.figures): linear interpolation, numpy's default."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from gpuaware.schemas import percentile


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 50, math.nan),
    ([7.0], 99, 7.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),      # pos = 3 * 0.5 = 1.5 -> 2 + 0.5 * (3 - 2)
    ([1.0, 2.0, 3.0, 4.0], 99, 3.97),     # pos = 3 * 0.99 = 2.97 -> 3 + 0.97 * (4 - 3)
    ([4.0, 1.0, 3.0, 2.0], 0, 1.0),       # order does not matter; q=0 is the minimum
    ([0.0, 10.0], 25, 2.5),               # pos = 0.25 -> 0 + 0.25 * 10
])
def test_percentile_interpolates_linearly(values: list[float], q: float, expected: float) -> None:
    got = percentile(values, q)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize("q", [0, 1, 50, 90, 99, 99.9, 100])
def test_percentile_is_numpys_and_statistics_inclusive(q: float) -> None:
    values = [float(x) for x in np.random.default_rng(7).lognormal(size=1001)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    if 1 <= q <= 99 and q == int(q):
        cut = statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
        assert percentile(values, q) == pytest.approx(cut, rel=1e-12)
