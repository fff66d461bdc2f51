"""Forecast benchmark: demand forecasting's acceptance figures, through the library the CLI and the service use.

What it runs (gpuaware.forecast.experiment: the same prepare / fit / run as `gpuaware forecast evaluate`):
  1. Philly node sequence, the published split (10-minute max; train Oct, validate Nov, test Dec 1-14):
     every baseline and the LSTM (trained on October, checkpoint picked on November) at 10/30/60 min;
     persistence at 10 min checked against the independently computed 10.33.
  2. Every Helios VC in shared/data, the last 7 days held out (the day before them validates): one
     global LSTM trained on every VC's training range; every model, horizon and series reported.
  3. The served forecast (per series and horizon the model the validation range and the folds before
     it pick -- baselines, the ridge on lags and calendar, the LSTM -- or the mean of the two best;
     every candidate judged on out-of-sample errors over those ranges, the LSTM through a copy trained
     before the first fold where there are folds): its RMSE against each series' best baseline at
     every horizon (10 minutes to 12 hours), its gain at 6 and 12 h pooled over the GPU-demand series
     of 20 GPUs or more on average (beside it, in hindsight on the test range, what the ridge alone,
     the LSTM alone and the best model per series would have given), and the coverage of its p10 / p90
     band (calibrated on each series' recent errors) per horizon. Beside it, the LSTM against the best
     baseline at 30 and 60 min, pooled and per series.
  4. Streaming inference: 10,000 series stepped through runtime.Streams (onnxruntime, the Helios
     model, 2 x 64) once per update: p50/p99 of the onnxruntime call alone and of the whole step
     (features, fallback checks, the call), after a warm-up.
  5. Training time on one Helios VC with the default TrainConfig (1,500 iterations or 240 s).
  6. Job duration prediction (gpuaware.forecast.duration) on the Pollux copy of the Philly job list:
     jobs before 2017-11-01 observed, later ones scored as they are submitted (runtimes learnt when
     jobs finish); median absolute error on recurring jobs next to "mean of the tenant's past jobs".
     ``--section duration`` runs it alone and keeps the other sections of the existing file.

The LSTM's figures are those of the ONNX graph stepped once per sample (what the service serves),
fallback rows (too little history, constant, gaps) served by persistence.
Writes bench/results/forecast.json (machine and load noted, repository-relative paths only). The data
stays in ../shared/data (GPUAWARE_SHARED_DATA). Run: `make bench-forecast` or `.venv/bin/python bench/forecast.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average, machine
from rich.console import Console

from gpuaware.forecast import (
    BASELINES,
    StreamingModel,
    Streams,
    combine,
    config_for,
    coverage_counts,
    evaluate_philly,
    fit,
    fit_evidence,
    prepare,
    run,
)
from gpuaware.schemas import percentile
from gpuaware.sim import shared_data_dir

RESULTS = RESULTS_DIR / "forecast.json"
HORIZONS = [10, 30, 60, 180, 360, 720]
LONG = (360, 720)
MIN_MEAN_DEMAND = 20.0
PHILLY_PERSISTENCE_10 = 10.33
console = Console()


def _rel(path: Path) -> str:
    """Relative to the repository root (the shared data sits beside it: ../shared/data/...)."""
    return os.path.relpath(path.resolve(), ROOT)


def section(name: str, paths: list[Path], fmt: str, iters: int, seconds: float, **split) -> dict:
    prepared = prepare(paths, fmt, **split)
    config = config_for(prepared[0].series.step_s, HORIZONS, max_iters=iters, max_seconds=seconds)
    console.print(f"[bold]{name}[/bold]: {len(prepared)} series, training up to {iters} iterations / {seconds:.0f} s")
    result, blob = fit(prepared, config)
    model = StreamingModel.load(blob)
    copy = fit_evidence(prepared, config, result)  # the LSTM judged out of sample on the selection folds
    if copy is not None:
        console.print(f"  evidence copy: {copy[0].iters} iterations, {copy[0].seconds:.0f} s")
    evidence = StreamingModel.load(copy[1]) if copy is not None else None
    t0 = time.perf_counter()
    ev = run(prepared, HORIZONS, model, evidence)
    agg = ev.aggregate()
    comparison = {}
    for h in HORIZONS:
        best = ev.best_baseline(h)
        lstm, base = agg["lstm"]["rmse_at"][str(h)], agg[best]["rmse_at"][str(h)]
        wins = [r.name for r in ev.results if r.metrics()["lstm"]["rmse_at"][str(h)]
                <= 0.9 * r.metrics()[ev.best_baseline(h, r)]["rmse_at"][str(h)]]
        comparison[str(h)] = {"best_baseline": best, "best_baseline_rmse": base, "lstm_rmse": lstm,
                              "improvement_pct": 100.0 * (1 - lstm / base),
                              "meets_10pct": bool(lstm <= 0.9 * base),
                              "series_where_lstm_beats_its_best_baseline_by_10pct": wins}
    for h, c in comparison.items():
        console.print(f"  @{h} min: LSTM {c['lstm_rmse']:.3f} vs {c['best_baseline']} {c['best_baseline_rmse']:.3f} "
                      f"({c['improvement_pct']:+.1f} %)")
    served = served_figures(ev, prepared)
    for h in HORIZONS:
        c = served["coverage"][str(h)]
        console.print(f"  served @{h} min: worst ratio to a series' best baseline "
                      f"{max(r[str(h)] for r in served['ratio_to_best_baseline'].values()):.3f}, "
                      f"coverage p90 {c['p90']:.3f} p10-p90 {c['p10_p90']:.3f}")
    return {
        "served": served,
        "files": [_rel(p) for p in paths],
        "splits": {p.series.name: p.split.describe(p.series) for p in prepared},
        "training": {"iters": result.iters, "seconds": round(result.seconds, 1), "best_valid_pinball": result.best_valid_loss,
                     "history": result.history, "config": {k: getattr(config, k) for k in
                                                           ("hidden", "layers", "window", "burn_in", "batch", "lr",
                                                            "max_iters", "max_seconds")}},
        "evidence_training": None if copy is None else {
            "iters": copy[0].iters, "seconds": round(copy[0].seconds, 1), "best_valid_pinball": copy[0].best_valid_loss,
            "data_window": evidence.meta.get("data_window")},
        "evaluation_seconds": round(time.perf_counter() - t0, 1),
        "aggregate": agg,
        "relative_rmse_lstm_geomean": ev.relative_rmse("lstm"),
        "lstm_vs_best_baseline": comparison,
        "per_series": {r.name: {"metrics": r.metrics(), "notes": r.notes} for r in ev.results},
        "_model": model,
    }


def served_figures(ev, prepared) -> dict:
    """The served forecast per series and horizon: what served it, its RMSE over the series' best
    baseline, the pooled RMSEs of the busy series (mean demand >= MIN_MEAN_DEMAND), band coverage
    (pooled counts, and per series)."""
    ratio, pooled, cov_series = {}, {}, {}
    counts = {str(h): {"n": 0, "p90": 0, "p10_p90": 0} for h in HORIZONS}
    busy = [r for r, p in zip(ev.results, prepared, strict=True) if np.nanmean(p.series.values) >= MIN_MEAN_DEMAND]
    for r in ev.results:
        m = r.metrics()
        ratio[r.name] = {str(h): m["served"]["rmse_at"][str(h)] / m[ev.best_baseline(h, r)]["rmse_at"][str(h)]
                         for h in HORIZONS}
        cov_series[r.name] = {"p90": m["served"]["coverage_p90_at"], "p10_p90": m["served"]["coverage_p10_p90_at"]}
        for h in HORIZONS:
            for k, v in coverage_counts(r.actual, r.bands["served"][h]).items():
                counts[str(h)][k] += v
    for h in HORIZONS:
        se_served = se_best = n = 0.0
        for r in busy:
            ok = np.isfinite(r.actual)
            best = r.forecasts[ev.best_baseline(h, r)][h]
            se_served += float(np.nansum((r.actual[ok] - r.forecasts["served"][h][ok]) ** 2))
            se_best += float(np.nansum((r.actual[ok] - best[ok]) ** 2))
            n += float(ok.sum())
        pooled[str(h)] = {"served_rmse": (se_served / n) ** 0.5 if n else None,
                          "best_baselines_rmse": (se_best / n) ** 0.5 if n else None,
                          "improvement_pct": 100.0 * (1 - (se_served / se_best) ** 0.5) if se_best else None,
                          "hindsight_improvement_pct": hindsight(ev, busy, h, se_best)}
    return {"models": {r.name: {str(h): m for h, m in r.served.items()} for r in ev.results},
            "why": {r.name: r.why_served() for r in ev.results},
            "ratio_to_best_baseline": ratio,
            "busy_series": [r.name for r in busy], "busy_pooled": pooled,
            "coverage_counts": counts,
            "coverage": {h: {"p90": c["p90"] / c["n"] if c["n"] else None,
                             "p10_p90": c["p10_p90"] / c["n"] if c["n"] else None} for h, c in counts.items()},
            "coverage_per_series": cov_series}


def hindsight(ev, busy, h: int, se_best: float) -> dict[str, float | None]:
    """What other choices would have gained on the busy series at horizon ``h``, judged on the test range
    itself (a bound, not a rule: nothing served is chosen this way): the ridge alone, the LSTM alone, the
    best model per series, the best model or mean of two per series."""
    models = [m for m in ev.models if m != "served"]
    se = {k: 0.0 for k in ("ridge", "lstm", "best_model_per_series", "best_model_or_mean_of_two_per_series")}
    for r in busy:
        ok = np.isfinite(r.actual)
        a = r.actual[ok]
        fc = {m: r.forecasts[m][h][ok] for m in models}
        single = {m: float(np.nansum((a - f) ** 2)) for m, f in fc.items()}
        pairs = [float(np.nansum((a - combine(f"{x}+{y}", fc)) ** 2)) for i, x in enumerate(models) for y in models[i + 1:]]
        for m in ("ridge", "lstm"):
            se[m] += single.get(m, np.nan)
        se["best_model_per_series"] += min(single.values())
        se["best_model_or_mean_of_two_per_series"] += min([*single.values(), *pairs])
    return {k: 100.0 * (1 - (v / se_best) ** 0.5) if se_best and np.isfinite(v) else None for k, v in se.items()}


def acceptance_of_served(sections: dict) -> dict:
    """The acceptance of the served forecast over every section's series (coverage pooled by counts)."""
    ratios = {f"{sec}/{name}": r for sec, d in sections.items() for name, r in d["served"]["ratio_to_best_baseline"].items()}
    counts = {str(h): {k: sum(d["served"]["coverage_counts"][str(h)][k] for d in sections.values())
                       for k in ("n", "p90", "p10_p90")} for h in HORIZONS}
    coverage = {h: {"p90": c["p90"] / c["n"], "p10_p90": c["p10_p90"] / c["n"]} for h, c in counts.items() if c["n"]}
    per_series_p90 = {f"{sec}/{name}": v["p90"] for sec, d in sections.items()
                      for name, v in d["served"]["coverage_per_series"].items()}
    gains = {f"{sec}": {str(h): d["served"]["busy_pooled"][str(h)]["improvement_pct"] for h in LONG}
             for sec, d in sections.items() if d["served"]["busy_series"]}
    return {
        "served_rmse_le_1.02x_best_baseline_every_series_and_horizon": all(v <= 1.02 for r in ratios.values()
                                                                           for v in r.values()),
        "worst_ratio_to_best_baseline": max(v for r in ratios.values() for v in r.values()),
        "gain_at_6h_12h_pct_busy_gpu_series": gains.get("helios"),
        "gain_at_6h_12h_ge_10pct_busy_gpu_series": bool(gains.get("helios")) and all(
            g is not None and g >= 10.0 for g in gains["helios"].values()),
        "gain_at_6h_12h_pct_busy_series_with_philly_nodes": gains.get("philly"),
        "coverage_pooled": coverage,
        "p90_coverage_in_0.85_0.95": all(0.85 <= c["p90"] <= 0.95 for c in coverage.values()),
        "p10_p90_coverage_in_0.72_0.88": all(0.72 <= c["p10_p90"] <= 0.88 for c in coverage.values()),
        "no_series_p90_coverage_below_0.75": all(v is None or v >= 0.75 for r in per_series_p90.values()
                                                 for v in r.values()),
    }


