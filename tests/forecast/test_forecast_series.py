"""Regularising raw samples: duplicates, gaps, non-finite values, horizons in whole steps."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaware.forecast import SeriesError, regularise


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

