"""`gpuaware forecast`: evaluate and train the demand forecasters on trace files.

`evaluate` holds out the test range (the published Philly split, or the last `--test-days`), runs
every baseline (persistence, seasonal naive, EWMA, ETS), the ridge on lags and calendar, the LSTM and
the served forecast (per series and horizon the model validation picks, or the mean of two it cannot
tell apart) side by side at each horizon (10 minutes to 12 hours by default), each with a p10 / p90
band calibrated on its recent errors, and writes DIR/summary.json (the contract other tools read:
{"series": [...], "models": {NAME: {"rmse_at": {...}, "smape_at": {...}, "coverage_at": {"p90": {...},
"p10_p90": {...}}}}, "served": {SERIES: {H: MODEL}}}), DIR/detail.json (per series, the splits, the
fallbacks, why each served model was chosen) and, with `--plot`, one forecast-vs-actual PNG per series. Without `--model` it first trains on the
series' training ranges only (validation picks the checkpoint) and keeps the model as DIR/model.onnx;
with `--model PATH` it serves that file; `--model latest` reads the newest model of the registry
(DATABASE_URL). The LSTM's figures are what the service would publish: the ONNX graph stepped once per
sample, fallback rows (too little history, constant, gaps) served by persistence.

`train` fits the same model and writes the ONNX file `--model` accepts (and the service's registry).

Bounds are checked before any work (horizons: at most 32, each 1 minute to 7 days); outputs are
written into a temporary sibling renamed into place when complete (options.atomic_folder /
atomic_file), and the JSON is strict (a non-finite figure is ``null`` with its reason).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware.cli.options import (
    atomic_file,
    atomic_folder,
    bounded,
    int_list,
    out_file,
    out_folder,
    refuse,
    strict_json,
)

if TYPE_CHECKING:  # gpuaware.forecast imports torch: loaded only when a forecast command runs
    from gpuaware.forecast import Prepared, StreamingModel

app = typer.Typer(help="Demand forecasting: evaluate baselines and the LSTM on traces, train models.",
                  no_args_is_help=True)
console = Console()


@app.callback()
def _group() -> None:
    """Demand forecasting (evaluate, train)."""


HORIZON_MAX_MIN = 7 * 24 * 60
MOST_HORIZONS = 32


def parse_horizons(text: str) -> list[int]:
    """'10,30,60' -> sorted unique minutes ahead, each 1..``HORIZON_MAX_MIN``, at most ``MOST_HORIZONS``."""
    return int_list(text, name="--horizons", lo=1, hi=HORIZON_MAX_MIN, most=MOST_HORIZONS)


Series_ = Annotated[list[Path], typer.Option("--series", help="trace file or folder (repeatable)")]
Format = Annotated[str, typer.Option("--format", help="helios | philly | gentd26")]
TestDays = Annotated[float | None, typer.Option("--test-days", help="hold out the last N days, (0, 3650] (default "
                                                "7; Philly defaults to its published split)",
                                                callback=bounded(0.0, 3650.0, lo_open=True))]
Split = Annotated[str | None, typer.Option("--split", help="'philly': train Oct, validate Nov, test Dec 1-14")]
Horizons = Annotated[str, typer.Option("--horizons", help=f"minutes ahead, comma-separated (at most "
                                       f"{MOST_HORIZONS}, each 1-{HORIZON_MAX_MIN})")]
DEFAULT_HORIZONS = "10,30,60,180,360,720"
Iters = Annotated[int, typer.Option("--iters", help="training iterations at most", min=1, max=10_000_000)]
Seconds = Annotated[float, typer.Option("--max-seconds", help="training time at most, (0, 86400] seconds",
                                        callback=bounded(0.0, 86_400.0, lo_open=True))]


def _prepare(series: list[Path], fmt: str, test_days: float | None, split: str | None) -> list[Prepared]:
    from gpuaware.forecast import SeriesError, prepare

    try:
        return prepare(series, fmt, test_days, split)
    except SeriesError as exc:
        refuse(exc)


def train_blob(prepared: list[Prepared], horizons: list[int], iters: int, seconds: float) -> bytes:
    """Train the LSTM with a progress bar; the streaming ONNX model's bytes. Raises ValueError /
    SeriesError when the series cannot train a model."""
    from gpuaware.forecast import config_for, fit

    config = config_for(prepared[0].series.step_s, horizons, max_iters=iters, max_seconds=seconds)
    with Progress(TextColumn("[bold]training LSTM"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("loss {task.fields[loss]:.4f}  valid {task.fields[valid]}"), console=console) as bar:
        task = bar.add_task("train", total=iters, loss=float("nan"), valid="-")

        def progress(it: int, total: int, loss: float, valid: float) -> None:
            fields: dict[str, Any] = {"loss": loss} | ({"valid": f"{valid:.4f}"} if np.isfinite(valid) else {})
            bar.update(task, completed=it, total=total, **fields)

        result, blob = fit(prepared, config, progress)
    console.print(f"trained {result.iters} iterations in {result.seconds:.1f} s, best validation pinball "
                  f"{result.best_valid_loss:.4f}")
    return blob


def _train(prepared: list[Prepared], horizons: list[int], iters: int, seconds: float) -> bytes:
    from gpuaware.forecast import SeriesError

    try:
        return train_blob(prepared, horizons, iters, seconds)
    except (ValueError, SeriesError) as exc:
        refuse(exc, label="cannot train")


def _load_model(spec: str) -> tuple[StreamingModel, str]:
    from gpuaware.forecast import ModelError, StreamingModel

    if spec == "latest":
        from gpuaware.cli.forecast_registry import latest_model_bytes

        blob, name = latest_model_bytes(os.environ.get("DATABASE_URL", ""))
    else:
        path = Path(spec)
        if not path.is_file():
            refuse(path, label="model not found")
        blob, name = path.read_bytes(), str(path)
    try:
        return StreamingModel.load(blob), name
    except ModelError as exc:
        refuse(f"{name}: {exc}", label="unusable model")


def _plot(out: Path, prepared: list[Prepared], ev, horizons: list[int]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for p, res in zip(prepared, ev.results, strict=True):
        fig, axes = plt.subplots(len(horizons), 1, figsize=(12, 2.6 * len(horizons)), sharex=True, squeeze=False)
        t = (p.series.times[res.test[0]:res.test[1]] - p.series.times[res.test[0]]) / 3600.0
        for ax, h in zip(axes[:, 0], horizons, strict=True):
            served = res.bands["served"][h]
            ax.fill_between(t, served.p10, served.p90, color="tab:blue", alpha=0.2, lw=0, label="served p10-p90")
            ax.plot(t, res.actual, color="black", lw=0.8, label="actual")
            for name, color in (("persistence", "tab:gray"), ("lstm", "tab:red"), ("served", "tab:blue")):
                if name in res.forecasts:
                    ax.plot(t, res.forecasts[name][h], lw=0.7, color=color,
                            label=f"served ({res.served[h]})" if name == "served" else name)
            ax.set_ylabel(f"+{h} min")
            ax.legend(loc="upper right", fontsize=7)
        axes[-1, 0].set_xlabel("hours into the test range")
        fig.suptitle(f"{p.series.name}: forecast vs actual")
        path = out / f"{p.series.name}.png"
        fig.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _minutes(h: int) -> str:
    return f"{h // 60} h" if h % 60 == 0 and h >= 180 else f"{h} min"


def _tables(summary: dict, hs: list[int], test_range: str, n_series: int) -> Group:
    """RMSE per model and horizon (the served forecast last), and the served forecast's band coverage."""
    rmse = Table(title=f"RMSE, {n_series} series, test ranges only ({test_range}{' ...' if n_series > 1 else ''})")
    rmse.add_column("model")
    for h in hs:
        rmse.add_column(_minutes(h), justify="right")
    for name, m in summary["models"].items():
        rmse.add_row(name, *[f"{m['rmse_at'][str(h)]:.3f}" for h in hs])
    cov = Table(title="served forecast: share of actuals <= p90 / within p10-p90 (goal about 0.90 / 0.80)")
    cov.add_column("")
    for h in hs:
        cov.add_column(_minutes(h), justify="right")
    at = summary["models"]["served"]["coverage_at"]

    def share(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    cov.add_row("p90", *[share(at["p90"].get(str(h))) for h in hs])
    cov.add_row("p10-p90", *[share(at["p10_p90"].get(str(h))) for h in hs])
    for series, by_h in summary["served"].items():
        cov.add_row(f"{series}: served", *[by_h[str(h)] for h in hs])
    return Group(rmse, cov)


@app.command()
def evaluate(series: Series_, fmt: Format, out: Annotated[Path, typer.Option("--out", help="output directory",
                                                                           callback=out_folder)] = Path("forecast-eval"),
             test_days: TestDays = None, split: Split = None, horizons: Horizons = DEFAULT_HORIZONS,
             model: Annotated[str | None, typer.Option("--model", help="'latest' (the registry) or an ONNX file; "
                                                       "absent: train on the training range")] = None,
             plot: Annotated[bool, typer.Option("--plot", help="write forecast-vs-actual PNGs")] = False,
             iters: Iters = 1500, max_seconds: Seconds = 240.0) -> None:
    """Baselines, the ridge, the LSTM and the served forecast (with p10 / p90 bands) side by side on
    held-out data; writes DIR/summary.json."""
    from gpuaware.forecast import SeriesError, StreamingModel, run

    hs = parse_horizons(horizons)
    prepared = _prepare(series, fmt, test_days, split)
    blob: bytes | None = None
    if model is None:
        blob = trained = _train(prepared, hs, iters, max_seconds)
        served, model_name = StreamingModel.load(trained), str(out / "model.onnx")
    else:
        served, model_name = _load_model(model)
    try:
        ev = run(prepared, hs, served)
    except SeriesError as exc:
        refuse(exc)
    summary = ev.summary()
    detail = {"model": model_name, "model_meta": served.meta, "horizons_min": hs,
              "relative_rmse_lstm": ev.relative_rmse("lstm"),
              "series": [{"name": p.series.name, "split": p.split.describe(p.series), "notes": list(p.series.notes),
                          "metrics": r.metrics(), "served": r.why_served()}
                         for p, r in zip(prepared, ev.results, strict=True)]}
    with atomic_folder(out) as tmp:  # made only now, when there is something to write
        if blob is not None:
            (tmp / "model.onnx").write_bytes(blob)
        (tmp / "summary.json").write_text(strict_json(summary))
        (tmp / "detail.json").write_text(strict_json(detail))
        if plot:
            _plot(tmp, prepared, ev, hs)
    console.print(_tables(summary, hs, prepared[0].split.describe(prepared[0].series)["test"], len(prepared)))
    console.print(f"wrote {out / 'summary.json'}, detail.json{' and PNGs' if plot else ''}")


@app.command()
def train(series: Series_, fmt: Format, out: Annotated[Path, typer.Option("--out", help="MODEL.onnx to write",
                                                                        callback=out_file)],
          test_days: TestDays = None, split: Split = None, horizons: Horizons = DEFAULT_HORIZONS,
          iters: Iters = 1500, max_seconds: Seconds = 240.0) -> None:
    """Train the LSTM on the training ranges and write the streaming ONNX model."""
    hs = parse_horizons(horizons)
    prepared = _prepare(series, fmt, test_days, split)
    blob = _train(prepared, hs, iters, max_seconds)
    with atomic_file(out) as tmp:
        tmp.write_bytes(blob)
    console.print(f"wrote {out} ({len(blob):,} bytes)")
