"""Evaluation outputs: summary.json (the CLI contract), per-seed CSV, the paper's figure, assignments.

summary.json has exactly the contract's shape, means over seeds:
  {"trace", "nodes", "seeds", "policies": {NAME: {"alloc_pct_at": {"90".."130"},
   "unallocated_gpus_at": {same keys}, "frag_ratio_pct_at": {"80", "90"}, "p99_decision_ms"}}}
Anything more (failures, run times, the paper's numbers) goes to per_seed.csv or the benchmark file.
A figure no run reached (the trace's arrivals stop short of 130 %, a full cluster has no idle capacity
to fragment, no decision was made) is ``null``, and that policy then carries ``"null_reasons"``:
``{"<field>.<key>": why}``. The file is strict JSON: never ``NaN``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpuaware.schemas import percentile
from gpuaware.sim.evaluator import ARRIVED, FRAG_AT, REPORT_AT, RunResult

PAPER_POLICY = {
    "01-Random": "Random",
    "02-DotProd": "DotProd",
    "03-GpuClustering": "GpuClustering",
    "04-GpuPacking": "GpuPacking",
    "05-BestFit": "BestFit",
    "06-FGD": "FGD",
}

ASSIGNMENT_HEADER = ("seq", "pod", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "node", "gpus")


def _mean(values: Sequence[float]) -> float | None:
    """The mean over seeds of the values some seed reached, rounded; None when none did."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    return round(float(arr.mean()), 4) if arr.size else None


def column_means(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Per column, the mean of the rows' non-NaN values; NaN (without numpy's 'Mean of empty slice'
    warning) where every row is NaN, as at a load no seed's arrivals reached."""
    a = np.vstack(rows)
    counts = (~np.isnan(a)).sum(axis=0)
    return np.where(counts > 0, np.nansum(a, axis=0) / np.maximum(counts, 1), np.nan)


def _null_reasons(rs: Sequence[RunResult], entry: dict) -> dict[str, str]:
    """Why each null figure of one policy's ``entry`` is null (empty when none is)."""
    reached = [int(np.flatnonzero(~np.isnan(r.alloc_pct)).max(initial=-1)) for r in rs]
    top = max(reached, default=-1)
    short = (f"no seed's arrivals came within 1 % of {{x}} % of GPU capacity (the allocation curve ends at "
             f"{top} %)" if top >= 0 else "no seed had an arrival")
    reasons: dict[str, str] = {}
    for field_name in ("alloc_pct_at", "unallocated_gpus_at", "frag_ratio_pct_at"):
        for key, value in entry[field_name].items():
            if value is not None:
                continue
            x = int(key)
            if field_name == "frag_ratio_pct_at" and any(not np.isnan(r.alloc_pct[x]) for r in rs):
                reasons[f"{field_name}.{key}"] = "no idle GPU capacity at that load to be fragmented"
            else:
                reasons[f"{field_name}.{key}"] = short.format(x=x)
    if entry["p99_decision_ms"] is None:
        reasons["p99_decision_ms"] = "no scheduling decision was made (no pods)"
    return reasons


