"""gpuaware.forecast: demand forecasting, pure (reads trace files; no network, no database).

    series = datasets.load(path, "helios")                  # trace file -> [Series] (gaps explicit)
    split = datasets.split_last_days(s, 7)                  # or split_philly(s): the published split
    ev = evaluate.evaluate([(s, tr, va, te)], [10, 30, 60], {"lstm": evaluate.served(model)})
    ev.summary()                                            # the CLI's summary.json
    result = model.train([TrainSeries(s, tr, va)], TrainConfig())   # torch, CPU, pinball loss
    blob = model.export_onnx(result)                        # single-step (x, h, c) -> (y, h, c) graph
    m = runtime.StreamingModel.load(blob)                   # ModelError with the reason if unusable
    streams = runtime.Streams(m, n_series); streams.step(values, t)  # one batched onnxruntime step

Modules: ``series`` (regular grid, gaps), ``datasets`` (Helios, Philly, GenTD26,
splits), ``baselines`` (persistence, seasonal naive, EWMA, ETS), ``ridge`` (lags and calendar, for
hours ahead), ``hours`` (demand 3-12 h ahead per series: persistence, seasonal naive or the ridge,
chosen and calibrated on the series' recent errors), ``selection`` (which forecast to serve per series and horizon), ``calibration`` (p10 /
p90 bands from recent errors, coverage), ``features`` (the model's inputs, one implementation for
training and serving), ``model`` (torch LSTM, training, ONNX export), ``runtime`` (onnxruntime
streaming), ``accuracy`` (RMSE, sMAPE), ``evaluate`` (rolling origins, the served forecast, bands).
This is the only package that imports torch and onnxruntime (tests/lint/import_layers.py).
"""

import importlib
from typing import TYPE_CHECKING

from gpuaware.forecast.accuracy import rmse, smape
from gpuaware.forecast.baselines import BASELINES
from gpuaware.forecast.calibration import Band, Bands, band, coverage, coverage_counts
from gpuaware.forecast.demand import CLASS_PREFIX, LATENCY_SENSITIVE, DemandBook, DemandRow, class_key
from gpuaware.forecast.duration import DurationPredictor, Fingerprint, evaluate_philly, fingerprint
from gpuaware.forecast.registry import (
    RegistryEntry,
    latest_async,
    latest_version_async,
    publish_async,
    store_points_async,
)
from gpuaware.forecast.ridge import ridge
from gpuaware.forecast.selection import Choice, choose, combine
from gpuaware.forecast.series import Series, SeriesError, regularise

if TYPE_CHECKING:
    from gpuaware.forecast.experiment import Prepared, config_for, fit, fit_evidence, prepare, run
    from gpuaware.forecast.hours import HoursAhead, HoursStep
    from gpuaware.forecast.runtime import ModelError, StreamingModel, Streams
    from gpuaware.forecast.serving import Drift, Server

# These load torch and onnxruntime: they are imported on first use, so that importing the package (for
# the series, the metrics, the demand book) stays light.
_LOADED_ON_USE = {
    "Prepared": "experiment", "config_for": "experiment", "fit": "experiment", "prepare": "experiment",
    "run": "experiment", "fit_evidence": "experiment", "ModelError": "runtime", "StreamingModel": "runtime", "Streams": "runtime",
    "Drift": "serving", "Server": "serving", "HoursAhead": "hours", "HoursStep": "hours",
}


def __getattr__(name: str) -> object:
    module = _LOADED_ON_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "BASELINES",
    "CLASS_PREFIX",
    "LATENCY_SENSITIVE",
    "Band",
    "Bands",
    "Choice",
    "DemandBook",
    "DemandRow",
    "Drift",
    "DurationPredictor",
    "Fingerprint",
    "HoursAhead",
    "HoursStep",
    "ModelError",
    "Prepared",
    "RegistryEntry",
    "Series",
    "SeriesError",
    "Server",
    "StreamingModel",
    "Streams",
    "band",
    "choose",
    "class_key",
    "combine",
    "config_for",
    "coverage",
    "coverage_counts",
    "evaluate_philly",
    "fingerprint",
    "fit",
    "fit_evidence",
    "latest_async",
    "latest_version_async",
    "prepare",
    "publish_async",
    "regularise",
    "ridge",
    "rmse",
    "run",
    "smape",
    "store_points_async",
]
