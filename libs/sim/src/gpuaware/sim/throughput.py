"""How fast a data-parallel training job runs on a GPU layout: Pollux's throughput model, fitted per
application on Pollux's measurements (``traces/<app>/placements.csv`` and ``scalability.csv``).

A layout is a *placement*: the job's GPUs per node, e.g. ``(4, 4, 1)`` (order does not matter, nor
does the nodes' size). With K replicas on N nodes and a local batch of m samples per replica, one
synchronised step takes (Pollux, OSDI'21 §3.2)

    T_grad(m)    = alpha_c + beta_c * m                       forward and backward pass
    T_sync(K, N) = 0                                         K == 1
                 = alpha_r + beta_r * (K - 2)                one node
                 = alpha_n + beta_n * (K - 2)                across nodes
    T_step       = (T_grad^gamma + T_sync^gamma)^(1/gamma)    gamma >= 1: compute and all-reduce overlap

The measurements' ``step_time`` is the whole step, sync included, and ``sync_time`` the part of it
spent synchronising (Pollux's simulator takes ``step_time - sync_time`` as the time of a step that
only accumulates). The fit is Pollux's: least squares, in log space so that a 10 ms and a 2 s step
weigh alike, on two residuals per measured row, the compute time (``step_time - sync_time`` against
T_grad) and the step time (``step_time`` against T_step), over both files (placements.csv covers up
to 4 nodes, scalability.csv up to 16). Fitting the compute time too matters for accumulation, whose
extra passes cost T_grad each. Every parameter is non-negative and the cross-node parameters are
at least the one-node ones, so spreading the same replicas over more nodes never speeds a job up.

A measured (placement, local batch) row is not preferred over the fitted curve: the measurements
are noisy (a larger local batch sometimes measured faster) and a resize moving between a measured
and an unmeasured layout would then jump; one smooth curve keeps every comparison of layouts
consistent. `FitQuality` says how far the curve is from the measured rows.

A global batch B on K replicas gives each a local batch of ceil(B / K). Above the application's
largest measured local batch a replica accumulates gradients: s = ceil(local / max) passes of
ceil(local / s) samples, s - 1 of them without synchronising, so an iteration takes
(s - 1) * T_grad + T_step. Throughput is B samples per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from gpuaware.sim.traces import TraceError, _open_rows, int_field

PLACEMENTS_FILE = "placements.csv"
SCALABILITY_FILE = "scalability.csv"
PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
MAX_GAMMA = 10.0


@dataclass(frozen=True, slots=True)
class ThroughputMeasurement:
    """One measured row: a step of `replicas` replicas on `num_nodes` nodes at `local_batch` samples each."""

    source: str  # the file it came from: "placements" or "scalability"
    num_nodes: int
    replicas: int
    local_batch: int
    step_s: float  # the whole step, synchronisation included
    sync_s: float  # the part of step_s spent synchronising gradients


@dataclass(frozen=True, slots=True)
class StepTimeParams:
    """The fitted parameters of the step time (seconds; see the module docstring for the formula)."""

    alpha_c: float  # compute time of a pass, fixed part
    beta_c: float  # compute time per sample of the local batch
    alpha_r: float  # synchronisation within one node, two replicas
    beta_r: float  # ... each replica beyond two
    alpha_n: float  # synchronisation across nodes, two replicas
    beta_n: float  # ... each replica beyond two
    gamma: float  # overlap of compute and synchronisation: 1 = none, larger = more


@dataclass(frozen=True, slots=True)
class FitQuality:
    """Relative error |predicted - measured| / measured of the fitted step time on the measured rows,
    per file (median and 90th percentile; 0 rows gives NaN)."""

    placements_rows: int
    placements_median: float
    placements_p90: float
    scalability_rows: int
    scalability_median: float
    scalability_p90: float


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """The step time and throughput of one application on any GPU layout and global batch."""

    app: str
    params: StepTimeParams
    max_local_batch: int  # the largest local batch measured: above it a replica accumulates
    quality: FitQuality | None = None  # how well the fit matches its measurements (None: not fitted)

    def grad_s(self, local_batch: int) -> float:
        """One forward and backward pass over `local_batch` samples."""
        return self.params.alpha_c + self.params.beta_c * local_batch

    def sync_s(self, num_nodes: int, replicas: int) -> float:
        """Synchronising the gradients of `replicas` replicas spread over `num_nodes` nodes."""
        p = self.params
        if replicas <= 1:
            return 0.0
        if num_nodes <= 1:
            return p.alpha_r + p.beta_r * (replicas - 2)
        return p.alpha_n + p.beta_n * (replicas - 2)

    def step_s(self, num_nodes: int, replicas: int, local_batch: int) -> float:
        """One synchronised step: a pass over `local_batch` samples per replica and the all-reduce,
        overlapping as gamma says."""
        grad, sync = self.grad_s(local_batch), self.sync_s(num_nodes, replicas)
        if sync <= 0.0:
            return grad
        g = self.params.gamma
        return float((grad**g + sync**g) ** (1.0 / g))

    def iteration_s(self, placement: Sequence[int], global_batch: int) -> float:
        """Seconds per optimiser step of `global_batch` samples on `placement` (GPUs per node),
        accumulating gradients where the local batch exceeds the largest measured one."""
        num_nodes, replicas = _layout(placement)
        passes, micro_batch = accumulation(global_batch, replicas, self.max_local_batch)
        return (passes - 1) * self.grad_s(micro_batch) + self.step_s(num_nodes, replicas, micro_batch)

    def throughput(self, placement: Sequence[int], global_batch: int) -> float:
        """Samples per second at `global_batch` on `placement`."""
        return global_batch / self.iteration_s(placement, global_batch)

    def speedup(self, placement: Sequence[int], global_batch: int, reference: Sequence[int] = (1,)) -> float:
        """Throughput on `placement` over throughput on `reference` (one GPU unless given), same batch."""
        return self.iteration_s(reference, global_batch) / self.iteration_s(placement, global_batch)


def accumulation(global_batch: int, replicas: int, max_local_batch: int) -> tuple[int, int]:
    """(passes per iteration, samples per pass and replica) for `global_batch` over `replicas`."""
    if global_batch < 1:
        raise ValueError(f"global batch {global_batch} must be at least 1")
    if max_local_batch < 1:
        raise ValueError(f"max local batch {max_local_batch} must be at least 1")
    local = -(-global_batch // replicas)
    passes = -(-local // max_local_batch)
    return passes, -(-local // passes)


def packed_placement(gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """`gpus` GPUs filling nodes of `gpus_per_node` in order: packed_placement(10, 4) == (4, 4, 2)."""
    if gpus < 0:
        raise ValueError(f"gpus {gpus} must not be negative")
    if gpus_per_node < 1:
        raise ValueError(f"gpus per node {gpus_per_node} must be at least 1")
    full, rest = divmod(gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def _layout(placement: Sequence[int]) -> tuple[int, int]:
    """(nodes, replicas) of a placement; nodes holding 0 GPUs do not count."""
    if any(int(g) != g or g < 0 for g in placement):
        raise ValueError(f"placement {tuple(placement)} must hold non-negative GPU counts")
    used = [int(g) for g in placement if g > 0]
    if not used:
        raise ValueError(f"placement {tuple(placement)} holds no GPU")
    return len(used), sum(used)


def fit_throughput_model(app: str, measurements: Sequence[ThroughputMeasurement]) -> ThroughputModel:
    """The model of `app` fitted on its measurements (see the module docstring for the fit)."""
    if not measurements:
        raise ValueError(f"{app}: no measurements to fit")
    nodes = np.array([m.num_nodes for m in measurements], dtype=float)
    replicas = np.array([m.replicas for m in measurements], dtype=float)
    batch = np.array([m.local_batch for m in measurements], dtype=float)
    step = np.array([m.step_s for m in measurements])
    compute = step - np.array([m.sync_s for m in measurements])
    # Rows of one (nodes, replicas, local batch) enter as their mean log, weighted by the square root
    # of their count: the same least-squares solution on a few hundred residuals instead of thousands.
    keys, group, counts = np.unique(np.column_stack([nodes, replicas, batch]), axis=0, return_inverse=True,
                                    return_counts=True)
    group = group.ravel()
    weight = np.sqrt(counts)
    log_step = np.bincount(group, np.log(step)) / counts
    log_compute = np.bincount(group, np.log(compute)) / counts

    def residuals(x: np.ndarray) -> np.ndarray:
        grad, total = _predict(_params(x), keys[:, 0], keys[:, 1], keys[:, 2])
        return np.concatenate([weight * (np.log(grad) - log_compute), weight * (np.log(total) - log_step)])

    solution = least_squares(residuals, _initial_guess(nodes, replicas, batch, step, compute),
                             bounds=([0.0] * 6 + [1.0], [np.inf] * 6 + [MAX_GAMMA]))
    model = ThroughputModel(app, _params(solution.x), max(m.local_batch for m in measurements))
    return replace(model, quality=fit_quality(model, measurements))


def _params(x: np.ndarray) -> StepTimeParams:
    """The fit's variables are the one-node parameters and the cross-node *excess* over them."""
    alpha_c, beta_c, alpha_r, beta_r, extra_alpha_n, extra_beta_n, gamma = (float(v) for v in x)
    return StepTimeParams(alpha_c, beta_c, alpha_r, beta_r, alpha_r + extra_alpha_n, beta_r + extra_beta_n, gamma)


