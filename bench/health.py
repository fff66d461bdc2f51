"""Health benchmark: issue 13's evaluation on real HBM error logs, beside the authors' published figures.

What it runs:
  1. `gpuaware health evaluate --hbm-errors <Calchas public file> --lead-hours 1,6,24 --out <tmp>`, the
     command itself (a subprocess of this interpreter): its summary.json is the headline, with the
     acceptance checks of issue 13 (a): recall at 1/6/24 h lead at least the never-recover rule's,
     quarantined server-hours at most half of the hours that rule withholds;
  2. the tuning record, through the same library code (gpuaware.health.hbm, one replay per
     configuration): the aftershock amplitude K over a grid, scored on the whole file and on each half
     of it (tune on the first half, check on the second); the corrected-error term off / default /
     4x; the quarantine threshold of the risk;
  3. the Calchas authors' server-level figures (PROVENANCE.md), quoted beside ours with the caveat that
     their protocol differs.
Section (b) of issue 13 (a simulated fleet of >= 1,000 GPUs) is not here: it will score its stream
with gpuaware.health.score_stream, the same code.

Writes bench/results/health.json (machine noted, repository-relative paths only). The data stays in
../shared/data (GPUAWARE_SHARED_DATA). Run: `make bench-health` or `.venv/bin/python bench/health.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine_info import load_average
from machine_info import machine as shared_machine
from rich.console import Console
from rich.table import Table

from gpuaware.health import HealthConfig, parse_hbm_csv
from gpuaware.health.hbm import HbmEvaluation, HbmEvent, replay_all, score_replays
from gpuaware.sim import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "health.json"
CALCHAS = Path("gpu-faults") / "calchas-hbm" / "hbm_errors_public.csv"
LEADS = (1, 6, 24)
K_GRID = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0)
PUBLISHED = {
    "source": "Calchas (USENIX ATC 2024), the authors' result files, as quoted in "
              "../shared/data/gpu-faults/PROVENANCE.md",
    "server_level": {"precision": [0.32, 0.36], "recall": [0.55, 0.57]},
    "row_level": {"precision": [0.52, 0.84], "recall": [0.85, 0.88]},
    "protocol": "theirs, not ours: a learned predictor scored on their own split of servers and time, "
                "on all 50 servers (15 are not in the public file); ours is lead-time recall per UE episode "
                "and precision per escalation followed by an episode within 7 days. Side by side, not one to one.",
}


def rel(path: Path) -> str:
    return os.path.relpath(path, ROOT)


def figures(r: HbmEvaluation) -> dict[str, Any]:
    """The contract's figures of one scoring, flat enough to tabulate."""
    s = r.summary()
    return {
        "ue_episodes": s["ue_episodes"],
        "recall": {k: v["recall"] for k, v in s["lead_hours"].items()},
        "precision": {k: v["precision"] for k, v in s["lead_hours"].items()},
        "baseline_recall": s["baseline_any_ue_forever"]["recall_at"],
        "escalations": r.escalations,
        "quarantined_server_hours": s["quarantined_server_hours"],
        "degraded_server_hours": s["degraded_server_hours"],
        "baseline_unhealthy_server_hours": s["baseline_any_ue_forever"]["unhealthy_server_hours"],
        "meets_acceptance": meets(s),
    }


def meets(s: dict[str, Any]) -> bool:
    base = s["baseline_any_ue_forever"]
    return (all(s["lead_hours"][k]["recall"] >= base["recall_at"][k] for k in s["lead_hours"])
            and s["quarantined_server_hours"] <= 0.5 * base["unhealthy_server_hours"])


