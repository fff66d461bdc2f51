"""Regularising raw samples and the reasons a model is not trusted on a window."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.forecast import SeriesError, check_history, regularise


def test_duplicates_are_combined_gaps_stay_nan_and_nonfinite_samples_are_dropped() -> None:
    # grid of 60 s from t=0: step 0 has 1 and 3 (duplicate time, max 3), step 1 only a NaN (a gap),
    # step 2 has 5, step 3 nothing (a gap), step 4 has 7
    t = np.array([0, 0, 60, 120, 240], dtype=float)
    v = np.array([1, 3, np.nan, 5, 7], dtype=float)
    s = regularise("x", t, v, 60.0, agg="max")
    assert s.values[[0, 2, 4]].tolist() == [3, 5, 7]
    assert np.isnan(s.values[[1, 3]]).all()
    assert s.filled().tolist() == [3, 3, 5, 5, 7]
    assert any("duplicate" in n for n in s.notes) and any("non-finite" in n for n in s.notes)
    assert any("2 of 5 steps" in n for n in s.notes)


def test_no_finite_sample_is_a_clear_error() -> None:
    with pytest.raises(SeriesError, match="no finite samples"):
        regularise("x", np.array([0.0, 60.0]), np.array([np.nan, np.inf]), 60.0)


def test_a_horizon_must_be_whole_steps() -> None:
    s = regularise("x", np.array([0.0, 600.0]), np.array([1.0, 2.0]), 600.0)
    assert s.steps(30) == 3
    with pytest.raises(SeriesError, match="not a whole number"):
        s.steps(15)


@pytest.mark.parametrize("values, reason", [
    ([np.nan] * 30, "no observed values"),
    ([1.0, 2.0], "too little history: 2 steps, the model needs 10"),
    ([*range(19), np.nan], "the latest value is missing"),
    # 4 NaNs in the last 10: 40 % > 20 %
    ([*range(10), 1, np.nan, 2, np.nan, 3, np.nan, 4, np.nan, 5, 6], "40% of the last 10 steps are gaps"),
    ([*range(10), *[4.0] * 10], "constant series over the last 10 steps (value 4)"),
    ([*range(20)], None),
])
def test_check_history(values: list[float], reason: str | None) -> None:
    got = check_history(np.array(values, dtype=float), min_history=10)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason))
