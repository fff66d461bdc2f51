"""One evaluation recipe for the CLI (`gpuaware forecast evaluate|train`) and the bench.

``prepare`` loads trace files and splits them (the published Philly split, or the last N days held
out with the day before them for validation); ``fit`` trains one global LSTM on every series'
training range and exports the streaming ONNX graph with the data window and the held-back metrics
in its metadata (what the registry stores); ``fit_evidence`` trains its copy stopped before the
selection folds (``evaluate.evidence_split``), so that the served choice judges the LSTM on
out-of-sample errors over the same ranges as every other model; ``run`` evaluates every baseline and
the served model (the ONNX graph stepped through ``runtime.Streams``, fallbacks included) on the test
ranges only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from gpuaware.forecast.datasets import Split, load, split_last_days, split_philly
from gpuaware.forecast.evaluate import Evaluation, evaluate, evidence_split, served
from gpuaware.forecast.model import TrainConfig, TrainResult, TrainSeries, export_onnx, train
from gpuaware.forecast.runtime import StreamingModel
from gpuaware.forecast.series import Series, SeriesError

__all__ = ["Prepared", "config_for", "fit", "fit_evidence", "prepare", "run"]


@dataclasses.dataclass(frozen=True)
class Prepared:
    series: Series
    split: Split

    @property
    def row(self) -> tuple[Series, int, int, int]:
        return self.series, self.split.train_end, self.split.valid_end, self.split.test_end


def prepare(paths: Sequence[Path], fmt: str, test_days: float | None = None, split: str | None = None) -> list[Prepared]:
    if split not in (None, "philly"):
        raise SeriesError(f"unknown split {split!r}: the only named split is 'philly'")
    if split == "philly" and fmt != "philly":
        raise SeriesError("--split philly is the Philly node sequence's published split; use --test-days for "
                          f"{fmt}")
    out = []
    for path in paths:
        for s in load(Path(path), fmt):
            if split == "philly" or (fmt == "philly" and test_days is None):
                sp = split_philly(s)
            else:
                days = 7.0 if test_days is None else test_days
                sp = split_last_days(s, days, valid_days=min(1.0, days))
            out.append(Prepared(s, sp))
    if not out:
        raise SeriesError("no series")
    steps = {p.series.step_s for p in out}
    if len(steps) > 1:
        raise SeriesError(f"series of different steps {sorted(steps)} cannot share one model")
    return out


def config_for(step_s: float, horizons_min: Sequence[int] = (10, 30, 60), **overrides) -> TrainConfig:
    """Windows of a day at 10-minute steps (144) or 4 h at minute steps (240); the rest as TrainConfig."""
    base = {"window": 144, "burn_in": 36} if step_s >= 300 else {"window": 240, "burn_in": 60}
    return TrainConfig(horizons_min=tuple(horizons_min), **{**base, **overrides})


def fit(prepared: Sequence[Prepared], config: TrainConfig,
        progress: Callable[[int, int, float, float], None] | None = None) -> tuple[TrainResult, bytes]:
    data = [TrainSeries(p.series, p.split.train_end, p.split.valid_end) for p in prepared]
    result = train(data, config, progress)

    def at(p: Prepared, i: int) -> str:
        return str(pd.Timestamp(p.series.start + i * p.series.step_s, unit="s"))

    meta = {"series": [p.series.name for p in prepared],
            "data_window": {"train_from": min(at(p, 0) for p in prepared),
                            "train_to": max(at(p, p.split.train_end) for p in prepared),
                            "validate_to": max(at(p, p.split.valid_end) for p in prepared)},
            "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return result, export_onnx(result, meta)


def fit_evidence(prepared: Sequence[Prepared], config: TrainConfig, like: TrainResult,
                 progress: Callable[[int, int, float, float], None] | None = None) -> tuple[TrainResult, bytes] | None:
    """The LSTM's evidence copy: trained as ``like`` (the model served, from ``fit`` with ``config``)
    was, on every series' data before its first selection fold, its checkpoint picked on the range just
    before that fold. None where no series has a fold (the validation range alone judges every model,
    the LSTM served as trained).

    "As trained": the same configuration, stopped at the iteration ``like`` stopped at whatever the
    clock says. A time budget gives a different number of iterations on a busier machine, and the
    copy's errors are evidence about the model served only if the two were trained alike."""
    shifted = []
    for p in prepared:
        stop = evidence_split(p.split.train_end, p.split.valid_end)
        if stop is not None:
            shifted.append(Prepared(p.series, Split(stop[0], stop[1], p.split.test_end)))
    alike = dataclasses.replace(config, max_seconds=float("inf"), stop_at=like.iters)
    return fit(shifted, alike, progress) if shifted else None


def _check(prepared: Sequence[Prepared], horizons_min: Sequence[int], model: StreamingModel) -> None:
    steps = [prepared[0].series.steps(h) for h in horizons_min]
    missing = [h for h, st in zip(horizons_min, steps, strict=True) if st not in model.horizons]
    if missing:
        raise SeriesError(f"the model forecasts {model.horizons} steps of {model.features.step_s:g} s ahead; "
                          f"not {missing} min")
    if model.features.step_s != prepared[0].series.step_s:
        raise SeriesError(f"the model's step is {model.features.step_s:g} s, the series' {prepared[0].series.step_s:g} s")


def run(prepared: Sequence[Prepared], horizons_min: Sequence[int], model: StreamingModel | None,
        evidence: StreamingModel | None = None) -> Evaluation:
    """Every baseline, plus ``lstm`` (the served model) when one is given, judged for the served choice
    through ``evidence`` (its copy from ``fit_evidence``) where there are folds; without a copy the LSTM
    is a candidate only where there are none (``evaluate``'s module docstring)."""
    for m in (model, evidence):
        if m is not None:
            _check(prepared, horizons_min, m)
    if model is None and evidence is not None:
        raise ValueError("an evidence copy without the model it stands for")
    return evaluate([p.row for p in prepared], horizons_min, {"lstm": served(model)} if model else None,
                    {"lstm": served(evidence)} if evidence is not None else None)