def run_cli(src: Path, console: Console) -> tuple[dict[str, Any], dict[str, Any], float, str]:
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        cmd = [sys.executable, "-m", "gpuaware.cli.main", "health", "evaluate", "--hbm-errors", str(src),
               "--lead-hours", ",".join(map(str, LEADS)), "--out", tmp]
        t = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if done.returncode != 0:
            console.print(done.stdout + done.stderr)
            raise SystemExit(f"gpuaware health evaluate failed with exit code {done.returncode}")
        summary = json.loads((Path(tmp) / "summary.json").read_text())
        detail = json.loads((Path(tmp) / "detail.json").read_text())
    detail["hbm_errors"] = rel(src)
    shown = (f"gpuaware health evaluate --hbm-errors {rel(src)} --lead-hours {','.join(map(str, LEADS))} "
             "--out <tmp>")
    return summary, detail, wall, shown


def tuning(events: list[HbmEvent], console: Console) -> dict[str, Any]:
    base = HealthConfig()
    t0 = min(e.time for e in events)
    t1 = max(e.time for e in events)
    mid = (t0 + t1) / 2
    grid = []
    for k in K_GRID:
        with console.status(f"aftershock K = {k}"):
            replays = replay_all(events, config=base.replace(risk={"aftershock_k": k}))
        grid.append({"aftershock_k": k,
                     "whole": figures(score_replays(events, replays, lead_hours=LEADS)),
                     "first_half": figures(score_replays(events, replays, lead_hours=LEADS, window=(None, mid))),
                     "second_half": figures(score_replays(events, replays, lead_hours=LEADS, window=(mid, None)))})
    chosen_whole = next((g["aftershock_k"] for g in grid if g["whole"]["meets_acceptance"]), None)
    chosen_first = next((g["aftershock_k"] for g in grid if g["first_half"]["meets_acceptance"]), None)
    split = next((g for g in grid if g["aftershock_k"] == chosen_first), None)

    def variant(name: str, cfg: HealthConfig) -> dict[str, Any]:
        with console.status(name):
            return {"variant": name, **figures(score_replays(events, replay_all(events, config=cfg), lead_hours=LEADS))}

    ce = [variant("corrected-error term off (ce_beta 0)", base.replace(risk={"ce_beta": 0.0})),
          variant("corrected-error term x4 (ce_beta 2e-4)", base.replace(risk={"ce_beta": 2e-4}))]
    rq = [variant(f"risk_quarantine {q}", base.replace(states={"risk_quarantine": q})) for q in (0.7, 0.9)]
    return {
        "how": (
            "Only the aftershock amplitude K was tuned on this file. K and risk_degrade act together "
            "(a burst keeps a GPU degraded while K * ln(1 + 168 / (dt + 1)) >= -ln(1 - risk_degrade)), so "
            "risk_degrade (5 % a week) and risk_quarantine (50 %) were fixed beforehand and K was swept over "
            f"{list(K_GRID)}; the default is the smallest grid value meeting the acceptance on the whole file. "
            "Honest check: the smallest value meeting it on the first half of the file's time span is scored on "
            "the second half (the replay always runs over the whole history; only the scoring is windowed). "
            "The corrected-error term cannot be tuned here (2 of the 27 servers with uncorrectable errors show "
            "corrected ones before their first); its weight is a prior, and the variants below show its cost. "
            "Nothing else (clean periods, confirmation, burst gap, horizon) was varied."),
        "aftershock_k_grid": grid,
        "chosen_on_whole_file": chosen_whole,
        "default_aftershock_k": base.risk.aftershock_k,
        "time_split": {
            "mid": mid,
            "chosen_on_first_half": chosen_first,
            "first_half": split["first_half"] if split else None,
            "second_half_with_it": split["second_half"] if split else None,
        },
        "ce_term": ce,
        "risk_quarantine": rq,
    }


