"""Streaming inference with onnxruntime: one step per new sample, batched over every series.

``StreamingModel.load(onnx_bytes)`` validates the file (onnxruntime can open it, the metadata names
our format, the graph's inputs and outputs are the ones ``model.export_onnx`` writes) and raises
``ModelError`` with the reason otherwise, so a corrupt or foreign file never reaches a forecast.

``Streams`` holds the per-series state the server keeps between rollups: the LSTM's (h, c), the
feature recipe's running means, how many steps each series has seen. ``Streams.step`` takes one
value per series (NaN where none came), runs a single batched ``InferenceSession.run`` and returns
absolute quantile forecasts per horizon. Where the model must not be trusted (``check``: too little
history, a constant series, gaps, no model), the row carries a persistence forecast and the reason.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnxruntime as ort

from gpuaware.forecast.features import FEATURES, Features, FeatureState
from gpuaware.forecast.model import FORMAT

__all__ = ["ModelError", "StepResult", "StreamingModel", "Streams"]


class ModelError(ValueError):
    """A model file that cannot serve: the message says why (the caller serves a baseline instead)."""


@dataclasses.dataclass(frozen=True)
class StreamingModel:
    session: ort.InferenceSession
    meta: dict
    features: Features
    horizons: list[int]
    quantiles: list[float]
    layers: int
    hidden: int

    @classmethod
    def load(cls, blob: bytes, threads: int = 0) -> StreamingModel:
        if not blob:
            raise ModelError("empty model file")
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if threads:
            opts.intra_op_num_threads = threads
        try:
            session = ort.InferenceSession(bytes(blob), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types (Fail, InvalidProtobuf, ...)
            raise ModelError(f"onnxruntime cannot load the model: {str(err).splitlines()[0][:200]}") from err
        raw = session.get_modelmeta().custom_metadata_map.get("gpuaware")
        if raw is None:
            raise ModelError("not a gpuaware forecast model (no 'gpuaware' metadata)")
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ModelError(f"model metadata is not JSON: {err}") from err
        if meta.get("format") != FORMAT or meta.get("features") != list(FEATURES):
            raise ModelError(f"model format {meta.get('format')!r} / features {meta.get('features')} "
                             f"are not {FORMAT} / {list(FEATURES)}")
        names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
        if names != (["x", "h", "c"], ["y", "h_out", "c_out"]):
            raise ModelError(f"graph inputs/outputs {names} are not the streaming step's")
        fields = {f.name for f in dataclasses.fields(Features)}
        return cls(session, meta, Features(**{k: meta[k] for k in fields}), list(meta["horizons_steps"]),
                   list(meta["quantiles"]), int(meta["layers"]), int(meta["hidden"]))

    @property
    def constant_after(self) -> int:
        """Steps without a change before a series counts as constant: a day (the slow mean's half-life).
        Demand is often flat for hours between jobs (Helios: half the minutes sit in a 2-h flat run) and
        those are the hours the model was trained on; only a series that has not moved for a day is one
        it has nothing to say about."""
        return max(self.min_history, round(self.features.slow_halflife_s / self.features.step_s))

    @property
    def min_history(self) -> int:
        """Steps a series must have seen before its state is trusted: the fast mean's half-life x 2."""
        return max(10, round(2 * self.features.fast_halflife_s / self.features.step_s))

    def run(self, x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        y, h2, c2 = self.session.run(None, {"x": x, "h": h, "c": c})
        return y.reshape(len(x), len(self.horizons), len(self.quantiles)), h2, c2


@dataclasses.dataclass
class StepResult:
    values: np.ndarray
    """(n, H, Q) absolute forecasts"""
    reasons: list[str | None]
    """per series: None where the model forecast, else why the row is persistence"""
    raw: np.ndarray | None = None
    """(n, H, Q) the model's own forecasts for every row, trusted or not (None without a model): what
    drift tracking scores in the shadow while persistence is served"""
    held: np.ndarray | None = None
    """(n,) the last observed value of each series (persistence's forecast)"""


class Streams:
    """Per-series streaming state for one model (or none: then every row is persistence)."""

    def __init__(self, model: StreamingModel | None, n: int = 0, step_s: float | None = None,
                 horizons: list[int] | None = None, quantiles: list[float] | None = None,
                 max_gap_share: float = 0.2):
        self.model = model
        if model is None and (step_s is None or horizons is None or quantiles is None):
            raise ValueError("without a model, step_s, horizons and quantiles must be given")
        self.features = model.features if model else Features(step_s=float(step_s or 60.0))
        self.horizons = model.horizons if model else list(horizons or [])
        self.quantiles = model.quantiles if model else list(quantiles or [])
        self.max_gap_share = max_gap_share
        self.n = 0
        self.fs = FeatureState.zeros(0)
        layers, hidden = (model.layers, model.hidden) if model else (1, 1)
        self.h = np.zeros((layers, 0, hidden), dtype=np.float32)
        self.c = np.zeros((layers, 0, hidden), dtype=np.float32)
        self.recent_gaps = np.zeros(0)
        self.constant_for = np.zeros(0, dtype=np.int64)
        self.grow(n)

    def grow(self, n: int) -> None:
        """Make room for series ``self.n .. n-1`` (new series start cold)."""
        extra = n - self.n
        if extra <= 0:
            return
        more = FeatureState.zeros(extra)
        self.fs = FeatureState(*(np.concatenate([getattr(self.fs, f.name), getattr(more, f.name)])
                                 for f in dataclasses.fields(FeatureState)))
        z = np.zeros((self.h.shape[0], extra, self.h.shape[2]), dtype=np.float32)
        self.h, self.c = np.concatenate([self.h, z], axis=1), np.concatenate([self.c, z], axis=1)
        self.recent_gaps = np.concatenate([self.recent_gaps, np.zeros(extra)])
        self.constant_for = np.concatenate([self.constant_for, np.zeros(extra, dtype=np.int64)])
        self.n = n

    def step(self, values: np.ndarray, t: float) -> StepResult:
        """One new value per series (NaN: none this step) at epoch second ``t``."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.n,):
            raise ValueError(f"expected {self.n} values, got shape {values.shape}")
        prev = self.fs.last.copy()
        x, scale, held = self.features.update(self.fs, values, t)
        seen = np.isfinite(values)
        # gap share as an EWMA over ~min_history steps; constant run length
        window = self.model.min_history if self.model else 10
        self.recent_gaps = self.recent_gaps + (np.where(seen, 0.0, 1.0) - self.recent_gaps) / window
        same = seen & (values == prev)
        self.constant_for = np.where(same, self.constant_for + 1, np.where(seen, 0, self.constant_for))
        persistence = np.repeat(held[:, None, None], len(self.horizons), 1).repeat(len(self.quantiles), 2)
        if self.model is None:
            return StepResult(persistence, ["no model in the registry"] * self.n, None, held)
        y, self.h, self.c = self.model.run(x, self.h, self.c)
        raw = held[:, None, None] + scale[:, None, None] * y.astype(np.float64)
        reasons = self.reasons(seen)
        bad = np.array([r is not None for r in reasons], dtype=bool)
        out = raw.copy()
        out[bad] = persistence[bad]
        return StepResult(out, reasons, raw, held)

    def reasons(self, seen: np.ndarray) -> list[str | None]:
        """Why each row may not use the model (None: it may); built as strings only for those rows."""
        del seen
        need = self.model.min_history if self.model else 0
        none = ~np.isfinite(self.fs.last)
        short = ~none & (self.fs.seen < need)
        gappy = ~none & ~short & (self.recent_gaps > self.max_gap_share)
        constant = ~none & ~short & ~gappy & (self.constant_for >= (self.model.constant_after if self.model else 0))
        out: list[str | None] = [None] * self.n
        for i in np.flatnonzero(none | short | gappy | constant):
            if none[i]:
                out[i] = "no observed values"
            elif short[i]:
                out[i] = f"too little history: {int(self.fs.seen[i])} steps, the model needs {need}"
            elif gappy[i]:
                out[i] = f"{self.recent_gaps[i]:.0%} of recent steps are gaps (limit {self.max_gap_share:.0%})"
            else:
                out[i] = f"constant series for {int(self.constant_for[i])} steps (value {self.fs.last[i]:g})"
        return out

def replay(model: StreamingModel | None, series: list, upto: list[int] | None = None,
           step_s: float | None = None, horizons: list[int] | None = None,
           quantiles: list[float] | None = None) -> list[tuple[np.ndarray, list[str | None]]]:
    """Step every series through ``Streams`` as the service would: for each, (forecasts (T, H, Q) issued
    at each origin, the fallback reason per origin). Series sharing a grid start run as one batch."""
    upto = upto or [len(s) for s in series]
    out: list = [None] * len(series)
    groups: dict[tuple[float, float], list[int]] = {}
    for i, s in enumerate(series):
        groups.setdefault((s.start, s.step_s), []).append(i)
    for (start, step), idx in groups.items():
        steps = max(upto[i] for i in idx)
        block = np.full((len(idx), steps), np.nan)
        for j, i in enumerate(idx):
            block[j, : upto[i]] = series[i].values[: upto[i]]
        streams = Streams(model, len(idx), step_s=step, horizons=horizons, quantiles=quantiles)
        values = np.empty((len(idx), steps, len(streams.horizons), len(streams.quantiles)))
        reasons: list[list[str | None]] = [[] for _ in idx]
        for k in range(steps):
            r = streams.step(block[:, k], start + k * step)
            values[:, k] = r.values
            for j in range(len(idx)):
                reasons[j].append(r.reasons[j])
        for j, i in enumerate(idx):
            out[i] = (values[j, : upto[i]], reasons[j][: upto[i]])
    return out
