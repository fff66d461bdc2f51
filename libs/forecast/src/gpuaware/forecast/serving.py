"""What the forecasting service does with a closed window of rollups, as pure code (no bus, no database).

``Server`` keeps one ``runtime.Streams`` for every series it has seen (one per GPU: its mean SM
utilisation over the window; one per node: the mean over its GPUs; one per GPU model: the mean over
the cluster's GPUs of that model) and, once per window, steps them
all in one batched onnxruntime call. ``events`` turns the step into the contract's messages:

* ``GpuUtilPredicted`` per node, one message per (node, model, version): GPUs the model served and
  GPUs served by persistence (too little history, constant, gaps, no model) never share a message,
  so ``model`` / ``model_version`` always say who produced the numbers; a fallback's
  ``model_version`` is ``baseline: <reason>``;
* ``DemandPredicted`` per (model, version): the node-level series (``metric`` ``util_pct_mean``,
  ``labels`` ``{"node": ...}``) and the GPU-model-level ones (``labels`` ``{"gpu_model": ...}``: the
  mean over the cluster's GPUs of that model, from the nodes' inventories).

Drift: every step scores the forecasts whose target window just arrived, the model's own (trusted
rows, in the shadow when persistence is being served) against persistence's from the same origins,
as exponentially weighted mean squared errors at the longest horizon (half-life ``drift_halflife``
scored points, pooled over series). Once ``drift_min_points`` errors are in and the model's RMSE exceeds persistence's by
``drift_margin``, the model is "worse than the best baseline on recent data": every row serves
persistence with that reason and ``drift()`` reports a raised condition (the service publishes the
alert); when the model's RMSE is back at or under persistence's, it serves again and the condition
resolves. Persistence is the baseline compared with here (the one every stream has for free; at
minute resolution it is the strongest of the four on the traces, see bench/results/forecast.json).

Per series and horizon, the same comparison chooses (``selection.Choice``): where a series' recent
errors say the model does worse than persistence at a horizon, that series is served persistence
there (the whole series: the baseline, with its reason; some horizons only: the model's version
names them), while the pooled condition has not tripped.

Bands: whatever is served (the model, persistence, a mix), every quantile but the median is the
median plus that quantile of the series' own recent errors at that horizon (``calibration.Bands``:
the errors of the p50s published for targets now known, a day of them by default), once a series has
enough of them. A model's fitted quantiles describe the months it was trained on and persistence has
none; a consumer keeping head-room needs a p90 that is a p90 now.

Quantiles: a server publishes its own set (``quantiles``; the demand series' 0.1, 0.5 and 0.9, so a
report can say how often the actual fell inside the p10-p90 band), whatever the model was trained
for. A quantile the model does not output starts as the model's nearest one (a p10 of a model of
0.5 and 0.9 is its median: no band below until there are errors) and the bands replace it once the
series has enough errors, as they do every quantile but the median.

Time: a step is ``step_s`` of the series' own time (a minute). ``time_scale`` says how many seconds of it
pass per second of the clock ``issued_at`` is on: 1 for real GPUs; the speed of a digital twin whose
GPUs live a day in a minute of its telemetry's clock. The published path and the stored horizons are
on the issuer's clock (``step_s`` 600 / ``time_scale``), so a consumer reads them as it reads any other.

The contract wants a dense path (``values[q][k]`` at ``start + k * step_s``); the model forecasts
10, 30 and 60 minutes ahead, so the path is on a 10-minute grid (``step_s`` 600, 6 steps) with the
20/40/50-minute points linearly interpolated between the model's horizons (stated here because a
consumer could take them for model outputs).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Mapping

import numpy as np

from gpuaware.forecast.calibration import Bands
from gpuaware.forecast.demand import CLASS_PREFIX, TOTAL
from gpuaware.forecast.runtime import StepResult, StreamingModel, Streams
from gpuaware.forecast.selection import Choice
from gpuaware.schemas import DemandPredicted, DemandSeries, GpuForecast, GpuUtilPredicted

__all__ = ["Drift", "Point", "Server", "demand_key", "demand_labels", "series_name"]

BASELINE = "persistence"


@dataclasses.dataclass(frozen=True)
class Point:
    """One stored forecast (``forecast_points``)."""

    series: str
    issued_at: float
    horizon_s: float
    p50: float
    p90: float
    model: str
    model_version: str
    fallback: str
    p10: float = float("nan")
    """NaN where the series publishes no p10 (the utilisation series): stored as NULL"""


@dataclasses.dataclass(frozen=True)
class Drift:
    """A change of the drift condition: ``raised`` True (the model is worse) or False (it recovered)."""

    raised: bool
    model_rmse: float
    baseline_rmse: float
    points: int
    horizon_s: float


TOTAL_KEY = "*"
"""the demand key of the cluster's total (no queue name can be ``*``)"""


