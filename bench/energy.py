"""Energy benchmark: idle GPU nodes switched off on the Philly node sequence, CES against gpuaware's planner.

What it runs (gpuaware.power), on the published Helios CES setup (HeliosArtifact ``framework/CES
Service/CES_Philly.py``: active nodes per 10 minutes (max), train October, validate November, replay
2017-12-01 00:00 .. 12-14 23:50, 2016 steps):
  (a) the CES policy as published (history 2, future 30, buffer 20, keep 10) driven by persistence;
  (b) the same policy driven by gpuaware's served forecast (gpuaware.forecast: per horizon the model
      chosen on November among the baselines and the ridge, fitted on October);
  (c) gpuaware's planner (the served forecast's calibrated p90 over the boot delay and a lead, a
      buffer, a hold after a shortfall, an idle time before a node goes off);
  (d) the oracle (knows the demand to come; powers off exactly what is not needed, boot delay honoured).
Every policy is replayed with the same boot delay (600 s: a node switched on serves from the step after
next); the published simulation's own assumption, no delay, is in the sweep beside 1200 s. Figures:
powered-off node-hours, shortfall events (steps whose demand exceeded the ready nodes), shortfall
episodes (runs of such steps), shortfall node-minutes (an upper bound: a step's demand is its max), and
the distance to the oracle. November (validation) is replayed the same way, with the served forecast of
the same recipe one month earlier, as the check on the planner's settings that does not look at December.

Writes bench/results/energy.json (strict JSON, repository-relative paths) and bench/results/energy.md.
The data stays in ../shared/data (GPUAWARE_SHARED_DATA); without the file it says so and writes nothing.
Run: `make bench-energy` or `.venv/bin/python bench/energy.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average, machine
from rich.console import Console

from gpuaware.power import (
    PHILLY_FILE,
    PHILLY_SPLIT,
    CesParams,
    CesPolicy,
    NodeSeries,
    Oracle,
    Outlook,
    Planner,
    PlannerParams,
    ReplayResult,
    load_node_series,
    persistence_outlook,
    replay,
    served_outlook,
)
from gpuaware.sim import shared_data_dir

RESULTS = RESULTS_DIR / "energy.json"
BOOT_DELAY_S = 600.0
SWEEP_BOOT_DELAYS_S = (0.0, 600.0, 1200.0)
SENSITIVITY = {"buffer": (3, 5, 8), "idle_steps": (1, 3, 6)}
"""the planner's settings varied one at a time around its defaults, on both ranges"""
PERSISTENCE_10MIN_RMSE = 10.33
"""PROVENANCE.txt's persistence(t-10min) RMSE on the test range: the loader's check"""
console = Console()


def _rel(path: Path) -> str:
    """Relative to the repository root (the shared data sits beside it: ../shared/data/...)."""
    return os.path.relpath(Path(path).resolve(), ROOT)


def _strict(value: Any) -> Any:
    """NaN and infinities become None, numpy scalars plain numbers: the report is strict JSON."""
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def horizon() -> int:
    """Steps of forecast every policy reads: CES's two windows, the planner's reach at the largest delay."""
    reach = max(PlannerParams(boot_delay_s=d).reach for d in SWEEP_BOOT_DELAYS_S)
    return max(2 * CesParams().future - 1, reach)


def four_policies(window: NodeSeries, served: Outlook, boot_delay_s: float,
                  planner: PlannerParams | None = None) -> dict[str, ReplayResult]:
    """(a)-(d) replayed over ``window`` with one boot delay."""
    active, total = window.held()
    step = window.step_s
    params = planner or PlannerParams(boot_delay_s=boot_delay_s, step_s=step)
    persistence = persistence_outlook(active, served.horizon, window.start, step)
    policies = {"ces+persistence": CesPolicy(persistence.point), "ces+served": CesPolicy(served.point),
                "planner": Planner(served.upper, params), "oracle": Oracle(active, boot_delay_s, step)}
    return {name: replay(name, policy, active, total, step, boot_delay_s, window.start)
            for name, policy in policies.items()}


def table(results: dict[str, ReplayResult]) -> list[dict[str, Any]]:
    """One row per policy, with the distance to the oracle (node-hours it leaves on, share of the oracle's
    savings it gets)."""
    best = results["oracle"].off_node_hours
    rows = []
    for r in results.values():
        row = r.summary()
        row["node_hours_short_of_oracle"] = round(best - r.off_node_hours, 2)
        row["share_of_oracle_savings"] = round(r.off_node_hours / best, 4) if best else None
        rows.append(row)
    return rows


