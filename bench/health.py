"""Health benchmark: health scoring on real HBM error logs, beside the authors' published figures.

What it runs:
  1. `gpuaware health evaluate --hbm-errors <Calchas public file> --lead-hours 1,6,24 --out <tmp>`, the
     command itself (a subprocess of this interpreter): its summary.json is the headline, with the
     acceptance checks: recall at 1/6/24 h lead at least the never-recover rule's,
     quarantined server-hours at most half of the hours that rule withholds;
  2. the tuning record, through the same library code (gpuaware.sim.hbm, one replay per
     configuration): the aftershock amplitude K over a grid, scored on the whole file and on each half
     of it (tune on the first half, check on the second); the corrected-error term off / default /
     4x; the quarantine threshold of the risk;
  3. the Calchas authors' server-level figures (PROVENANCE.md), quoted beside ours with the caveat that
     their protocol differs.
The simulated fleet, "fleet" in the results (``--section fleet`` runs it alone, ``--section calchas``
the above alone; the other section's figures are kept from the existing file):
  4. a SimulatedFleet of 128 nodes x 8 GPUs (A100 80GB, H100, A100 40GB from the one catalog, load from
     the real utilisation traces) for 7 simulated days; faults drawn by gpuaware.sim.fleet_faults from
     the real data (StepFun kinds, rate, durations, recurrences and fan faults; Titan's rate as a check;
     Calchas histories replayed before every DBE failure, and its quiet corrected-error bursts as
     noise), the StepFun-derived rates multiplied by a stated factor so there are enough failures to
     count; what no data set says is an Assumptions field, written beside the figures;
  5. one observation per GPU per minute (the raw-sample form: cumulative ECC and PCIe counters,
     temperature, power, thermal throttle bits, the minute's XIDs), every one through
     gpuaware.health.score_stream with one HealthBook (the service's code, every GPU at full cadence:
     nothing is thinned), GPUs with a recurrence or a Calchas history carrying their months before
     the window at the history's hourly cadence; the peers' never-recover rule on the same
     observations (gpuaware.sim.health_fleet);
  6. the figures: share of failures with precursors flagged >= 10 minutes before them, median and
     p10 lead, healthy GPUs ever quarantined / degraded (in all, and per kind of transient fault),
     transient faults recovered from, unhealthy GPU-hours; ours beside the peers'; acceptance with
     the service's default HealthConfig;
  7. a tuning record (``--skip-tuning`` leaves it out): xid_beta 2.5e-3 and thermal_beta 2e-4, each
     re-scoring only the GPUs whose stream it can change: what either change costs
     (``fleet.tuning.how``).

Writes bench/results/health.json (machine noted, repository-relative paths only). The data stays in
../shared/data (GPUAWARE_SHARED_DATA). Run: `make bench-health` or `.venv/bin/python bench/health.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from bench_paths import RESULTS_DIR, ROOT
from machine_info import load_average
from machine_info import machine as shared_machine
from rich.console import Console
from rich.table import Table

from gpuaware.gpu import FleetNode, FleetSpec, SimulatedFleet
from gpuaware.health import HealthBook, HealthConfig, Observation, XidClass, classify_xid
from gpuaware.schemas import find_gpu_model
from gpuaware.sim import (
    CALCHAS_FILE,
    SIGNATURES,
    STEPFUN_FILE,
    TITAN_FILE,
    FailureTruth,
    FaultPlan,
    FleetRun,
    GpuTruth,
    HbmEvaluation,
    HbmEvent,
    NeverRecoverRule,
    Rendered,
    draw_plan,
    fleet_metrics,
    history_observations,
    load_calibration,
    minute_observations,
    parse_hbm_csv,
    render,
    replay_all,
    score_gpu,
    score_replays,
    shared_data_dir,
)

RESULTS = RESULTS_DIR / "health.json"
CALCHAS = Path("gpu-faults") / "calchas-hbm" / "hbm_errors_public.csv"
LEADS = (1, 6, 24)
K_GRID = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 2.0)
GPU_FAULTS = Path("gpu-faults")
FLEET_START = 1_717_200_000.0          # 2024-06-01 00:00 UTC: any fixed instant
FLEET_MODELS = ("A100-80GB", "A100-80GB", "H100", "A100-40GB")   # node k gets FLEET_MODELS[k % 4]
FLEET_SCALE = 100.0
"""StepFun's rate gives ~1 hard failure in 1,024 GPUs x 7 days; x100 gives ~97 expected (seed 13 draws 102,
65 of them with precursors). Fan faults (StepFun's class) are drawn at the same factor; the other transients
are Assumptions rates, unscaled."""
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


def _fleet(nodes: int, gpus_per_node: int, seed: int) -> SimulatedFleet:
    specs = tuple(FleetNode(f"gpu-node-{k:03d}", FLEET_MODELS[k % len(FLEET_MODELS)], gpus_per_node)
                  for k in range(nodes))
    return SimulatedFleet(FleetSpec(nodes=specs, seed=seed, traces="auto"), clock=lambda: FLEET_START)


def _truths(fleet: SimulatedFleet, plan: FaultPlan) -> dict[str, GpuTruth]:
    fails: dict[int, list[FailureTruth]] = {}
    for f in plan.failures:
        fails.setdefault(f.gpu, []).append(FailureTruth(at=f.at, end=f.end, kind=f.kind.value,
                                                        precursors=f.precursors, from_data=f.from_data))
    trans: dict[int, list[tuple[str, float, float]]] = {}
    for t in plan.transients:
        trans.setdefault(t.gpu, []).append((t.kind, t.start, t.end))
    return {u: GpuTruth(u, tuple(fails.get(g, ())), tuple(trans.get(g, ()))) for g, u in enumerate(fleet.uuids)}


class FleetStreams:
    """The fleet's base telemetry and fault plan, rendered per GPU on demand into observations."""

    def __init__(self, *, nodes: int, gpus_per_node: int, days: float, scale: float, seed: int,
                 gpu_faults: Path, console: Console) -> None:
        self.cal = load_calibration(gpu_faults)
        self.fleet = _fleet(nodes, gpus_per_node, seed)
        self.per_node = gpus_per_node
        self.plan = draw_plan(self.cal, n_gpus=self.fleet.n_gpus, gpus_per_node=gpus_per_node, start=FLEET_START,
                              days=days, scale=scale, seed=seed)
        self.steps = round(days * 1440)
        self.temps = np.empty((self.steps, self.fleet.n_gpus), dtype=np.float32)
        self.power = np.empty((self.steps, self.fleet.n_gpus), dtype=np.float32)
        with console.status("sampling the fleet's base telemetry"):
            for k in range(self.steps):
                frame = self.fleet.sample(FLEET_START + 60.0 * (k + 1))
                self.temps[k] = frame.column("temperature_c")
                self.power[k] = frame.column("power_w")
        self.models = {n: find_gpu_model(FLEET_MODELS[k % len(FLEET_MODELS)]) for k, n in enumerate(self.fleet.nodes)}

    def render(self, g: int) -> Rendered:
        return render(self.plan.effects_of(g), start=self.plan.start, step_s=60.0, n=self.steps,
                      base_temp_c=self.temps[:, g], slowdown_c=float(self.fleet.slowdown[g]))

    def observations(self, g: int, r: Rendered) -> Iterator[Observation]:
        """History (hourly, before the window) then one raw-sample observation a minute."""
        uuid, node = self.fleet.uuids[g], self.fleet.nodes[g // self.per_node]
        m = self.models[node]
        kw: dict[str, Any] = {"node": node, "gpu_index": int(self.fleet.gpu_index[g]),
                              "model": m.nvml_name if m is not None else None}
        return itertools.chain(
            history_observations(uuid, before=r.before, **kw),
            minute_observations(uuid, times=r.times.tolist(), xids=r.xids, present=r.present.tolist(), columns={
                "temperature_c": r.temperature_c.tolist(),
                "power_w": np.round(self.power[:, g].astype(np.float64), 1).tolist(),
                "power_limit_w": [float(self.fleet.power_limit[g])] * self.steps,
                "throttle_reasons": r.thermal.tolist(),
                "ecc_corrected_aggregate": r.ce.tolist(),
                "ecc_uncorrected_aggregate": r.ue.tolist(),
                "pcie_replay": r.pcie.tolist(),
            }, **kw))

    def truths(self) -> dict[str, GpuTruth]:
        return _truths(self.fleet, self.plan)


def run_fleet(streams: FleetStreams, config: HealthConfig, console: Console, *,
              only: Callable[[Rendered], bool] | None = None, base: FleetRun | None = None) -> FleetRun:
    """Score every GPU's stream with one HealthBook (and the peers' rule). With ``only`` and ``base``: score
    only the GPUs whose rendered telemetry ``only`` accepts and take the others' timelines from ``base``
    (for a variant that provably cannot change them)."""
    fleet = streams.fleet
    book, rule = HealthBook(config), NeverRecoverRule()
    run = FleetRun(start=streams.plan.start, end=streams.plan.end, truths=streams.truths(), config=config)
    history = absent = scored_gpus = 0
    t = time.perf_counter()
    with console.status("scoring") as status:
        for g, uuid in enumerate(fleet.uuids):
            r = streams.render(g)
            if only is not None and base is not None and not only(r):
                run.ours[uuid], run.peers[uuid] = base.ours[uuid], base.peers[uuid]
                continue
            scored_gpus += 1
            history += len(r.before)
            absent += int((~r.present).sum())
            ours, peers, n = score_gpu(book, rule, streams.observations(g, r))
            run.ours[uuid], run.peers[uuid] = ours, peers
            run.observations += n
            if g % 64 == 63:
                status.update(f"scoring: {g + 1}/{fleet.n_gpus} GPUs, {run.observations:,} observations")
    run.info = {"gpus_scored": scored_gpus, "history_observations": history, "minutes_without_telemetry": absent,
                "scoring_s": round(time.perf_counter() - t, 1), "input_counters": book.counters().as_dict()}
    return run


def _weighted_xid(r: Rendered) -> bool:
    """The stream holds an XID the risk's XID frequency counts (not application-class, not unknown)."""
    codes = {x for xs in r.xids.values() for x in xs} | {x for *_, xs in r.before for x in xs}
    return any((i := classify_xid(x)) is not None and i.xid_class is not XidClass.APPLICATION for x in codes)


def _near_slowdown(config: HealthConfig, slowdown_c: float) -> Callable[[Rendered], bool]:
    def near(r: Rendered) -> bool:
        """Thermal drift counts only within headroom_ok_c of the slowdown temperature (the fleet's lowest)."""
        return bool((r.temperature_c >= slowdown_c - config.score.headroom_ok_c).any())
    return near


def plan_summary(plan: FaultPlan) -> dict[str, Any]:
    fs = plan.failures
    return {
        "scale": plan.scale,
        "rates": plan.rates,
        "failures": len(fs),
        "failures_by_kind": dict(Counter(f.kind.value for f in fs).most_common()),
        "with_precursors": sum(bool(f.precursors) for f in fs),
        "with_precursors_from_data": sum(f.from_data for f in fs),
        "by_first_precursor": dict(Counter(f.precursors[0] for f in fs if f.precursors).most_common()),
        "prior_faults_of_recurrences": len(plan.prior_faults),
        "transients": dict(Counter(t.kind for t in plan.transients).most_common()),
        "gpus_with_transients": len({t.gpu for t in plan.transients}),
        "signatures": {k.value: v for k, v in SIGNATURES.items()},
    }


VARIANTS = (
    ("xid_beta 2.5e-3 (it takes three or four system XIDs within hours to degrade)", {"risk": {"xid_beta": 2.5e-3}},
     "xid"),
    ("thermal_beta 2e-4 (the earlier prior: 26 degC of drift alone quarantines)", {"risk": {"thermal_beta": 2e-4}},
     "thermal"),
)


def fleet_section(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    src = shared_data_dir(ROOT) / GPU_FAULTS
    started = time.perf_counter()
    t = time.perf_counter()
    streams = FleetStreams(nodes=args.fleet_nodes, gpus_per_node=8, days=args.fleet_days, scale=args.fleet_scale,
                           seed=args.fleet_seed, gpu_faults=src, console=console)
    setup_s = time.perf_counter() - t
    config = HealthConfig()
    run = run_fleet(streams, config, console)
    metrics = fleet_metrics(run)
    ours, peers = metrics["ours"], metrics["peers"]
    tuning_rows = []
    if not args.skip_tuning:
        for name, change, kind in VARIANTS:
            cfg = config.replace(**change)
            only = _weighted_xid if kind == "xid" else _near_slowdown(cfg, float(streams.fleet.slowdown.min()))
            with console.status(name):
                v = run_fleet(streams, cfg, console, only=only, base=run)
            vm = fleet_metrics(v)["ours"]
            tuning_rows.append({
                "variant": name, "change": change, "gpus_rescored": v.info["gpus_scored"],
                "flagged_10min_share": vm["detection"]["flagged_share"],
                "flagged_by_precursor": {k: x["flagged_share"] for k, x in vm["by_precursor"].items()},
                "lead_h_median": vm["detection"]["lead_h_median"], "lead_h_p10": vm["detection"]["lead_h_p10"],
                "healthy_ever_quarantined": vm["healthy_ever_quarantined"],
                "healthy_ever_degraded": vm["healthy_ever_degraded"],
                "transient_recovered": vm["transient_recovered"],
                "unhealthy_gpu_hours": vm["unhealthy_gpu_hours"],
            })
    fl = streams.fleet
    section = {
        "machine": {**shared_machine("msgspec", "numpy"), "load_average": load_average()},
        "command": (f".venv/bin/python bench/health.py --section fleet --fleet-nodes {args.fleet_nodes} "
                    f"--fleet-days {args.fleet_days:g} --fleet-scale {args.fleet_scale:g} --fleet-seed {args.fleet_seed}"),
        "data": {name: rel(src / p) for name, p in (("stepfun", STEPFUN_FILE), ("titan", TITAN_FILE),
                                                   ("calchas", CALCHAS_FILE))},
        "fleet": {
            "nodes": args.fleet_nodes, "gpus_per_node": 8, "gpus": fl.n_gpus, "days": args.fleet_days,
            "gpus_by_model": dict(sorted(Counter(m.nvml_name for m in streams.models.values() if m
                                                 for _ in range(8)).items())),
            "load": "SimulatedFleet(traces='auto'): real utilisation traces (GenTD26, Helios) drive power and temperature",
            "cadence_s": 60.0, "thinned": "no: every GPU is observed every minute",
            "observations_scored": run.observations,
            **run.info,
            "observations_per_s": round(run.observations / max(run.info["scoring_s"], 1e-9)),
            "setup_s": round(setup_s, 1),
            "scoring_order": ("GPU after GPU, each in time order, through one HealthBook: tracks are independent, "
                              "so this is the same as the interleaved stream the service sees"),
        },
        "calibration": streams.cal.summary(),
        "assumptions": dataclasses.asdict(streams.cal.assumptions),
        "plan": plan_summary(streams.plan),
        "metrics": metrics,
        "acceptance": {
            "config": "HealthConfig() defaults, the service's",
            "failures_with_precursors": ours["detection"]["failures"],
            "failures_with_precursors_at_least_50": ours["detection"]["failures"] >= 50,
            "flagged_10min_share": ours["detection"]["flagged_share"],
            "flagged_10min_at_least_90pct": (ours["detection"]["flagged_share"] or 0) >= 0.9,
            "flagged_10min_share_data_derived_precursors": ours["detection_from_data_only"]["flagged_share"],
            "healthy_ever_quarantined": ours["healthy_ever_quarantined"],
            "healthy_quarantined_at_most_5pct": (ours["healthy_ever_quarantined"] or 0) <= 0.05,
            "peers_flagged_10min_share": peers["detection"]["flagged_share"],
            "peers_healthy_ever_quarantined": peers["healthy_ever_quarantined"],
        },
        "tuning": {
            "how": ("Each variant re-scores only the GPUs whose telemetry it can change (XID variant: streams with an "
                    "XID the risk's XID frequency counts; thermal variant: streams that come within headroom_ok_c "
                    "of 83 degC, the lowest slowdown of the fleet's models) and keeps the default run's timelines "
                    "for the rest, which is exact: without such an input the changed term is zero in both runs. "
                    "Two defaults were changed after earlier runs of this fleet, and say so: the XID frequency now "
                    "counts each non-quarantining system or hardware XID 1 (was: system 1/2, and quarantining XIDs "
                    "counted again beside their burst), with xid_beta 5e-3 unchanged, so two such XIDs within hours "
                    "degrade and one does not (the earlier weighting caught 47 % of the XID-burst precursors); "
                    "thermal_beta went from 2e-4 to 1e-4 (drift alone degrades from about 8 degC past "
                    "thermal_drift_c and cannot quarantine before the hardware slowdown rule acts; 2e-4 quarantined "
                    "GPUs whose fans failed and caught no failure earlier). The variants show what halving the XID "
                    "weight, or the earlier thermal weight, changes. Neither term is "
                    "in the Calchas replay (no XIDs, no temperatures): section (a) does not depend on them."),
            "variants": tuning_rows,
        },
        "config": dataclasses.asdict(config),
    }
    section["wall_s"] = round(time.perf_counter() - started, 1)
    return section


def print_fleet(console: Console, f: dict[str, Any]) -> None:
    o, p = f["metrics"]["ours"], f["metrics"]["peers"]
    fl = f["fleet"]
    table = Table(title=(f"Simulated fleet: {fl['gpus']:,} GPUs x {fl['days']:g} days, "
                         f"{fl['observations_scored']:,} observations; hard-failure rate x{f['plan']['scale']:g}"))
    table.add_column("")
    table.add_column("gpuaware", justify="right")
    table.add_column("never-recover rule", justify="right")

    def row(label: str, get: Any, fmt: str = "{}") -> None:
        def one(m: dict[str, Any]) -> str:
            v = get(m)
            return "-" if v is None else fmt.format(v)
        table.add_row(label, one(o), one(p))

    d = o["detection"]
    row(f"failures with precursors flagged >= 10 min before (of {d['failures']})",
        lambda m: m["detection"]["flagged_share"], "{:.1%}")
    row("  from data-derived precursors only", lambda m: m["detection_from_data_only"]["flagged_share"], "{:.1%}")
    row("  lead time median / p10 (h)", lambda m: (f"{m['detection']['lead_h_median']} / {m['detection']['lead_h_p10']}"
                                                   if m["detection"]["lead_h_median"] is not None else None))
    row("  flagged within 10 min after the failure", lambda m: m["detection"]["flagged_within_lead_after"], "{:.1%}")
    for k, v in sorted(o["by_precursor"].items()):
        row(f"  precursor {k} (n={v['failures']})", lambda m, k=k: m["by_precursor"][k]["flagged_share"], "{:.1%}")
    row(f"failures without precursors flagged before (of {o['detection_without_precursors']['failures']})",
        lambda m: m["detection_without_precursors"]["flagged_share"], "{:.1%}")
    row(f"healthy GPUs ever quarantined (of {o['healthy_gpus']})", lambda m: m["healthy_ever_quarantined"], "{:.2%}")
    row("healthy GPUs ever degraded", lambda m: m["healthy_ever_degraded"], "{:.2%}")
    for k, v in sorted(o["by_transient"].items()):
        row(f"  with {k} (n={v['gpus']}): quarantined / degraded",
            lambda m, k=k: f"{m['by_transient'][k]['ever_quarantined']:.1%} / {m['by_transient'][k]['ever_degraded']:.1%}")
    row(f"untouched GPUs ever flagged (of {o['untouched_gpus']})", lambda m: m["untouched_ever_degraded"], "{:.2%}")
    row("GPUs flagged after transient faults: recovered",
        lambda m: (f"{m['transient_recovered']['recovered']}/{m['transient_recovered']['eligible']}"
                   f" (flagged {m['transient_flagged']} of {m['transient_gpus']})"))
    row("hard faults cleared: back in service / healthy",
        lambda m: (f"{m['hard_faults_cleared']['back_in_service']} / {m['hard_faults_cleared']['back_to_healthy']}"
                   f" of {m['hard_faults_cleared']['eligible']}"))
    row("unhealthy GPU-hours: flagged (quarantined)",
        lambda m: f"{m['unhealthy_gpu_hours']['flagged']:,.0f} ({m['unhealthy_gpu_hours']['quarantined']:,.0f})")
    row("  on healthy GPUs: flagged (quarantined)",
        lambda m: (f"{m['unhealthy_gpu_hours']['healthy_gpus_flagged']:,.0f} "
                   f"({m['unhealthy_gpu_hours']['healthy_gpus_quarantined']:,.0f})"))
    console.print(table)
    rows = f.get("tuning", {}).get("variants", [])
    if rows:
        t = Table(title="tuning record (not the defaults; see tuning.how)")
        for col in ("variant", "GPUs re-scored", "flagged >= 10 min", "healthy quarantined", "healthy degraded"):
            t.add_column(col, justify="left" if col == "variant" else "right")
        def pct(x: float | None, d: int = 1) -> str:
            return "-" if x is None else f"{x:.{d}%}"

        t.add_row("defaults", "-", pct(o["detection"]["flagged_share"]), pct(o["healthy_ever_quarantined"], 2),
                  pct(o["healthy_ever_degraded"], 2))
        for v in rows:
            t.add_row(v["variant"], str(v["gpus_rescored"]), pct(v["flagged_10min_share"]),
                      pct(v["healthy_ever_quarantined"], 2), pct(v["healthy_ever_degraded"], 2))
        console.print(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--section", choices=("all", "calchas", "fleet"), default="all",
                    help="run one section; the other's figures are kept from the existing --out file")
    ap.add_argument("--skip-tuning", action="store_true", help="only the evaluation, not the tuning record")
    ap.add_argument("--fleet-nodes", type=int, default=128, help="8 GPUs each (default 128: 1,024 GPUs)")
    ap.add_argument("--fleet-days", type=float, default=7.0)
    ap.add_argument("--fleet-scale", type=float, default=FLEET_SCALE, help="factor on the StepFun-derived rates")
    ap.add_argument("--fleet-seed", type=int, default=13)
    args = ap.parse_args()
    console = Console(width=140)
    src = shared_data_dir(ROOT) / CALCHAS
    if not src.is_file():
        console.print(f"[red]Calchas file not found at {src}[/red]: set GPUAWARE_SHARED_DATA to the shared/data folder")
        return 2
    previous: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    ok = True
    if args.section in ("all", "calchas"):
        report, ok = calchas_section(args, src, console)
        if "fleet" in previous and args.section == "calchas":
            report["fleet"] = previous["fleet"]
    else:
        report = previous
    if args.section in ("all", "fleet"):
        report["fleet"] = fleet_section(args, console)
        acc = report["fleet"]["acceptance"]
        ok = ok and acc["flagged_10min_at_least_90pct"] and acc["healthy_quarantined_at_most_5pct"] and acc[
            "failures_with_precursors_at_least_50"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.section in ("all", "calchas"):
        print_table(console, report["evaluate"]["summary"], report.get("tuning", {"aftershock_k_grid": [],
                                                                               "time_split": {}}))
    if args.section in ("all", "fleet"):
        print_fleet(console, report["fleet"])
        console.print(f"fleet section: {report['fleet']['wall_s']} s")
    console.print(f"wrote {rel(args.out)}")
    return 0 if ok else 1


def calchas_section(args: argparse.Namespace, src: Path, console: Console) -> tuple[dict[str, Any], bool]:
    """Section (a): the Calchas file through `gpuaware health evaluate`, with the tuning record."""
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
    }
    if not args.skip_tuning:
        with src.open(newline="", encoding="utf-8") as f:
            events = parse_hbm_csv(f)
        report["tuning"] = tuning(events, console)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    ok = report["acceptance"]["quarantined_at_most_half"] and all(
        report["acceptance"]["recall_at_least_never_recover"].values())
    return report, ok


if __name__ == "__main__":
    sys.exit(main())