def demand_key(cluster: str, queue: str) -> tuple[str, str, str]:
    return ("demand", cluster, TOTAL_KEY if queue == TOTAL else queue)


def demand_labels(cluster: str, queue: str) -> dict[str, str]:
    """A demand series' labels from its key's queue: the cluster's total has neither ``queue`` nor
    ``class``, a group of classes (``class:<name>``) has ``class``, a queue has ``queue``."""
    if queue == TOTAL_KEY:
        return {"cluster": cluster}
    if queue.startswith(CLASS_PREFIX):
        return {"cluster": cluster, "class": queue.removeprefix(CLASS_PREFIX)}
    return {"cluster": cluster, "queue": queue}


def series_name(key: tuple[str, str, str]) -> str:
    """How ``forecast_points`` names a series: ``gpu/<node>/<uuid>``, ``node/<node>``,
    ``model/<gpu model>``, ``demand/<cluster>/<queue>`` (``demand/<cluster>/*`` the cluster's total)."""
    kind, node, gpu = key
    return f"{kind}/{node}/{gpu}" if gpu else f"{kind}/{node}"


def window_values(gpus: Iterable[tuple[str, str, float]],
                  models: Mapping[str, str] | None = None) -> dict[tuple[str, str, str], float]:
    """One window's value of every utilisation series: each GPU's, each node's (the mean of its GPUs)
    and each GPU model's (the mean of the cluster's GPUs of that model that reported: what a buyer of
    one more A100 or a placement that needs one wants to know ahead)."""
    values: dict[tuple[str, str, str], float] = {}
    per: dict[tuple[str, str, str], list[float]] = {}
    for node, gpu, util in gpus:
        values["gpu", node, gpu] = util
        per.setdefault(("node", node, ""), []).append(util)
        model = (models or {}).get(gpu)
        if model:
            per.setdefault(("model", model, ""), []).append(util)
    values.update({key: float(np.mean(u)) for key, u in per.items()})
    return values