def check_alignment(window: NodeSeries, outlook: Outlook) -> None:
    """The forecasting library loaded the file on its own: its range must be this replay's, step for step."""
    if abs(outlook.start - window.start) > 1e-6 or outlook.point.shape[0] != len(window):
        raise SystemExit(f"the served forecast covers {outlook.point.shape[0]} steps from "
                         f"{pd.Timestamp(outlook.start, unit='s')}, the replay {len(window)} from "
                         f"{pd.Timestamp(window.start, unit='s')}: they must be one range")


def persistence_check(series: NodeSeries) -> dict[str, Any]:
    """persistence(t-10min) RMSE over the test range from this loader, against PROVENANCE.txt's figure."""
    lo, hi = series.index_of(PHILLY_SPLIT["test"][0]), series.index_of(PHILLY_SPLIT["test"][1])
    a = series.active
    err = a[lo:hi] - a[lo - 1: hi - 1]
    got = float(np.sqrt(np.nanmean(err ** 2)))
    return {"expected": PERSISTENCE_10MIN_RMSE, "got": round(got, 2), "agrees": bool(round(got, 2) == PERSISTENCE_10MIN_RMSE)}


def markdown(report: dict[str, Any]) -> str:
    def rows(entries: list[dict[str, Any]]) -> list[str]:
        label = {"ces+persistence": "(a) CES + persistence", "ces+served": "(b) CES + served forecast",
                 "planner": "(c) gpuaware planner (served p90)", "oracle": "(d) oracle"}
        return [f"| {label[e['policy']]} | {e['powered_off_node_hours']:,.1f} | {e['shortfall_events']} | "
                f"{e['shortfall_episodes']} | {e['shortfall_node_minutes']:,.0f} | "
                f"{e['node_hours_short_of_oracle']:,.1f} | {100 * e['share_of_oracle_savings']:.1f} % |"
                for e in entries]

    head = ["| policy | powered-off node-hours | shortfall events | episodes | shortfall node-minutes | "
            "node-hours short of the oracle | share of the oracle's savings |", "|---|---|---|---|---|---|---|"]
    p = report["planner_params"]
    out = ["# Energy: idle nodes switched off on the Philly node sequence", "",
           "`make bench-energy` (`.venv/bin/python bench/energy.py`) writes `energy.json`; this is its summary.",
           "Setup of the Helios CES service (HeliosArtifact `framework/CES Service/CES_Philly.py`): active "
           "nodes per 10 minutes (max), forecasts fitted on October and chosen on November, replay "
           f"{report['test']['range']} ({report['test']['steps']} steps, {report['total_nodes']} nodes). "
           "Every policy is replayed with the same boot delay: a node switched on serves only once "
           f"{report['boot_delay_s']:.0f} s have passed (from the step after next). A shortfall event is a "
           "step whose demand exceeded the ready nodes; an episode, a run of them; node-minutes are an upper "
           "bound (a step's demand is its max).", "",
           f"Planner: p90 over the next {p['reach']} steps, buffer {p['buffer']}, lead {p['lead_steps']} step, "
           f"hold {p['hold']} steps after a shortfall, {p['idle_steps']} idle steps before a node goes off. "
           "CES: history 2, future 30, buffer 20, keep 10 (as published).", "",
           f"## December 1-14 (test), boot delay {report['boot_delay_s']:.0f} s", "", *head,
           *rows(report["test"]["policies"]), "",
           "## November (validation: forecast from the same recipe one month earlier)", "", *head,
           *rows(report["validate"]["policies"]), "", "## Boot delay (December)", "",
           "| boot delay | policy | powered-off node-hours | shortfall events | shortfall node-minutes |",
           "|---|---|---|---|---|"]
    for delay, entries in report["boot_delay_sweep"].items():
        out += [f"| {delay} s | {e['policy']} | {e['powered_off_node_hours']:,.1f} | {e['shortfall_events']} | "
                f"{e['shortfall_node_minutes']:,.0f} |" for e in entries]
    verdict = report["planner_vs_ces_persistence"]
    out += ["", "Planner against (a), powered-off node-hours and shortfall events: "
            + "; ".join(f"{k} {v['off_node_hours_gain_pct']:+.1f} %, {v['shortfall_events']} vs "
                        f"{v['ces_persistence_shortfall_events']} events" for k, v in verdict.items()) + ".",
            "", f"Loader check: persistence(t-10 min) RMSE on the test range {report['persistence_10min_check']['got']} "
            f"(PROVENANCE.txt: {report['persistence_10min_check']['expected']}).", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    path = shared_data_dir(ROOT) / PHILLY_FILE
    if not path.is_file():
        console.print(f"[yellow]skipped[/yellow]: {path} not found; set GPUAWARE_SHARED_DATA to the "
                      "shared/data folder that holds philly-node-sequence/ (nothing written)")
        return 0
    started = time.time()
    report: dict[str, Any] = {"machine": machine("numpy", "pandas", "statsmodels"),
                              "load_average_before": load_average(), "how": __doc__.split("\n\n")[1],
                              "file": _rel(path), "boot_delay_s": BOOT_DELAY_S}
    console.print(f"[1/5] loading {_rel(path)}")
    series = load_node_series(path)
    report["series_notes"] = list(series.notes)
    report["persistence_10min_check"] = persistence_check(series)
    windows = {name: series.window(*PHILLY_SPLIT[key]) for name, key in (("test", "test"), ("validate", "validate"))}
    steps = horizon()
    outlooks: dict[str, Outlook] = {}
    for i, name in enumerate(("test", "validate"), start=2):
        console.print(f"[{i}/5] served forecast for the {name} range, 1..{steps} steps ahead (gpuaware.forecast)")
        t0 = time.perf_counter()
        outlooks[name] = served_outlook(path, steps, window="test" if name == "test" else "validate")
        check_alignment(windows[name], outlooks[name])
        console.print(f"      {time.perf_counter() - t0:.1f} s")
    report["total_nodes"] = int(np.nanmax(windows["test"].total))
    console.print(f"[4/5] replaying the four policies (boot delay {BOOT_DELAY_S:.0f} s) and the sweeps")
    default = PlannerParams(boot_delay_s=BOOT_DELAY_S)
    report["planner_params"] = {**dataclasses.asdict(default), "reach": default.reach}
    report["ces_params"] = dataclasses.asdict(CesParams())
    verdict: dict[str, Any] = {}
    for name in ("test", "validate"):
        w, o = windows[name], outlooks[name]
        results = four_policies(w, o, BOOT_DELAY_S)
        report[name] = {"range": f"[{PHILLY_SPLIT[name][0]}, {PHILLY_SPLIT[name][1]})", "steps": len(w),
                        "notes": list(w.notes[-1:]), "policies": table(results),
                        "forecast": {k: v for k, v in o.info.items() if k != "series_notes"},
                        "planner_recommendations": {
                            "count": len(results["planner"].recommendations),
                            "first": [{"action": r.action, "count": r.count,
                                       "at": str(pd.Timestamp(r.at, unit="s", tz="UTC"))}
                                      for r in results["planner"].recommendations[:5]]}}
        for delay in SWEEP_BOOT_DELAYS_S:
            swept = results if delay == BOOT_DELAY_S else four_policies(w, o, delay)
            if name == "test":
                report.setdefault("boot_delay_sweep", {})[f"{delay:.0f}"] = table(swept)
            a, c = swept["planner"], swept["ces+persistence"]
            verdict[f"{name} {delay:.0f} s"] = {
                "off_node_hours_gain_pct": round(100.0 * (a.off_node_hours / c.off_node_hours - 1.0), 2),
                "shortfall_events": a.shortfall_events, "ces_persistence_shortfall_events": c.shortfall_events,
                "more_off_no_more_shortfalls": bool(a.off_node_hours > c.off_node_hours
                                                    and a.shortfall_events <= c.shortfall_events)}
        sens = []
        for knob, values in SENSITIVITY.items():
            for v in values:
                params = dataclasses.replace(default, **{knob: v})
                active, total = w.held()
                r = replay("planner", Planner(o.upper, params), active, total, w.step_s, BOOT_DELAY_S,
                           w.start).summary()
                sens.append({knob: v, **{k: r[k] for k in ("powered_off_node_hours", "shortfall_events",
                                                           "shortfall_node_minutes")}})
        report[name]["planner_sensitivity"] = sens
        console.print(f"      {name}: " + ", ".join(f"{e['policy']} {e['powered_off_node_hours']:,.0f} h / "
                                                    f"{e['shortfall_events']} events"
                                                    for e in report[name]["policies"]))
    report["planner_vs_ces_persistence"] = verdict
    report["load_average_after"] = load_average()
    report["wall_seconds"] = round(time.time() - started, 1)
    console.print("[5/5] writing the report")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_strict(report), indent=2, allow_nan=False) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    console.print(f"wrote {_rel(args.out)} and {_rel(args.out.with_suffix('.md'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
