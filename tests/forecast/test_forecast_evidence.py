"""The served choice judges every candidate on the same evidence (a model that cannot be refitted per
fold is judged through a copy trained before the folds, or not at all where there are folds), and the
bands start from the folds' errors with a window that grows with the horizon."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuaware.forecast.datasets import Split
from gpuaware.forecast.evaluate import (
    BAND_WINDOW_S,
    band_window,
    evaluate,
    evidence_split,
    selection_ranges,
)
from gpuaware.forecast.experiment import Prepared, fit_evidence
from gpuaware.forecast.model import TrainConfig, TrainSeries, train
from gpuaware.forecast.runtime import StreamingModel
from gpuaware.forecast.series import Series

DAY = 144  # ten-minute steps
T0 = 1_588_291_200.0


def noisy(days: int, seed: int = 0, quiet_day: int | None = None) -> Series:
    """Noise around 100 (ten-minute steps); ``quiet_day`` held at exactly 100."""
    values = (100 + np.random.default_rng(seed).normal(0, 5, days * DAY)).round()
    if quiet_day is not None:
        values[quiet_day * DAY:(quiet_day + 1) * DAY] = 100.0
    return Series("noisy", T0, 600.0, values)


def oracle(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> dict[int, np.ndarray]:
    """Knows every value: on a range it was fitted on, an in-sample model looks like this."""
    del fit_end
    return {h: s.values[lo:hi].copy() for h in horizons}


def biased(s: Series, lo: int, hi: int, horizons: list[int], fit_end: int = 0) -> dict[int, np.ndarray]:
    """The last value plus 20: what an honest copy of a model that learnt the wrong thing forecasts."""
    del fit_end
    f = s.filled()
    return {h: f[np.maximum(0, np.arange(lo, hi) - h)] + 20.0 for h in horizons}


def test_the_selection_ranges_adjoin_and_the_evidence_copy_stops_before_the_first() -> None:
    assert selection_ranges(10 * DAY, 11 * DAY) == [(7 * DAY, 8 * DAY), (8 * DAY, 9 * DAY), (9 * DAY, 10 * DAY),
                                                    (10 * DAY, 11 * DAY)]
    assert evidence_split(10 * DAY, 11 * DAY) == (6 * DAY, 7 * DAY)
    assert selection_ranges(DAY, 2 * DAY) == [(DAY, 2 * DAY)]  # too short for a fold: validation alone
    assert evidence_split(DAY, 2 * DAY) is None


def test_a_model_without_fold_evidence_is_not_served_where_the_others_have_folds() -> None:
    """The oracle is perfect on the validation range, as an in-sample model would be: on that alone
    it would be a clear winner, but it has no errors on the folds the others are judged on."""
    s = noisy(8)
    row = (s, 5 * DAY, 6 * DAY, 8 * DAY)
    assert len(selection_ranges(5 * DAY, 6 * DAY)) == 4
    res = evaluate([row], [10, 60], {"model": oracle}).results[0]
    assert all("model" not in name.split("+") for name in res.served.values()), res.served
    why = res.why_served()["60"]
    assert why["selection_rmse"]["model"] is None and why["validation_rmse"]["model"] == 0.0


def test_the_model_is_judged_on_its_copys_errors_over_every_range() -> None:
    s = noisy(8)
    row = (s, 5 * DAY, 6 * DAY, 8 * DAY)
    honest = evaluate([row], [10, 60], {"model": oracle}, evidence={"model": oracle}).results[0]
    assert honest.served == {10: "model", 60: "model"}  # perfect out of sample too: the clear winner
    stale = evaluate([row], [10, 60], {"model": oracle}, evidence={"model": biased}).results[0]
    assert all("model" not in name.split("+") for name in stale.served.values()), stale.served
    assert stale.why_served()["60"]["selection_rmse"]["model"] > stale.why_served()["60"]["selection_rmse"]["persistence"]
    with pytest.raises(ValueError, match="evidence for models not evaluated"):
        evaluate([row], [10], evidence={"nope": biased})


def test_without_folds_every_model_is_judged_on_the_validation_range_alone() -> None:
    s = noisy(4)
    res = evaluate([(s, DAY, 2 * DAY, 4 * DAY)], [10, 60], {"model": oracle}).results[0]
    assert res.served == {10: "model", 60: "model"}


def test_the_band_window_holds_sixteen_horizons_and_at_least_three_days() -> None:
    assert band_window(10, 60.0) == band_window(180, 60.0) == round(BAND_WINDOW_S / 60.0)
    assert band_window(360, 60.0) == 4 * 1440
    assert band_window(720, 60.0) == 8 * 1440
    assert band_window(720, 600.0) == 8 * DAY


def test_the_bands_start_from_the_folds_errors() -> None:
    """A validation day without a change: persistence erred nowhere on it. The band over the first
    test targets still has a width, from the folds' errors before it."""
    s = noisy(8, quiet_day=5)
    res = evaluate([(s, 5 * DAY, 6 * DAY, 8 * DAY)], [10]).results[0]
    b = res.bands["persistence"][10]
    first = slice(0, DAY // 2)
    assert np.all(np.isfinite(b.p90[first])) and np.all(b.p90[first] - b.p10[first] > 5.0)


def test_the_evidence_copy_is_trained_as_the_model_was_and_stops_before_the_first_fold() -> None:
    """The copy stops at the iteration the model stopped at, whatever its own clock says (a time budget
    gives fewer iterations on a busier machine), and sees nothing from the first fold on."""
    s = noisy(8)
    prepared = [Prepared(s, Split(5 * DAY, 6 * DAY, 8 * DAY))]
    tiny = TrainConfig(horizons_min=(10, 60), hidden=8, layers=1, window=48, burn_in=12, batch=8,
                       max_iters=200, eval_every=50, max_seconds=60.0)
    model = train([TrainSeries(s, 5 * DAY, 6 * DAY)], dataclasses.replace(tiny, stop_at=7))
    assert model.iters == 7
    copy = fit_evidence(prepared, dataclasses.replace(tiny, max_seconds=0.0), model)
    assert copy is not None and copy[0].iters == 7  # a budget of no seconds at all: still seven
    window = StreamingModel.load(copy[1]).meta["data_window"]
    assert window["train_to"] == "2020-05-02 00:00:00" and window["validate_to"] == "2020-05-03 00:00:00"
    short = [Prepared(noisy(4), Split(DAY, 2 * DAY, 4 * DAY))]
    assert fit_evidence(short, tiny, model) is None  # no folds: nothing to judge it on but validation