class Server:
    def __init__(self, model: StreamingModel | None, model_label: str, *, step_s: float = 60.0,
                 horizons_min: tuple[int, ...] = (10, 30, 60), quantiles: tuple[float, ...] | None = None,
                 unusable: str | None = None, drift_halflife: float = 240.0, drift_min_points: int = 200,
                 drift_margin: float = 0.0, time_scale: float = 1.0, band_window: int = 1440,
                 band_min_errors: int = 30, band_every: int = 10, choice_min_points: int = 60):
        """``model_label`` names the registry entry (``name@version``); ``unusable`` is why there is no
        model (the reason every fallback row then carries). ``quantiles``: the ones published, increasing
        (None: the model's own; without a model 0.5 and 0.9). ``band_*``: the quantiles' calibration on each
        series' recent errors (``Bands``); ``choice_min_points``: errors a series needs at a horizon before
        the model's and persistence's recent RMSE choose between them there."""
        self.model_label = model_label
        self.unusable = unusable
        self.step_s = step_s
        self.time_scale = time_scale
        if model is not None and model.features.step_s != step_s:
            self.unusable = (f"{model_label}'s step is {model.features.step_s:g} s, the rollups' {step_s:g} s")
            model = None
        self.model = model
        steps = [round(h * 60 / step_s) for h in horizons_min]
        self.quantiles: tuple[float, ...] = tuple(quantiles or (model.quantiles if model else (0.5, 0.9)))
        """the quantiles published (the contract's ``quantiles``) and stored"""
        self.streams = Streams(model, 0, step_s=step_s, horizons=model.horizons if model else steps,
                               quantiles=list(model.quantiles) if model else list(self.quantiles))
        own = self.streams.quantiles
        columns = [min(range(len(own)), key=lambda k: abs(own[k] - q)) for q in self.quantiles]
        self._columns = None if columns == list(range(len(own))) else np.array(columns)
        """the forecaster's quantile each published one starts from (None: the same set)"""
        self.drift_decay = 0.5 ** (1.0 / drift_halflife)
        self.drift_min_points = drift_min_points
        self.drift_margin = drift_margin
        self.sq = np.zeros(2)
        """EW sums of squared errors (model, persistence) at the longest horizon, and their weight"""
        self.weight = 0.0
        self.scored = 0
        self.drifting = False
        self._changes: list[Drift] = []
        self._issued: OrderedDict[float, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        """origin -> (the model's p50 at every horizon (n, H), persistence's (n,), rows the model served)"""
        self.bands = Bands(len(self.streams.horizons), band_window, band_min_errors, band_every)
        self._persistence_at: dict[int, tuple[float, ...]] = {}
        """rows the model serves at some horizons only: the horizons (minutes) persistence serves"""
        self.choice = Choice(len(self.streams.horizons), drift_halflife, choice_min_points)
        self._served: OrderedDict[float, np.ndarray] = OrderedDict()
        """origin -> the p50 published at every horizon (n, H): what the bands are calibrated on"""
        self.index: dict[tuple[str, str, str], int] = {}
        """(kind "gpu" | "node" | "model" | "demand", node / GPU model / cluster, gpu uuid / queue or "") -> row"""
        self.last_window: float | None = None
        self.window_models: set[str] = set()
        """the GPU models that reported in the last window stepped"""

    @property
    def horizons_s(self) -> list[float]:
        return [h * self.step_s for h in self.streams.horizons]

    def _row(self, key: tuple[str, str, str]) -> int:
        if key not in self.index:
            self.index[key] = len(self.index)
            self.streams.grow(len(self.index))
        return self.index[key]

    def adopt(self, other: Server) -> None:
        """Take the series rows of the server this one replaces (hot reload): the same rows, new states
        (a new model's LSTM state starts cold, so its rows serve persistence until warm)."""
        for key in sorted(other.index, key=other.index.__getitem__):
            self._row(key)
        self.last_window = other.last_window
        if len(other.streams.horizons) == len(self.streams.horizons):
            self.bands = other.bands  # the served forecast's recent errors: its band does not start over
            self._served = other._served

    def step(self, window_start: float, gpus: Iterable[tuple[str, str, float]],
             models: Mapping[str, str] | None = None) -> StepResult:
        """Every series one step at ``window_start``: ``gpus`` are (node, gpu uuid, util %) of the window,
        ``models`` each GPU's model name where known (the nodes' inventories); see ``window_values``.
        Series not in the window are gaps."""
        values = window_values(gpus, models)
        self.window_models = {name for kind, name, _ in values if kind == "model"}
        return self.step_series(window_start, values)

    def step_demand(self, window_start: float, cluster: str, demand: Mapping[str, float]) -> StepResult:
        """Every demand series one step: ``demand`` is GPUs per queue (``demand.TOTAL`` the cluster's)."""
        return self.step_series(window_start, {demand_key(cluster, q): v for q, v in demand.items()})

    def step_series(self, window_start: float, values: Mapping[tuple[str, str, str], float]) -> StepResult:
        """Every series one step at ``window_start``; a known series missing from ``values`` is a gap."""
        rows = {self._row(key): v for key, v in values.items()}
        row = np.full(len(self.index), np.nan)
        for i, v in rows.items():
            row[i] = v
        self.last_window = window_start
        result = self.streams.step(row, window_start)
        q = self.streams.quantiles.index(0.5) if 0.5 in self.streams.quantiles else 0
        median = self.quantiles.index(0.5) if 0.5 in self.quantiles else 0
        oldest = window_start - self.streams.horizons[-1] * self.step_s
        self._calibrate(window_start, row)
        if result.raw is not None and result.held is not None:
            self._score(window_start, row)
            trusted = np.array([r is None for r in result.reasons], dtype=bool)
            self._issued[window_start] = (result.raw[:, :, q].copy(), result.held.copy(), trusted)
            while self._issued and next(iter(self._issued)) < oldest:
                self._issued.popitem(last=False)
            result = self._chosen(result)
        served = result.values if self._columns is None else result.values[:, :, self._columns]
        calibrated = self.bands.apply(served, self.quantiles)
        self._served[window_start] = calibrated[:, :, median].copy()
        while self._served and next(iter(self._served)) < oldest:
            self._served.popitem(last=False)
        return dataclasses.replace(result, values=calibrated)

    def _chosen(self, result: StepResult) -> StepResult:
        """Persistence wherever it does better: everywhere while the pooled drift condition holds, else per
        series and horizon where the model's recent RMSE there exceeds persistence's (``Choice``)."""
        assert result.held is not None
        n, horizons, nq = result.values.shape
        persistence = np.broadcast_to(result.held[:, None, None], (n, horizons, nq))  # a view: nothing copied
        if self.drifting:
            why = (f"model worse than persistence on recent data (RMSE {self.rmse()[0]:.3g} vs {self.rmse()[1]:.3g} "
                   f"at {self.horizons_s[-1] / 60:g} min)")
            return dataclasses.replace(result, values=persistence.copy(),
                                       reasons=[r if r is not None else why for r in result.reasons])
        worse = self.choice.worse(n)
        trusted = np.array([r is None for r in result.reasons], dtype=bool)
        self._persistence_at = {int(i): tuple(self.horizons_s[j] / 60 for j in np.flatnonzero(worse[i]))
                                for i in np.flatnonzero(trusted & worse.any(axis=1) & ~worse.all(axis=1))}
        if not (worse & trusted[:, None]).any():
            return result
        values = np.where(worse[:, :, None] & trusted[:, None, None], persistence, result.values)
        reasons = list(result.reasons)
        for i in np.flatnonzero(trusted & worse.all(axis=1)):
            m, b = self.choice.rmse(int(i), -1)
            reasons[i] = (f"model worse than persistence on this series' recent data (RMSE {m:.3g} vs {b:.3g} at "
                          f"{self.horizons_s[-1] / 60:g} min)")
        return dataclasses.replace(result, values=values, reasons=reasons)

    def _calibrate(self, window_start: float, actual: np.ndarray) -> None:
        """Score every forecast whose target is this window: the served p50 for the bands, the model's and
        persistence's p50 for the choice between them."""
        for j, h in enumerate(self.streams.horizons):
            origin = window_start - h * self.step_s
            served = self._served.get(origin)
            if served is not None:
                self.bands.add(j, actual[:len(served)] - served[:, j])
            issued = self._issued.get(origin)
            if issued is not None:
                model, held, trusted = issued
                a = actual[:len(held)]
                self.choice.add(j, np.where(trusted, model[:, j] - a, np.nan), held - a)

    def rmse(self) -> tuple[float, float]:
        """Recent RMSE of (the model, persistence) at the longest horizon (NaN before any error)."""
        if self.weight == 0:
            return float("nan"), float("nan")
        m, b = np.sqrt(self.sq / self.weight)
        return float(m), float(b)

    def _score(self, window_start: float, actual: np.ndarray) -> None:
        origin = window_start - self.streams.horizons[-1] * self.step_s
        issued = self._issued.get(origin)
        if issued is None:
            return
        model, held, trusted = issued
        last = model[:, -1]
        n = len(last)
        a = actual[:n]
        ok = trusted & np.isfinite(a)
        if not ok.any():
            return
        k = int(ok.sum())
        decay = self.drift_decay ** k
        self.sq = self.sq * decay + np.array([np.sum((last[ok] - a[ok]) ** 2), np.sum((held[ok] - a[ok]) ** 2)])
        self.weight = self.weight * decay + k
        self.scored += k
        if self.scored < self.drift_min_points:
            return
        m, b = self.rmse()
        worse = m > b * (1.0 + self.drift_margin)
        if worse != self.drifting:
            self.drifting = worse
            self._changes.append(Drift(worse, m, b, self.scored, self.horizons_s[-1]))

    def drift(self) -> list[Drift]:
        """Changes of the drift condition since the last call."""
        out, self._changes = self._changes, []
        return out

    def _reported(self, key: tuple[str, str, str], nodes: set[str]) -> bool:
        """Is the series in the window just stepped: a GPU's or node's when its node reported (``nodes``;
        a demand series is keyed by its cluster, so ``nodes`` holds the cluster there), a GPU model's when
        any GPU of that model did."""
        return key[1] in (self.window_models if key[0] == "model" else nodes)

    def _who(self, reason: str | None, row: int = -1) -> tuple[str, str]:
        if reason is None:
            at = self._persistence_at.get(row)
            if at:
                return "lstm", f"{self.model_label}; persistence at {', '.join(f'{h:g}' for h in at)} min"[:253]
            return "lstm", self.model_label
        why = self.unusable if (self.model is None and self.unusable) else reason
        return BASELINE, f"baseline: {why}"[:253]

    def _path(self, at_horizons: np.ndarray) -> tuple[tuple[float, ...], ...]:
        """(H, Q) forecasts at the model's horizons -> the contract's (Q, 6) path on a 10-minute grid."""
        grid = np.arange(1, 7) * 600.0
        return tuple(tuple(float(x) for x in np.interp(grid, self.horizons_s, at_horizons[:, q]))
                     for q in range(at_horizons.shape[1]))

    def _common(self, issued_at: float, emitted_at: float, source: str) -> dict:
        step = 600.0 / self.time_scale  # on the issuer's clock
        return {"source": source, "emitted_at": emitted_at, "issued_at": issued_at, "start": issued_at + step,
                "step_s": step, "horizon_steps": 6, "quantiles": self.quantiles}

    def events(self, result: StepResult, cluster: str, issued_at: float, nodes: Iterable[str],
               emitted_at: float, source: str) -> list[GpuUtilPredicted | DemandPredicted]:
        """The messages of one step for the nodes that reported in the window."""
        nodes = set(nodes)
        common = self._common(issued_at, emitted_at, source)
        gpu_groups: dict[tuple[str, str, str], list[GpuForecast]] = {}
        demand_groups: dict[tuple[str, str], list[DemandSeries]] = {}
        for (kind, node, gpu), i in self.index.items():
            if not self._reported((kind, node, gpu), nodes):
                continue
            model, version = self._who(result.reasons[i], i)
            path = self._path(result.values[i])
            if kind == "gpu":
                gpu_groups.setdefault((node, model, version), []).append(
                    GpuForecast(gpu_uuid=gpu, metric="util_pct", values=path))
            else:
                label = "gpu_model" if kind == "model" else "node"
                demand_groups.setdefault((model, version), []).append(
                    DemandSeries(metric="util_pct_mean", labels={label: node, "cluster": cluster}, values=path))
        out: list[GpuUtilPredicted | DemandPredicted] = []
        for (node, model, version), gpus in sorted(gpu_groups.items()):
            out.append(GpuUtilPredicted(cluster=cluster, node=node, model=model,
                                        model_version=version, gpus=tuple(gpus), **common))
        for (model, version), series in sorted(demand_groups.items()):
            out.append(DemandPredicted(cluster=cluster, model=model,
                                       model_version=version, series=tuple(series), **common))
        return out

    def points(self, result: StepResult, issued_at: float, nodes: Iterable[str]) -> list[Point]:
        """What ``forecast_points`` stores for the step: p10 (where published), p50 and p90 at each
        horizon, who produced them."""
        nodes = set(nodes)
        p10, p50, p90 = (self.quantiles.index(q) if q in self.quantiles else -1 for q in (0.1, 0.5, 0.9))
        out = []
        for (kind, node, gpu), i in self.index.items():
            if not self._reported((kind, node, gpu), nodes):
                continue
            model, version = self._who(result.reasons[i], i)
            name = series_name((kind, node, gpu))
            for j, h in enumerate(self.horizons_s):
                v = result.values[i, j]
                out.append(Point(name, issued_at, h / self.time_scale, float(v[p50]) if p50 >= 0 else float(v[0]),
                                 float(v[p90]) if p90 >= 0 else float("nan"), model, version,
                                 result.reasons[i] or "", float(v[p10]) if p10 >= 0 else float("nan")))
        return out

    def demand_events(self, result: StepResult, cluster: str, issued_at: float, emitted_at: float,
                      source: str) -> list[DemandPredicted]:
        """One ``DemandPredicted`` per (model, version) with a series per queue (``labels`` ``queue``), per
        group of classes (``labels`` ``class``, e.g. ``latency-sensitive``) and the cluster's total (neither
        label), metric ``gpus_requested`` (running + pending)."""
        groups: dict[tuple[str, str], list[DemandSeries]] = {}
        for (kind, of, queue), i in self.index.items():
            if kind != "demand" or of != cluster:
                continue
            groups.setdefault(self._who(result.reasons[i], i), []).append(
                DemandSeries(metric="gpus_requested", labels=demand_labels(cluster, queue),
                             values=self._path(result.values[i])))
        common = self._common(issued_at, emitted_at, source)
        return [DemandPredicted(cluster=cluster, model=model, model_version=version, series=tuple(series), **common)
                for (model, version), series in sorted(groups.items())]

    def demand_actuals(self, observed_at: float, cluster: str,
                       demand: Mapping[str, float]) -> list[tuple[str, float, float]]:
        """(series, target time, actual) of a closed demand minute (``observed_at``: its end, where the
        forecasts issued ``h`` earlier point), named as ``points`` names them."""
        return [(series_name(demand_key(cluster, q)), observed_at, float(v)) for q, v in demand.items()]

    def actuals(self, window_start: float, gpus: Iterable[tuple[str, str, float]],
                models: Mapping[str, str] | None = None) -> list[tuple[str, float, float]]:
        """(series, target time, actual) for the points whose target is this window."""
        return [(series_name(key), window_start, v) for key, v in window_values(gpus, models).items()]
