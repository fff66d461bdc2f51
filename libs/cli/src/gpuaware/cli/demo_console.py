"""What the demo shows in the terminal: the live view while a run lasts and the printed report."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from gpuaware.cli.demo_alerts import describe_alerting
from gpuaware.cli.demo_config import DemoConfig, RunSpec
from gpuaware.cli.demo_forecast import HORIZON_COLUMNS, SERIES_COLUMNS, horizon_rows, series_rows
from gpuaware.cli.demo_format import human
from gpuaware.cli.demo_record import RunLog, RunResult, SubjectCounter
from gpuaware.cli.demo_report import price_of_fairness_rows

__all__ = ["LiveView", "console", "print_forecast_tables", "print_report", "with_live"]

console = Console()


class LiveView:
    """What the terminal shows while a run lasts (a rich Live table, or a line every 10 s)."""

    def __init__(self, cfg: DemoConfig, counter: SubjectCounter) -> None:
        self.cfg = cfg
        self.counter = counter
        self.live: Live | None = None
        self._last_line = 0.0

    def render(self, spec: RunSpec, log: RunLog, virtual_s: float, wall_s: float) -> Group:
        c = log.counts()
        frac = min(1.0, max(0.0, virtual_s / self.cfg.window_s))
        head = Table.grid(padding=(0, 2))
        head.add_row(f"[bold]{spec.label}[/bold] (placement policy {spec.policy})",
                     f"virtual {virtual_s / 3600:5.1f} h / {self.cfg.window_s / 3600:.1f} h",
                     f"wall {wall_s:5.0f} s / ~{self.cfg.duration_s:.0f} s")
        pods = Table(title="pods", show_edge=False)
        for col in ("arrived", "pending", "bound", "finished", "decided", "unschedulable"):
            pods.add_column(col, justify="right")
        pods.add_row(*(str(c[k]) for k in ("arrived", "pending", "bound", "finished", "decided", "unschedulable")))
        msgs = Table(title="messages per subject (this run)", show_edge=False)
        msgs.add_column("subject")
        msgs.add_column("count", justify="right")
        for subject, n in sorted(self.counter.counts.items(), key=lambda kv: -kv[1])[:10]:
            msgs.add_row(subject, str(n))
        parts: list[Any] = [head, ProgressBar(total=1.0, completed=frac, width=60), pods]
        if log.health_changes or log.alerts_raised:
            parts.append(f"health: {len(log.quarantined_now())} GPUs quarantined now, "
                         f"{sum(1 for c in log.health_changes if c.previous is not None)} state changes, "
                         f"{len(log.alerts_raised)} alerts raised / {len(log.alerts_resolved)} resolved")
        return Group(*parts, msgs)

    def __call__(self, spec: RunSpec, log: RunLog, virtual_s: float, wall_s: float) -> None:
        if self.live is not None:
            self.live.update(self.render(spec, log, virtual_s, wall_s))
        elif time.monotonic() - self._last_line >= 10.0:
            self._last_line = time.monotonic()
            c = log.counts()
            console.print(f"{spec.label}: virtual {virtual_s / 3600:.1f}/{self.cfg.window_s / 3600:.1f} h, "
                          f"wall {wall_s:.0f}s: arrived {c['arrived']} pending {c['pending']} bound {c['bound']} "
                          f"finished {c['finished']} decided {c['decided']}")


async def with_live(view: LiveView, make: Callable[[], Awaitable[RunResult]]) -> RunResult:
    """``make()``'s run, shown in a rich Live view when the console is a terminal."""
    if not console.is_terminal:
        return await make()
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        view.live = live
        try:
            return await make()
        finally:
            view.live = None