def by_policy(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for r in runs:
        out.setdefault(r.policy, []).append(r)
    return out


def summarize(runs: Sequence[RunResult], trace: str, nodes: str, seeds: Sequence[int]) -> dict:
    policies: dict[str, dict[str, Any]] = {}
    for name, rs in by_policy(runs).items():
        policies[name] = {
            "alloc_pct_at": {str(x): _mean([r.alloc_pct[x] for r in rs]) for x in REPORT_AT},
            "unallocated_gpus_at": {str(x): _mean([r.unallocated_gpus[x] for r in rs]) for x in REPORT_AT},
            "frag_ratio_pct_at": {str(x): _mean([r.frag_ratio_pct[x] for r in rs]) for x in FRAG_AT},
            "p99_decision_ms": _rounded(percentile(np.concatenate([r.decision_ms for r in rs]), 99)),
        }
        reasons = _null_reasons(rs, policies[name])
        if reasons:
            policies[name]["null_reasons"] = reasons
    return {"trace": trace, "nodes": nodes, "seeds": [int(s) for s in seeds], "policies": policies}


def _rounded(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 4)


def write_summary(path: Path, summary: dict) -> None:
    """Strict JSON (a NaN left in ``summary`` is a bug here, refused rather than written)."""
    path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


def write_per_seed(path: Path, runs: Sequence[RunResult]) -> None:
    """Long format: one row per (policy, seed, arrived %)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "seed", "arrived_pct", "alloc_pct", "unallocated_gpus", "frag_ratio_pct",
                    "pods", "failed_pods", "run_seconds"])
        for r in runs:
            un = r.unallocated_gpus
            for x in ARRIVED:
                w.writerow([r.policy, r.seed, int(x), _fmt(r.alloc_pct[x]), _fmt(un[x]), _fmt(r.frag_ratio_pct[x]),
                            r.pods, r.failed, f"{r.wall_s:.2f}"])


def _fmt(v: float) -> str:
    return "" if v != v else f"{v:.4f}".rstrip("0").rstrip(".")


def write_assignments(directory: Path, runs: Sequence[RunResult]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in runs:
        if r.assignments is None:
            continue
        path = directory / f"{r.policy}-{r.seed}.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(ASSIGNMENT_HEADER)
            for seq, (pod, node, gpus) in enumerate(r.assignments):
                w.writerow([seq, pod.name, pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec,
                            node, "|".join(str(g) for g in gpus)])
        paths.append(path)
    return paths


def plot_alloc(path: Path, runs: Sequence[RunResult], title: str, expected: dict[str, np.ndarray] | None = None) -> None:
    """Allocation ratio vs arrived load per policy (the paper's Fig. 9a); paper curves dashed if given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, rs) in enumerate(by_policy(runs).items()):
        mean = column_means([r.alloc_pct for r in rs])
        c = colors[i % len(colors)]
        ax.plot(ARRIVED, mean, label=name, color=c, lw=1.6)
        if expected and name in expected:
            ax.plot(ARRIVED, expected[name], color=c, lw=1.0, ls="--", alpha=0.7)
    ax.plot([0, 100], [0, 100], color="grey", lw=0.6, ls=":")
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.set_xlabel("arrived GPU request (% of cluster GPU capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title + (" (dashed: paper)" if expected else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    inset = ax.inset_axes((0.52, 0.1, 0.45, 0.42))
    for i, (_name, rs) in enumerate(by_policy(runs).items()):
        mean = column_means([r.alloc_pct for r in rs])
        inset.plot(ARRIVED[85:], mean[85:], color=colors[i % len(colors)], lw=1.2)
    inset.set_xlim(85, 130)
    inset.grid(alpha=0.3)
    inset.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def load_expected(path: Path | str, workload: str, metric: str = "allo") -> dict[str, dict[int, np.ndarray]]:
    """The paper's per-seed curves from fgd-expected/analysis_{allo,frag_ratio}_discrete.csv.

    Returns {policy: {seed: [131] values}} for one workload (e.g. "openb_pod_list_default").
    """
    file = Path(path) / f"analysis_{metric}_discrete.csv"
    out: dict[str, dict[int, np.ndarray]] = {}
    with file.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        first = header.index("0")
        for row in reader:
            if row[0] != workload:
                continue
            name = PAPER_POLICY.get(row[1], row[1])
            out.setdefault(name, {})[int(row[3])] = np.array([float(v) if v else np.nan for v in row[first:]])
    return out


def expected_means(path: Path | str, workload: str, metric: str = "allo") -> dict[str, np.ndarray]:
    return {p: column_means(list(seeds.values())) for p, seeds in load_expected(path, workload, metric).items()}
