"""`gpuaware eval placement`: replay a trace against placement policies, the FGD paper's way.

The command is a thin shell over gpuaware.sim: parse options, run the evaluation with a progress bar,
print a table, write DIR/summary.json (the contract other tools read), DIR/per_seed.csv,
DIR/alloc.png and, with --assignments, DIR/assignments/<policy>-<seed>.csv. Every option is checked
against its stated bounds before the replay starts (seeds: at most 1,000, each in 0..2^32-1), and the
outputs are written into a temporary folder renamed into place at the end (options.atomic_folder).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware.cli.options import atomic_folder, bounded, int_list, out_folder, refuse, strict_json
from gpuaware.placement import POLICIES, canonical_policy
from gpuaware.sim import (
    REPORT_AT,
    RunResult,
    TraceError,
    default_jobs,
    evaluate,
    plot_alloc,
    summarize,
    write_assignments,
    write_per_seed,
    write_summary,
)

app = typer.Typer(help="Evaluate placement policies against cluster traces.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Evaluations (placement)."""


SEED_MAX = 2**32 - 1
"""numpy's seeds are unsigned 32-bit here"""
MOST_SEEDS = 1_000


def parse_seeds(text: str) -> list[int]:
    """'42-51', '42,43,50' or a mix ('42-44,50') -> sorted unique seeds (at most ``MOST_SEEDS``, each in
    0..``SEED_MAX``; a range is checked before it is expanded)."""
    return int_list(text, name="--seeds", lo=0, hi=SEED_MAX, most=MOST_SEEDS, ranges=True)