def print_report(report: dict[str, Any], a: dict[str, Any], b: dict[str, Any], plots: list[Path],
                  cfg: DemoConfig) -> None:
    console.rule("report")
    if report.get("judgeable") is False:
        console.print("[bold red]NOT JUDGEABLE[/bold red]: no comparison is claimed from this run. Why:")
        for reason in report.get("reasons") or []:
            console.print(f"  - {reason}", markup=False)
    console.print(report["summary"], markup=False)
    t = Table(title="gpuaware vs stock Kubernetes (same workload, same services)")
    t.add_column("")
    t.add_column(f"gpuaware ({a['policy']})", justify="right")
    t.add_column(f"baseline ({b['policy']})", justify="right")

    def row(name: str, x: Any, y: Any) -> None:
        t.add_row(name, human(x), human(y))

    row("allocation, time-weighted (asked compute held)", a["allocation"]["mean"], b["allocation"]["mean"])
    row("GPUs occupied, time-weighted", a["allocation"]["occupied_mean"], b["allocation"]["occupied_mean"])
    row("GPU utilisation measured by telemetry, time-weighted", a["utilisation"].get("mean"),
        b["utilisation"].get("mean"))
    row("fragmentation, time-weighted", a["allocation"]["fragmentation_mean"], b["allocation"]["fragmentation_mean"])
    row("pods arrived / finished", f"{a['pods']['arrived']} / {a['pods']['finished']}",
        f"{b['pods']['arrived']} / {b['pods']['finished']}")
    row("pods bound / pending at the end", f"{a['pods']['bound']} / {a['pods']['pending']}",
        f"{b['pods']['bound']} / {b['pods']['pending']}")
    for c in sorted(set(a["queue_delay_s"]["by_class"]) | set(b["queue_delay_s"]["by_class"])):
        qa, qb = a["queue_delay_s"]["by_class"].get(c, {}), b["queue_delay_s"]["by_class"].get(c, {})
        row(f"queue delay {c} p50 / p99 (min)", _mins(qa), _mins(qb))
    row("JCT p50 / p99 (h)", _hours(a["jct_s"]), _hours(b["jct_s"]))
    row("JCT mean, finished jobs / every job to the end (h)", _means(a["jct_s"]), _means(b["jct_s"]))
    row(f"inference SLO (start ≤ {cfg.slo_s / 60:.0f} min)", a["slo"]["attainment"], b["slo"]["attainment"])
    row("Jain's index over tenants", a["fairness"]["jain"], b["fairness"]["jain"])
    row("decisions the world refused (bind failed)", sum(a["bind_failures"].values()),
        sum(b["bind_failures"].values()))
    row("fractional pods put on a shared GPU", a["allocation"]["fractional_on_shared_gpu"],
        b["allocation"]["fractional_on_shared_gpu"])
    row("pods preempted (checkpointed first)", f"{a['preemption']['preempted']} ({a['preemption']['checkpointed']})",
        f"{b['preemption']['preempted']} ({b['preemption']['checkpointed']})")
    for (name, x), (_, y) in zip(price_of_fairness_rows(a), price_of_fairness_rows(b), strict=True):
        row(name, x, y)
    row("node-hours switched off (node-power planner; share of node-hours)", _power(a), _power(b))
    console.print(t)
    for label, r in (report.get("runs") or {}).items():
        lag = r.get("lag") or {}
        if lag.get("samples"):
            console.print(f"{label}: the services answered a pending pod in {human(lag['p50_wall_s'])} / "
                          f"{human(lag['p95_wall_s'])} s wall (p50 / p95) = {human(lag['p50_virtual_s'])} / "
                          f"{human(lag['p95_virtual_s'])} s of the twin's time; the twin ran at "
                          f"{human(lag['effective_speed'])}x (asked {human(round(lag['nominal_speed']))}x)"
                          + (", slowed for them" if lag.get("twin_slowed") else ""), markup=False)
    drill = a.get("failover")
    if drill:
        took = "never" if drill["takeover_s"] is None else f"{drill['takeover_s']:.2f} s later"
        console.print(f"fault drill: placement leader {drill['killed']} SIGKILLed "
                      f"{cfg.kill_leader_at_s:.0f} s into the run; another instance decided {took} "
                      f"({drill['decisions_before']} decisions before, {drill['decisions_after']} after)")
    m = Table(title="messages per subject (on the bus / rows in placement_events)")
    m.add_column("subject")
    m.add_column("gpuaware", justify="right")
    m.add_column("baseline", justify="right")
    for s in sorted(set(a["messages"]) | set(b["messages"])):
        m.add_row(s, _msg(a, s), _msg(b, s))
    console.print(m)
    hf = a.get("health") or {}
    if hf.get("faults"):
        h = Table(title="GPU health: faults injected into the twin's GPUs (gpuaware run; virtual hours)")
        for col in ("fault", "starts", "caught", "first alert", "pods on it / placed there in quarantine",
                    "drain recommended", "its states"):
            h.add_column(col, justify="right" if col == "starts" else "left")
        for f in hf["faults"]:
            caught = (f"[green]{f['caught_state']} at {f['caught_at_h']:.2f} h[/green], "
                      f"{f['detected_after_virtual_min']:.0f} min after ({f['detected_after_wall_s']:.1f} s wall)"
                      if f["caught"] else "[red]not caught[/red]")
            first = f.get("first_alert")
            h.add_row(f"{f['label']} ({f['node']} #{f['gpu_index']})", f"{f['at_h']:.2f}", caught,
                      f"{first['rule']} {first['at_h']:.2f}" if first else "",
                      f"{f.get('pods_running_when_caught', '')} / {f['decisions_on_it_while_quarantined']}",
                      (f"{f['drain']['pods']} pods, {f['drain']['checkpointable']} checkpointable first"
                       + (" (urgent)" if f["drain"]["urgent"] else "") if f.get("drain") else "-"),
                      " → ".join(f"{t['to']} {t['at_h']:.2f}" for t in f["timeline"]))
        console.print(h)
        al = hf["alerts"]
        console.print(f"health: {hf['decisions_checked']} decisions checked, {hf['decisions_on_quarantined_gpus']} on "
                      f"a quarantined GPU ({hf['decisions_in_flight_at_a_quarantine']} in flight at a quarantine); "
                      f"alerts raised {sum(al['raised'].values())} ("
                      + ", ".join(f"{k} {v}" for k, v in sorted(al["raised"].items()))
                      + f"), resolved {sum(al['resolved'].values())}, open at the end {al['open_at_end']}")
        if hf.get("alertmanager"):
            console.print(f"alert bridge → Alertmanager: {describe_alerting(hf['alertmanager'])}")
        dr = hf.get("drain_recommendations") or {}
        if dr:
            console.print(f"drain recommendations: {dr['published']} published ({dr['urgent']} urgent), "
                          f"{dr['pods_listed']} pods listed to move")
        rep = hf.get("repair")
        if rep:
            console.print(f"operator: uncordon --clear {rep['gpu_uuid']} at {rep['virtual_h']:.2f} h ({rep['reason']}): "
                          f"{rep.get('previous')} → {rep.get('current')}")
    if (a.get("quota") or {}).get("status") == "took part":
        from gpuaware.cli.quota import demo_table
        console.print(demo_table(a["quota"]))
    print_forecast_tables(console, a)
    ab = report.get("forecast_ab")
    if ab:
        console.print(forecast_ab_table(ab))
    inv = Table(title="invariants")
    inv.add_column("check")
    inv.add_column("")
    for k, ok in report["invariants"].items():
        inv.add_row(k, "[green]ok[/green]" if ok else "[red]FAILED[/red]")
    for k, ok in report["outcomes"].items():
        inv.add_row(f"outcome: {k}", "not judged" if ok is None else "[green]yes[/green]" if ok else "[yellow]no[/yellow]")
    console.print(inv)
    svc = Table(title="services")
    svc.add_column("service")
    svc.add_column("status")
    for name, status in report["services"].items():
        colour = "green" if status.startswith(("took part", "running")) else "yellow"
        svc.add_row(name, f"[{colour}]{status}[/{colour}]")
    console.print(svc)
    panels = report.get("dashboards") or []
    if panels:
        with_rows = sum(1 for x in panels if x.get("rows"))
        failed = [x["title"] for x in panels if "error" in x]
        console.print(f"dashboards: {len(panels)} Grafana panels drawn from their SQL in {cfg.out / 'panels'} "
                      f"({with_rows} with data" + (f"; failed: {', '.join(failed)}" if failed else "") + ")")
    console.print(f"report: {cfg.out / 'report.html'} (self-contained), {cfg.out / 'report.json'}; plots: "
                  + ", ".join(str(p) for p in plots) + f"; service logs: {cfg.out / 'logs'}")
    console.print(f"demo took {report['seconds']:.0f}s")


