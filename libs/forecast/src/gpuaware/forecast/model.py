"""The LSTM: multi-horizon quantile forecasts, trained with pinball loss (torch, CPU), exported to ONNX.

Shape of the problem: at every step the network reads one feature row per series (features.py) and
emits, for each horizon (10, 30, 60 min by default) and each quantile (p50, p90), the change from the
current value in units of the series' scale. Quantiles are made monotone by construction (the first
is free, each next one adds a softplus), so p90 >= p50 holds in the exported graph too.

Training: random windows of ``window`` steps from every training series, a burn-in at the start of
each window left out of the loss (the state there is still cold), targets past the training range
masked (no leakage into validation), pinball loss averaged over observed targets. The checkpoint with
the lowest validation loss (the series run from their first step, state carried, scored on the
validation range) is kept.

Export (``export_onnx``): a single-step graph ``(x, h, c) -> (y, h_out, c_out)`` with a dynamic series
axis, the legacy TorchScript exporter (opset 17; it needs no onnxscript), and the feature recipe,
horizons and quantiles in the file's metadata so ``gpuaware.forecast.runtime`` needs nothing else.
Streaming then costs one LSTM step per new sample instead of recomputing a window.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from gpuaware.forecast.features import FEATURES, Features, compute
from gpuaware.forecast.series import Series

__all__ = ["FORMAT", "LSTMForecaster", "TrainConfig", "TrainResult", "TrainSeries", "export_onnx", "predict",
           "train"]

FORMAT = "gpuaware-forecast-lstm/1"


class LSTMForecaster(nn.Module):
    """LSTM(F -> hidden x layers) + linear head -> (batch, time, horizons, quantiles)."""

    def __init__(self, horizons: Sequence[int], quantiles: Sequence[float], hidden: int = 64, layers: int = 2):
        super().__init__()
        self.horizons = list(horizons)
        self.quantiles = list(quantiles)
        self.hidden, self.layers = hidden, layers
        self.lstm = nn.LSTM(len(FEATURES), hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, len(self.horizons) * len(self.quantiles))

    def _quantiles(self, z: torch.Tensor) -> torch.Tensor:
        z = z.reshape(*z.shape[:-1], len(self.horizons), len(self.quantiles))
        if len(self.quantiles) == 1:
            return z
        gaps = nn.functional.softplus(z[..., 1:])
        return torch.cat([z[..., :1], z[..., :1] + torch.cumsum(gaps, dim=-1)], dim=-1)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        out, state = self.lstm(x, state)
        return self._quantiles(self.head(out)), state


class _Step(nn.Module):
    """The exported graph: one step for n series, state in and out."""

    def __init__(self, model: LSTMForecaster):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        y, (h2, c2) = self.model(x.unsqueeze(1), (h, c))
        return y[:, 0].reshape(x.shape[0], -1), h2, c2


@dataclasses.dataclass(frozen=True)
class TrainSeries:
    """One series and where its training and validation ranges end (test data is never shown)."""

    series: Series
    train_end: int
    valid_end: int


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    horizons_min: tuple[int, ...] = (10, 30, 60)
    quantiles: tuple[float, ...] = (0.5, 0.9)
    hidden: int = 64
    layers: int = 2
    window: int = 240
    """steps per training window; ``burn_in`` of them only warm the state"""
    burn_in: int = 60
    batch: int = 64
    max_iters: int = 1500
    max_seconds: float = 240.0
    """training stops at whichever of the two comes first"""
    stop_at: int = 0
    """stop after this many iterations as well (0: no such stop); the learning-rate schedule still spans
    ``max_iters``, so a run stopped here is trained as a time-capped run that stopped at the same
    iteration was (``experiment.fit_evidence``)"""
    eval_every: int = 100
    lr: float = 3e-3
    seed: int = 0


@dataclasses.dataclass
class TrainResult:
    model: LSTMForecaster
    features: Features
    horizons: list[int]
    """in steps"""
    iters: int
    seconds: float
    best_valid_loss: float
    history: list[tuple[int, float, float]]
    """(iteration, train loss, validation loss)"""


def pinball(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Mean pinball loss over observed targets; pred (..., H, Q), target and mask (..., H)."""
    diff = target.unsqueeze(-1) - pred
    loss = torch.maximum(quantiles * diff, (quantiles - 1) * diff)
    weight = mask.unsqueeze(-1).expand_as(loss)
    return (loss * weight).sum() / weight.sum().clamp_min(1.0)


def _targets(values: np.ndarray, held: np.ndarray, scale: np.ndarray, horizons: list[int], end: int):
    """y[t, j] = (v[t+h_j] - held[t]) / scale[t], masked where v[t+h_j] is a gap or at/after ``end``."""
    steps = len(values)
    y = np.zeros((steps, len(horizons)), dtype=np.float32)
    m = np.zeros((steps, len(horizons)), dtype=np.float32)
    for j, h in enumerate(horizons):
        ahead = np.full(steps, np.nan)
        ahead[: max(0, steps - h)] = values[h:]
        ahead[max(0, end - h):] = np.nan
        ok = np.isfinite(ahead)
        y[ok, j] = ((ahead - held) / scale)[ok]
        m[ok, j] = 1.0
    return y, m


def _prepare(data: Sequence[TrainSeries], features: Features, horizons: list[int]):
    prepared = []
    for d in data:
        x, scale, held = compute(features, d.series.values[None, : d.valid_end], d.series.start)
        y_tr, m_tr = _targets(d.series.values[: d.valid_end], held[0], scale[0], horizons, d.train_end)
        y_va, m_va = _targets(d.series.values[: d.valid_end], held[0], scale[0], horizons, d.valid_end)
        m_va[: d.train_end] = 0.0
        prepared.append((x[0], y_tr, m_tr, y_va, m_va, d.train_end))
    return prepared