def streaming_latency(model: StreamingModel, n: int = 10_000, updates: int = 200) -> dict:
    rng = np.random.default_rng(0)
    streams = Streams(model, n)
    t = 1_588_291_200.0
    level = rng.uniform(0, 200, n)
    step_ms, run_ms = [], []
    inner = model.run

    def timed(x, h, c):
        t0 = time.perf_counter()
        out = inner(x, h, c)
        run_ms.append(1e3 * (time.perf_counter() - t0))
        return out

    object.__setattr__(model, "run", timed)
    try:
        for k in range(updates + 20):
            values = np.maximum(0, level + rng.normal(0, 3, n)).round()
            values[rng.random(n) < 0.01] = np.nan  # 1 % of series late on each update
            t0 = time.perf_counter()
            streams.step(values, t + k * model.features.step_s)
            step_ms.append(1e3 * (time.perf_counter() - t0))
    finally:
        object.__delattr__(model, "run")
    step, onnx = np.array(step_ms[20:]), np.array(run_ms[20:])
    return {"series": n, "updates": updates, "model": f"LSTM {model.layers} x {model.hidden}, Helios",
            "onnxruntime_run_ms": {"p50": percentile(onnx, 50), "p99": percentile(onnx, 99)},
            "whole_step_ms": {"p50": percentile(step, 50), "p99": percentile(step, 99)},
            "goal_ms": 100.0, "meets_goal": bool(percentile(step, 99) <= 100.0)}