def print_forecast_tables(out: Console, r: dict[str, Any]) -> None:
    """A run's demand forecasts, where scored: per horizon the RMSE against persistence and the coverage
    of the p90 and of the p10-p90 band (the cluster's total); per demand series who served it."""
    acc = ((r.get("forecast") or {}).get("accuracy") or {})
    if acc.get("status") != "scored":
        return
    model = (r["forecast"].get("model") or {})
    label = r.get("label", "gpuaware")
    f = Table(title=f"demand forecasts ({label} run; model: {model.get('model') or 'persistence'}; "
                    f"{acc['forecasts']:,} stored for the total, {acc['series']} series)")
    for col in HORIZON_COLUMNS:
        f.add_column(col, justify="right")
    for row in horizon_rows(acc):
        f.add_row(*row)
    out.print(f)
    served = Table(title=f"who served each demand series ({label} run)")
    for col in SERIES_COLUMNS:
        served.add_column(col, justify="left" if col in ("demand series", "persistence's main reason") else "right")
    for row in series_rows(acc):
        served.add_row(*row)
    out.print(served)


def forecast_ab_table(ab: dict[str, Any]) -> Table:
    """The forecast A/B: gpuaware with and without its forecasts on the same workload, seed and faults."""
    on, off = ab["with_forecasts"], ab["without_forecasts"]
    t = Table(title="forecasts on vs off (gpuaware twice: same workload, seed and faults; the second ignores them)")
    for col in ("", "with forecasts", "without", "goal"):
        t.add_column(col, justify="left" if not col else "right")
    def minutes(s: float | None) -> str:
        return "n/a" if s is None else f"{s / 60:.1f}"

    t.add_row("latency-sensitive classes' p99 queue delay (min)", minutes(on["latency_sensitive_p99_s"]),
              minutes(off["latency_sensitive_p99_s"]), f"ratio {ab['p99_ratio']} <= {ab['goals']['p99_ratio_at_most']}")
    t.add_row("allocation, time-weighted", f"{on['allocation_mean']}", f"{off['allocation_mean']}",
              f"{ab['allocation_pp']} pp, within {ab['goals']['allocation_pp_within']}")
    t.add_row("placements held back for the forecast head-room", str(ab.get("held_back_by_headroom")), "-", "")
    t.add_row("node-hours switched off by the power planner", str(on.get("node_hours_off")),
              str(off.get("node_hours_off")), "")
    t.add_row("nodes switched back on ahead of demand", str(on.get("power_ups")), str(off.get("power_ups")), "")
    t.add_row("goals met", "[green]yes[/green]" if ab["met"] else "[yellow]no[/yellow]", "", "")
    return t