def train(data: Sequence[TrainSeries], config: TrainConfig = TrainConfig(),
          progress: Callable[[int, int, float, float], None] | None = None) -> TrainResult:
    """Fit one global model on every series' training range; ``progress(iter, max_iters, train_loss,
    valid_loss)`` after each iteration (valid_loss NaN between evaluations)."""
    if not data:
        raise ValueError("no series to train on")
    step_s = data[0].series.step_s
    if any(d.series.step_s != step_s for d in data):
        raise ValueError("every training series must share one step")
    features = Features(step_s=step_s)
    horizons = [data[0].series.steps(m) for m in config.horizons_min]
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    prepared = _prepare(data, features, horizons)
    window = config.window
    starts = [(i, s) for i, p in enumerate(prepared) for s in range(0, max(0, p[5] - config.burn_in - 1), 1)]
    if not starts:
        raise ValueError(f"training ranges shorter than the burn-in ({config.burn_in} steps)")
    model = LSTMForecaster(horizons, config.quantiles, config.hidden, config.layers)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.max_iters)
    q = torch.tensor(config.quantiles, dtype=torch.float32)
    best = (np.inf, {k: v.clone() for k, v in model.state_dict().items()})
    history: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    it = 0
    for it in range(1, config.max_iters + 1):
        picks = rng.integers(0, len(starts), config.batch)
        xb = np.zeros((config.batch, window, len(FEATURES)), dtype=np.float32)
        yb = np.zeros((config.batch, window, len(horizons)), dtype=np.float32)
        mb = np.zeros_like(yb)
        for b, k in enumerate(picks):
            i, s = starts[k]
            x, y, m = prepared[i][0], prepared[i][1], prepared[i][2]
            e = min(s + window, prepared[i][5])
            xb[b, : e - s], yb[b, : e - s], mb[b, : e - s] = x[s:e], y[s:e], m[s:e]
        mb[:, : config.burn_in] = 0.0
        model.train()
        pred, _ = model(torch.from_numpy(xb))
        loss = pinball(pred, torch.from_numpy(yb), torch.from_numpy(mb), q)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        valid = float("nan")
        done = time.perf_counter() - t0 > config.max_seconds or it == config.max_iters or it == config.stop_at
        if it % config.eval_every == 0 or done:
            valid = _valid_loss(model, prepared, q)
            history.append((it, float(loss.detach()), valid))
            if valid < best[0]:
                best = (valid, {k: v.clone() for k, v in model.state_dict().items()})
        if progress is not None:
            progress(it, config.max_iters, float(loss.detach()), valid)
        if done:
            break
    model.load_state_dict(best[1])
    model.eval()
    return TrainResult(model, features, horizons, it, time.perf_counter() - t0, float(best[0]), history)


@torch.no_grad()
def _valid_loss(model: LSTMForecaster, prepared, q: torch.Tensor) -> float:
    model.eval()
    total, weight = 0.0, 0.0
    for x, _, _, y_va, m_va, _ in prepared:
        if m_va.sum() == 0:
            continue
        pred, _ = model(torch.from_numpy(x[None]))
        w = float(m_va.sum())
        total += float(pinball(pred[0], torch.from_numpy(y_va), torch.from_numpy(m_va), q)) * w
        weight += w
    return total / weight if weight else float("nan")


@torch.no_grad()
def predict(model: LSTMForecaster, features: Features, series: Series, upto: int) -> np.ndarray:
    """Run the model over ``series[:upto]`` from a cold state; (upto, H, Q) forecasts in series units,
    row ``o`` issued at origin ``o`` (the offline twin of stepping the ONNX graph)."""
    x, scale, held = compute(features, series.values[None, :upto], series.start)
    model.eval()
    out, _ = model(torch.from_numpy(x))
    out = out[0].numpy().astype(np.float64)
    return held[0][:, None, None] + scale[0][:, None, None] * out


def export_onnx(result: TrainResult, meta: dict | None = None) -> bytes:
    """The single-step streaming graph as ONNX bytes, with the recipe in ``metadata_props['gpuaware']``."""
    import onnx

    model = result.model.eval()
    n = 3
    args = (torch.zeros(n, len(FEATURES)), torch.zeros(model.layers, n, model.hidden),
            torch.zeros(model.layers, n, model.hidden))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # the exporter warns about batch sizes with LSTMs; h and c are explicit inputs, which is its own advice
        warnings.simplefilter("ignore")
        torch.onnx.export(_Step(model), args, buf, dynamo=False, opset_version=17,  # type: ignore[arg-type]  # a file object works too
                          input_names=["x", "h", "c"], output_names=["y", "h_out", "c_out"],
                          dynamic_axes={"x": {0: "series"}, "h": {1: "series"}, "c": {1: "series"},
                                        "y": {0: "series"}, "h_out": {1: "series"}, "c_out": {1: "series"}})
    proto = onnx.load_from_string(buf.getvalue())
    recipe = {"format": FORMAT, "features": list(FEATURES), **dataclasses.asdict(result.features),
              "horizons_steps": result.horizons, "quantiles": model.quantiles, "hidden": model.hidden,
              "layers": model.layers, "iters": result.iters, "train_seconds": round(result.seconds, 1),
              "best_valid_loss": result.best_valid_loss if np.isfinite(result.best_valid_loss) else None,
              **(meta or {})}
    entry = proto.metadata_props.add()
    entry.key, entry.value = "gpuaware", json.dumps(recipe, sort_keys=True)
    return proto.SerializeToString()