def parse_policies(text: str | None) -> list[str]:
    if not text:
        return list(POLICIES)
    try:
        names = [canonical_policy(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return list(dict.fromkeys(names))


def _cell(v: float, fmt: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


@app.command("placement")
def placement(
    nodes: Annotated[Path, typer.Option("--nodes", help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)",
                                        exists=True, dir_okay=False)],
    trace: Annotated[Path, typer.Option("--trace", help="pod list CSV (openb format)", exists=True, dir_okay=False)],
    policies: Annotated[
        str | None, typer.Option("--policies", help=f"comma-separated policy names, of: {', '.join(POLICIES)} "
                                 "[default: all of them]")
    ] = None,
    seeds: Annotated[str, typer.Option("--seeds", help=f"seeds, e.g. 42-51 or 42,43 (at most {MOST_SEEDS:,}, "
                                       f"each in 0..{SEED_MAX})")] = "42-51",
    inflation: Annotated[
        float, typer.Option("--inflation", help="tune the workload to this multiple of GPU capacity (0-10]",
                            callback=bounded(0.0, 10.0, lo_open=True))
    ] = 1.3,
    out: Annotated[Path, typer.Option("--out", help="output directory", callback=out_folder)] = Path("eval-placement"),
    assignments: Annotated[
        bool, typer.Option("--assignments", help="also write one CSV of placements per run")
    ] = False,
    jobs: Annotated[int, typer.Option("--jobs", help="worker processes (1-64)", min=1, max=64)] = min(default_jobs(), 64),
    max_pods: Annotated[
        int | None, typer.Option("--max-pods", help="stop each run after this many arrivals (smoke tests; "
                                 "1-100,000,000)", min=1, max=100_000_000)
    ] = None,
) -> None:
    """Replay TRACE on NODES for each policy and seed; report allocation vs arrived load."""
    console = Console(width=max(Console().width, 132))
    seed_list = parse_seeds(seeds)
    policy_list = parse_policies(policies)
    total = len(seed_list) * len(policy_list)
    done: list[RunResult] = []
    try:  # the bar is closed before an error is printed (on standard error)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task("evaluating", total=total)

            def advance(r: RunResult) -> None:
                done.append(r)
                progress.update(task, advance=1,
                                description=f"{r.policy} seed {r.seed}: {r.alloc_pct[100]:.2f}% @100")

            runs = evaluate(nodes, trace, policy_list, seed_list, inflation, jobs=jobs,
                            record_assignments=assignments, max_pods=max_pods, on_result=advance)
    except TraceError as exc:
        refuse(exc)

    summary = summarize(runs, str(trace), str(nodes), seed_list)
    with atomic_folder(out) as tmp:
        write_summary(tmp / "summary.json", summary)
        write_per_seed(tmp / "per_seed.csv", runs)
        plot_alloc(tmp / "alloc.png", runs, f"{trace.stem}, {len(seed_list)} seed(s)")
        if assignments:
            write_assignments(tmp / "assignments", runs)

    table = Table(title=f"GPU allocation (%) vs arrived load — {trace.name}, seeds {seeds}")
    table.add_column("policy")
    for x in REPORT_AT:
        table.add_column(f"{x}%", justify="right")
    table.add_column("unalloc GPUs @100", justify="right")
    table.add_column("frag @80/90", justify="right")
    table.add_column("p99 ms", justify="right")
    for name, s in summary["policies"].items():
        table.add_row(
            name,
            *(_cell(s["alloc_pct_at"][str(x)]) for x in REPORT_AT),
            _cell(s["unallocated_gpus_at"]["100"], ".0f"),
            f"{_cell(s['frag_ratio_pct_at']['80'], '.1f')}/{_cell(s['frag_ratio_pct_at']['90'], '.1f')}",
            _cell(s["p99_decision_ms"]),
        )
    console.print(table)
    for name, s in summary["policies"].items():
        for key, why in s.get("null_reasons", {}).items():
            console.print(f"{name} {key}: none ({why})")
    console.print(f"wrote {out / 'summary.json'}, {out / 'per_seed.csv'}, {out / 'alloc.png'}"
                  + (f", {out / 'assignments'}/" if assignments else ""))


@app.command("placement-online")
def placement_online(
    nodes: Annotated[Path, typer.Option("--nodes", help="node list CSV", exists=True, dir_okay=False)],
    trace: Annotated[Path, typer.Option("--trace", help="pod list CSV with creation/deletion times", exists=True,
                                        dir_okay=False)],
    policies: Annotated[
        str | None, typer.Option("--policies", help="comma-separated policy names [default: FGD,BestFit,ours]")
    ] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="divide arrival times by this",
                                              callback=bounded(0.0, 1e9, lo_open=True))] = 30_000.0,
    inflation: Annotated[float, typer.Option("--inflation", help="draw extra pods up to this x capacity "
                                             "(0: none, at most 10)", callback=bounded(0.0, 10.0))] = 1.3,
    seed: Annotated[int, typer.Option("--seed", help=f"0..{SEED_MAX}", min=0, max=SEED_MAX)] = 42,
    out: Annotated[Path, typer.Option("--out", help="output directory", callback=out_folder)] = Path(
        "eval-placement-online"),
) -> None:
    """Pods depart at deletion_time; pods that do not fit wait in a QoS-ordered pending queue."""
    from gpuaware.placement import OURS
    from gpuaware.sim import load_nodes, load_pods, plot_online, run_online

    console = Console(width=max(Console().width, 132))
    names = parse_policies(policies) if policies else ["FGD", "BestFit", OURS]
    try:
        node_list, pods = load_nodes(nodes), load_pods(trace)
    except TraceError as exc:
        refuse(exc)
    results = []
    for name in names:
        try:
            with console.status(f"{name}: replaying {trace.name} with departures"):
                r = run_online(node_list, pods, name, time_scale=time_scale, inflation=inflation, seed=seed)
        except ValueError as exc:  # a trace the online replay cannot use (no creation / deletion times)
            refuse(f"{trace}: {exc}")
        results.append(r)
    report = {"trace": str(trace), "nodes": str(nodes), "seed": seed, "policies": {r.policy: r.summary() for r in results}}
    with atomic_folder(out) as tmp:
        (tmp / "online.json").write_text(strict_json(report))
        plot_online(tmp / "online.png", results, f"{trace.stem}: departures + pending queue (time / {time_scale:g})")
    table = Table(title=f"departures + pending queue — {trace.name}, arrivals / {time_scale:g}")
    for col in ("policy", "mean alloc %", "peak alloc %", "never started", "max pending"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    table.add_column("delay p50/p99 s by QoS")
    for r in results:
        s = r.summary()
        delays = ", ".join(f"{q} {d['p50_s']:.0f}/{d['p99_s']:.0f}" for q, d in s["queueing_delay_by_qos"].items())
        table.add_row(r.policy, f"{s['mean_alloc_pct']:.2f}", f"{s['peak_alloc_pct']:.2f}", str(s["never_started"]),
                      str(s["max_pending"]), delays)
    console.print(table)
    console.print(f"wrote {out / 'online.json'}, {out / 'online.png'}")