def _power(r: dict[str, Any]) -> str:
    p = r.get("power") or {}
    if p.get("planner") != "on":
        return "off"
    share = p.get("share_of_node_hours")
    return f"{p['node_hours_off']} ({'n/a' if share is None else f'{share:.1%}'})"


def _mins(q: dict[str, Any]) -> str:
    if not q or q.get("p50") is None:
        return "n/a"
    return f"{q['p50'] / 60:.1f} / {q['p99'] / 60:.1f}"


def _hours(q: dict[str, Any]) -> str:
    if q.get("p50") is None:
        return "n/a"
    return f"{q['p50'] / 3600:.2f} / {q['p99'] / 3600:.2f} ({q['finished']} done)"


def _means(q: dict[str, Any]) -> str:
    """The finished jobs' mean JCT, and every arrived job's time in the system (unfinished ones up to
    the end of the window): a scheduler that finishes fewer, shorter jobs looks good only on the first."""
    if q.get("mean") is None or q.get("in_system_mean") is None:
        return "n/a"
    return f"{q['mean'] / 3600:.2f} / {q['in_system_mean'] / 3600:.2f}"


def _msg(r: dict[str, Any], s: str) -> str:
    bus_n = r["messages"].get(s, 0)
    db_n = r["placement_events_rows"].get(s)
    return f"{bus_n}" + (f" / {db_n}" if db_n is not None else "")