def _predict(p: StepTimeParams, nodes: np.ndarray, replicas: np.ndarray,
             batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(compute, step) times of many rows at once; the floor keeps log() finite at a zero parameter."""
    grad = np.maximum(p.alpha_c + p.beta_c * batch, 1e-9)
    sync = np.where(replicas <= 1, 0.0, np.where(nodes <= 1, p.alpha_r + p.beta_r * (replicas - 2),
                                                 p.alpha_n + p.beta_n * (replicas - 2)))
    return grad, (grad**p.gamma + sync**p.gamma) ** (1.0 / p.gamma)


def _initial_guess(nodes: np.ndarray, replicas: np.ndarray, batch: np.ndarray, step: np.ndarray,
                   compute: np.ndarray) -> np.ndarray:
    """A start inside the bounds from the data itself: a line through the compute times, the median
    extra time of one-node and of cross-node steps, no overlap bonus yet."""
    floor = float(np.min(step)) * 1e-3
    beta_c, alpha_c = np.polyfit(batch, compute, 1) if len(set(batch.tolist())) > 1 else (0.0, compute.mean())
    extra = step - compute
    one_node = extra[(replicas > 1) & (nodes <= 1)]
    cross = extra[nodes > 1]
    alpha_r = float(np.median(one_node)) if one_node.size else floor
    alpha_n = float(np.median(cross)) if cross.size else alpha_r
    return np.array([max(float(alpha_c), floor), max(float(beta_c), 0.0), max(alpha_r, floor), floor,
                     max(alpha_n - alpha_r, floor), floor, 1.5])


def fit_quality(model: ThroughputModel, measurements: Iterable[ThroughputMeasurement]) -> FitQuality:
    """The relative error of `model`'s step time on each measured row, summarised per file."""
    errors: dict[str, list[float]] = {"placements": [], "scalability": []}
    for m in measurements:
        predicted = model.step_s(m.num_nodes, m.replicas, m.local_batch)
        errors.setdefault(m.source, []).append(abs(predicted - m.step_s) / m.step_s)

    def summary(values: list[float]) -> tuple[int, float, float]:
        if not values:
            return 0, math.nan, math.nan
        return len(values), float(np.median(values)), float(np.percentile(values, 90))

    return FitQuality(*summary(errors["placements"]), *summary(errors["scalability"]))


def fit_quality_table(models: Mapping[str, ThroughputModel]) -> str:
    """A Markdown table of each fitted model's error on its measurements, for a bench's report."""
    lines = ["| app | rows (placements) | median error | p90 error | rows (scalability) | median error "
             "| p90 error | gamma |", "|---|---|---|---|---|---|---|---|"]
    for app in sorted(models):
        q, gamma = models[app].quality, models[app].params.gamma
        if q is None:
            lines.append(f"| {app} | - | - | - | - | - | - | {gamma:.2f} |")
            continue
        lines.append(f"| {app} | {q.placements_rows} | {q.placements_median:.1%} | {q.placements_p90:.1%} "
                     f"| {q.scalability_rows} | {q.scalability_median:.1%} | {q.scalability_p90:.1%} "
                     f"| {gamma:.2f} |")
    return "\n".join(lines)


def read_measurements(app_dir: Path | str) -> list[ThroughputMeasurement]:
    """The rows of `app_dir`/placements.csv and `app_dir`/scalability.csv (both required).

    A placement is a string of digits, one per node: the replicas the job ran there. Raises
    TraceError (a ValueError naming file and line) on a missing file, a missing column or a bad value.
    """
    app_dir = Path(app_dir)
    rows: list[ThroughputMeasurement] = []
    path = app_dir / PLACEMENTS_FILE
    _, lines = _open_rows(path, PLACEMENT_COLUMNS)
    for line, row in lines:
        text = row["placement"]
        if not (text.isascii() and text.isdigit()) or "0" in text:
            raise TraceError(path, line, f"placement={text!r} is not a string of digits 1-9 (GPUs per node)")
        digits = [int(c) for c in text]
        rows.append(_measurement(path, line, row, "placements", len(digits), sum(digits)))
    path = app_dir / SCALABILITY_FILE
    _, lines = _open_rows(path, SCALABILITY_COLUMNS)
    for line, row in lines:
        num_nodes = int_field(path, line, row, "num_nodes", least=1)
        replicas = int_field(path, line, row, "num_replicas", least=1)
        if replicas < num_nodes:
            raise TraceError(path, line, f"num_replicas={replicas} is fewer than num_nodes={num_nodes}")
        rows.append(_measurement(path, line, row, "scalability", num_nodes, replicas))
    for source, name in (("placements", PLACEMENTS_FILE), ("scalability", SCALABILITY_FILE)):
        if not any(r.source == source for r in rows):
            raise TraceError(app_dir / name, None, "no measured rows")
    return rows


VALIDATION_COLUMNS = ("progress", "iteration")


def iterations_to_target(app_dir: Path | str, global_batch: int) -> int:
    """The iterations an application's job at `global_batch` needs to reach its target: the last row of
    `app_dir`/validation-<batch>.csv (Pollux's statistical-efficiency traces, one per measured batch
    size: the validation metric and the progress after each iteration). A job's work under the
    throughput model is these iterations at its measured iteration time (`ThroughputModel.iteration_s`),
    whatever GPUs it runs on. Raises TraceError for a batch size without a trace, or a malformed one."""
    path = Path(app_dir) / f"validation-{global_batch}.csv"
    if not path.is_file():
        have = sorted(int(f.stem.split("-", 1)[1]) for f in Path(app_dir).glob("validation-*.csv")
                      if f.stem.split("-", 1)[1].isdigit())
        raise TraceError(path, None, f"no validation trace for batch {global_batch} (traced: {have})")
    _, lines = _open_rows(path, VALIDATION_COLUMNS)
    last = None
    for line, row in lines:
        last = int_field(path, line, row, "iteration", least=1)
    if last is None or last < 1:
        raise TraceError(path, None, "no iterations")
    return last


def _measurement(path: Path, line: int, row: dict[str, str], source: str, num_nodes: int,
                 replicas: int) -> ThroughputMeasurement:
    step = _seconds(path, line, row, "step_time")
    sync = _seconds(path, line, row, "sync_time")
    if step <= 0.0:
        raise TraceError(path, line, f"step_time={row['step_time']!r} must be positive")
    if sync >= step:
        raise TraceError(path, line, f"sync_time={row['sync_time']!r} is not less than step_time="
                                     f"{row['step_time']!r} (a step's time includes its sync)")
    return ThroughputMeasurement(source, num_nodes, replicas, int_field(path, line, row, "local_bsz", least=1), step, sync)


def _seconds(path: Path, line: int, row: dict[str, str], column: str) -> float:
    text = row[column]
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, line, f"{column}={text!r} is not a number") from None
    if not math.isfinite(value) or value < 0.0:
        raise TraceError(path, line, f"{column}={text!r} is not a finite non-negative time")
    return value


def load_throughput_models(traces_dir: Path | str, apps: Iterable[str] | None = None) -> dict[str, ThroughputModel]:
    """{app: its fitted model} for each `traces_dir`/<app>/ holding a placements.csv, or for `apps`.

    Raises TraceError (a ValueError naming the file, and the line where one is at fault) when the
    directory holds no application, a named application's files are missing, or a row is malformed.
    """
    traces_dir = Path(traces_dir)
    if not traces_dir.is_dir():
        raise TraceError(traces_dir, None, "not a directory (expected <app>/placements.csv under it)")
    names = sorted(apps) if apps is not None else sorted(
        p.name for p in traces_dir.iterdir() if (p / PLACEMENTS_FILE).is_file())
    if not names:
        raise TraceError(traces_dir, None, f"no <app>/{PLACEMENTS_FILE} under it")
    return {app: fit_throughput_model(app, read_measurements(traces_dir / app)) for app in names}