def one_vc_training(path: Path) -> dict:
    prepared = prepare([path], "helios", test_days=7)
    config = config_for(60.0, HORIZONS)  # the default: 1,500 iterations or 240 s
    result, _ = fit(prepared, config)
    return {"vc": prepared[0].series.name, "iters": result.iters, "seconds": round(result.seconds, 1),
            "max_iters": config.max_iters, "max_seconds": config.max_seconds,
            "stopped_by": "iterations" if result.iters >= config.max_iters else "time budget",
            "goal_s": 300.0, "meets_goal": bool(result.seconds <= 300.0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--iters", type=int, default=1500)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--skip-one-vc", action="store_true", help="leave out the single-VC training timing")
    ap.add_argument("--section", choices=["all", "duration"], default="all")
    args = ap.parse_args(argv)
    data = shared_data_dir(ROOT)
    jobs = data / "pollux" / "traces" / "philly.csv"
    if args.section == "duration":
        report = json.loads(args.out.read_text()) if args.out.is_file() else {}
        report["duration"] = {"file": _rel(jobs), **evaluate_philly(jobs)}
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        console.print(report["duration"]["median_abs_error_s"])
        return 0
    philly = data / "philly-node-sequence" / "philly_node_sequence.csv"
    helios = sorted((data / "helios").glob("*_cluster_sequence_vc.csv"))
    if not philly.is_file() or not helios:
        console.print(f"[red]trace files not found under {data}[/red]: set GPUAWARE_SHARED_DATA to the shared/data folder")
        return 2
    started = time.time()
    report: dict = {"machine": machine("torch", "onnxruntime", "statsmodels", "numpy"),
                    "load_average_before": load_average(), "horizons_min": HORIZONS,
                    "baselines": list(BASELINES), "how": __doc__.split("\n\n")[1]}
    ph = section("philly", [philly], "philly", args.iters, args.max_seconds, split="philly")
    ph.pop("_model")
    p10 = ph["aggregate"]["persistence"]["rmse_at"]["10"]
    ph["persistence_10min_check"] = {"expected": PHILLY_PERSISTENCE_10, "got": round(p10, 2),
                                     "agrees": bool(round(p10, 2) == PHILLY_PERSISTENCE_10)}
    report["philly"] = ph
    he = section("helios", helios, "helios", args.iters, args.max_seconds, test_days=7)
    model = he.pop("_model")
    report["helios"] = he
    report["streaming"] = streaming_latency(model)
    s = report["streaming"]
    console.print(f"streaming 10,000 series: whole step p50 {s['whole_step_ms']['p50']:.1f} ms, p99 "
                  f"{s['whole_step_ms']['p99']:.1f} ms (onnxruntime p50 {s['onnxruntime_run_ms']['p50']:.1f} ms)")
    if not args.skip_one_vc:
        report["train_one_helios_vc"] = one_vc_training(helios[0])
        console.print(f"training on one VC: {report['train_one_helios_vc']}")
    if jobs.is_file():
        report["duration"] = {"file": _rel(jobs), **evaluate_philly(jobs)}
    report["acceptance"] = {
        "served": acceptance_of_served({"philly": ph, "helios": he}),
        "philly_persistence_10min_is_10.33": ph["persistence_10min_check"]["agrees"],
        "lstm_beats_best_baseline_by_10pct": {sec: {h: report[sec]["lstm_vs_best_baseline"][h]["meets_10pct"]
                                                    for h in ("30", "60")} for sec in ("philly", "helios")},
        "streaming_10k_series_p99_le_100ms": s["meets_goal"],
        "train_one_vc_le_5min": report.get("train_one_helios_vc", {}).get("meets_goal"),
    }
    report["load_average_after"] = load_average()
    report["wall_seconds"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {_rel(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