def print_table(console: Console, summary: dict[str, Any], tune: dict[str, Any]) -> None:
    base = summary["baseline_any_ue_forever"]
    table = Table(title=f"Calchas public file: {summary['servers']} servers, {summary['ue_episodes']} UE episodes")
    for col in ("", "recall 1 h", "recall 6 h", "recall 24 h", "precision 1/6/24 h", "quarantined h", "degraded h"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("gpuaware (default)", *(f"{summary['lead_hours'][str(L)]['recall']:.3f}" for L in LEADS),
                  "/".join(f"{summary['lead_hours'][str(L)]['precision']:.3f}" for L in LEADS),
                  f"{summary['quarantined_server_hours']:,.0f}", f"{summary['degraded_server_hours']:,.0f}")
    table.add_row("never-recover rule", *(f"{base['recall_at'][str(L)]:.3f}" for L in LEADS), "-",
                  f"{base['unhealthy_server_hours']:,.0f}", "-")
    table.add_row("Calchas (their protocol)", "0.55-0.57", "", "", "0.32-0.36", "", "")
    console.print(table)
    grid = Table(title="aftershock K: whole file | second half with K tuned on the first")
    for col in ("K", "recall 1/6/24 h", "base recall", "precision", "quarantined h", "degraded h", "meets"):
        grid.add_column(col, justify="right")
    for g in tune["aftershock_k_grid"]:
        w = g["whole"]
        grid.add_row(f"{g['aftershock_k']}", "/".join(f"{w['recall'][str(L)]:.3f}" for L in LEADS),
                     f"{w['baseline_recall']['24']:.3f}", f"{w['precision']['24']:.3f}",
                     f"{w['quarantined_server_hours']:,.0f}", f"{w['degraded_server_hours']:,.0f}",
                     "yes" if w["meets_acceptance"] else "no")
    console.print(grid)
    ts = tune.get("time_split", {})
    if ts.get("second_half_with_it"):
        s2 = ts["second_half_with_it"]
        console.print(f"time split: K = {ts['chosen_on_first_half']} tuned on the first half -> second half recall "
                      f"{'/'.join(str(s2['recall'][str(L)]) for L in LEADS)} vs never-recover "
                      f"{'/'.join(str(s2['baseline_recall'][str(L)]) for L in LEADS)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--skip-tuning", action="store_true", help="only the evaluation, not the tuning record")
    args = ap.parse_args()
    console = Console(width=140)
    src = shared_data_dir(ROOT) / CALCHAS
    if not src.is_file():
        console.print(f"[red]Calchas file not found at {src}[/red]: set GPUAWARE_SHARED_DATA to the shared/data folder")
        return 2
    started = time.perf_counter()
    summary, detail, wall, shown = run_cli(src, console)
    base = summary["baseline_any_ue_forever"]
    report: dict[str, Any] = {
        "machine": {**shared_machine("msgspec"), "load_average": load_average()},
        "data": rel(src),
        "evaluate": {"command": shown, "wall_s": round(wall, 2), "summary": summary, "detail": detail},
        "acceptance": {
            "recall_at_least_never_recover": {str(L): summary["lead_hours"][str(L)]["recall"]
                                              >= base["recall_at"][str(L)] for L in LEADS},
            "quarantined_share_of_never_recover_hours": round(
                summary["quarantined_server_hours"] / base["unhealthy_server_hours"], 4),
            "quarantined_at_most_half": summary["quarantined_server_hours"] <= 0.5 * base["unhealthy_server_hours"],
        },
        "published": PUBLISHED,
        "config": dataclasses.asdict(HealthConfig()),
        "fleet": {"status": "not run here: issue 13 (b), the simulated fleet, comes with the health-scoring service",
                  "hook": "gpuaware.health.score_stream(observations, config, book=HealthBook(config))"},
    }
    if not args.skip_tuning:
        with src.open(newline="", encoding="utf-8") as f:
            events = parse_hbm_csv(f)
        report["tuning"] = tuning(events, console)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(console, summary, report.get("tuning", {"aftershock_k_grid": [], "time_split": {}}))
    console.print(f"wrote {rel(args.out)}")
    return 0 if report["acceptance"]["quarantined_at_most_half"] and all(
        report["acceptance"]["recall_at_least_never_recover"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
