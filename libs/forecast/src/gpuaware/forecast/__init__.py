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
splits), ``baselines`` (persistence, seasonal naive, EWMA, ETS), ``features`` (the model's inputs,
one implementation for training and serving), ``model`` (torch LSTM, training, ONNX export),
``runtime`` (onnxruntime streaming), ``accuracy`` (RMSE, sMAPE), ``evaluate`` (rolling origins).
This is the only package that imports torch and onnxruntime (tests/lint/import_layers.py).
"""

from gpuaware.forecast.accuracy import rmse, smape
from gpuaware.forecast.series import Series, SeriesError, regularise

__all__ = ["Series", "SeriesError", "regularise", "rmse", "smape"]
