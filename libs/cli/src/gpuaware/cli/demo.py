"""`gpuaware demo`: the platform end to end on a digital twin, next to stock Kubernetes.

What it does, in order (every step is real: servers, processes, messages, rows):

1. start (or reuse) the embedded NATS + PostgreSQL and apply migrations;
2. the foundation check: telemetry-shaped batches published -> JetStream -> durable consumer ->
   PostgreSQL, every message accounted for (``roundtrip.py``);
3. the telemetry agent (simulated GPUs) and collector, when that service is built;
4. run **gpuaware**: placement (our best policy) + binder (the twin replays the workload on an
   accelerated clock) + health-scoring + the recorder (every loop event into ``placement_events``) as
   processes; live progress; three of the twin's GPUs develop faults (an uncorrectable-ECC storm, XID 79,
   a thermal runaway: ``demo_config.plan_faults``) that health-scoring must catch and placement avoid;
5. run the **baseline**: the identical workload (same trace, seed, nodes, virtual start) through the
   same services with placement set to stock-Kubernetes behaviour (``KubeDefault``: whole GPUs,
   first fit, FIFO, no preemption);
6. the report: whether the runs can be judged at all (``demo_judge``: enough pods decided, the whole
   window replayed, the faults reached, the services keeping up with the twin's clock - a run that
   cannot be judged says so in its headline and claims no comparison), invariants, allocation / fragmentation over time, queue delay per class, JCT,
   inference SLO attainment, Jain's index per tenant, the price of fairness (elastic jobs' grows and
   shrinks, the victims' slowdown per class, preemptions per job, the worst tenant's share of its fair
   share over contended hours; per job in ``<out>/jobs-<run>.csv``), messages per subject (bus, stream, database),
   the faults caught (when, the GPU's states after, alerts raised and resolved, no pod placed on a
   quarantined GPU), which services took part - printed, and written to ``<out>/report.json``, PNG
   plots and a self-contained ``<out>/report.html``.

Services and the stack are stopped at the end (SIGTERM, then wait), also on Ctrl-C or failure; the
stack stays up with ``--keep-running`` or when it was already running.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpuaware import bus, tsdb
from gpuaware.cli.demo_analysis import busiest_window, forecast_ab, rebuild_workload
from gpuaware.cli.demo_config import NO_FORECASTS, DemoConfig, Interrupted, RunSpec, nats_admin, nats_login
from gpuaware.cli.demo_console import LiveView, console, print_report, with_live
from gpuaware.cli.demo_format import plain
from gpuaware.cli.demo_record import RunResult, SubjectCounter
from gpuaware.cli.demo_report import (
    write_html,
    write_jobs_csv,
    write_plots,
    write_pods_csv,
    write_typical_pods,
)
from gpuaware.cli.demo_run import run_once
from gpuaware.cli.demo_summary import analyse_runs, summarise
from gpuaware.cli.options import bounded
from gpuaware.cli.processes import ProcessGroup, service_built, service_command
from gpuaware.cli.roundtrip import run_roundtrip
from gpuaware.cli.stack import database_env, provision_stack, service_databases
from gpuaware.devstack import (
    DEFAULT_DATA_DIR,
    DEFAULT_NATS_PORT,
    DEFAULT_PG_PORT,
    StackError,
    stack_credentials,
    stack_down,
    stack_health,
    stack_up,
)
from gpuaware.placement import DEFAULT_PROFILE, KUBE_DEFAULT
from gpuaware.schemas import ADMIN, GPU_SAMPLED, PROVISION, TELEMETRY, TELEMETRY_COLLECTOR
from gpuaware.sim import clock_jumps, utilisation_series

SERVICES = ("telemetry", "forecasting", "placement", "quota", "health_scoring", "binder", "alert_bridge")
DEFAULT_DURATION_S = 150.0
"""wall seconds per run: two runs + stack + services + report stay well inside 10 minutes on 2 cores"""
DEFAULT_WINDOW_S = 86400.0



def built_services() -> dict[str, bool]:
    return {name: service_built(f"gpuaware.services.{name}") for name in SERVICES}


def demo(
    duration: Annotated[float, typer.Option(callback=bounded(5.0, 86_400.0), help="Wall seconds each run (gpuaware, the baseline, "
                                                         "gpuaware without forecasts) replays.")] = DEFAULT_DURATION_S,
    trace: Annotated[str, typer.Option(help="Workload: generator | openb | philly.")] = "generator",
    nodes: Annotated[str, typer.Option(help="Cluster: default (built-in mixed) | openb | N (built-in, N nodes)."
                                       )] = "default",
    speed: Annotated[float, typer.Option(callback=bounded(0.0, 1e6), help="Virtual seconds per wall second (0: replay "
                                                       "--window-h in --duration).")] = 0.0,
    window_h: Annotated[float, typer.Option(callback=bounded(0.01, 8_760.0), help="Virtual hours replayed (ignored with --speed).")] = 24.0,
    load: Annotated[float, typer.Option(callback=bounded(0.05, 100.0), help="Generator: offered GPU load as a fraction of the GPUs; the "
                                                       "default 1.8 is a shared cluster where teams queue (more "
                                                       "demand than GPUs), the case a scheduler is for.")] = 1.8,
    seed: Annotated[int, typer.Option(help="Workload and tie-break seed.")] = 7,
    max_pods: Annotated[int, typer.Option(min=0, help="Cap on the workload's pods (0: none).")] = 0,
    slo_s: Annotated[float, typer.Option("--slo-s", callback=bounded(0.0, 1e7), help="Inference SLO: start within this many virtual "
                                                         "seconds.")] = 600.0,
    out: Annotated[Path, typer.Option(help="Folder for the report, plots and service logs.")] = Path("demo-out"),
    keep_running: Annotated[bool, typer.Option("--keep-running", help="Leave the stack running afterwards.")] = False,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Embedded stack data folder.")] = DEFAULT_DATA_DIR,
    nats_port: Annotated[int, typer.Option(min=0, max=65_535, help="NATS port when starting the stack (0: free).")] = DEFAULT_NATS_PORT,
    pg_port: Annotated[int, typer.Option(min=0, max=65_535, help="PostgreSQL port when starting the stack (0: free).")] = DEFAULT_PG_PORT,
    ticks: Annotated[int, typer.Option(min=0, hidden=True, help="Only the bus round trip (N nodes x ticks).")] = 0,
    kill_leader_at: Annotated[float, typer.Option(callback=bounded(0.0, 86_400.0), help="Fault drill: run a standby placement and SIGKILL "
                                                                "the leader this many seconds into the gpuaware "
                                                                "run (0: no drill).")] = 0.0,
    auth: Annotated[bool, typer.Option("--auth/--no-auth", help="Start the demo's NATS with one least-privilege "
                                       "user per service (bcrypt-hashed, each service logs in with its own; "
                                       "passwords never printed). Ignored for a server NATS_URL names.")] = True,
    forecast_train_s: Annotated[float, typer.Option("--train-s", callback=bounded(0.0, 3_600.0),
                                                    help="Seconds to train the forecasting service's demand model "
                                                    "on the Helios traces when the registry has none (once per "
                                                    "--data-dir; 0: serve persistence).")] = 60.0,
    elastic: Annotated[bool, typer.Option("--elastic/--no-elastic", help="Generator: half of the multi-GPU training "
                                          "jobs are elastic (they run on half to all of their GPUs, shrink "
                                          "before they stop and grow into idle GPUs); --no-elastic keeps "
                                          "every job at its fixed width.")] = True,
    forecast_ab: Annotated[bool, typer.Option("--forecast-ab/--no-forecast-ab", help="Replay the workload a third "
                                              "time: gpuaware ignoring its forecasts (same seed and faults; the "
                                              "forecasting service runs in both), and report what the forecasts "
                                              "changed.")] = True,
) -> None:
    """Start the stack and the services, replay a workload on the digital twin with gpuaware, with
    stock-Kubernetes placement and (--forecast-ab) with gpuaware without its forecasts, and report what
    gpuaware and its forecasts buy."""
    started = time.perf_counter()
    # SIGTERM (kill) and SIGHUP (a closed terminal) stop the demo as Ctrl-C does: services and the
    # stack are stopped on the way out instead of being left behind (inside the event loop the runs
    # watch a stop event instead, see _demo)
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        _demo_command(started, duration, trace, nodes, speed, window_h, load, seed, max_pods, slo_s, out,
                      keep_running, data_dir, nats_port, pg_port, ticks, kill_leader_at, auth, forecast_train_s,
                      elastic, forecast_ab)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _demo_command(started: float, duration: float, trace: str, nodes: str, speed: float, window_h: float,
                  load: float, seed: int, max_pods: int, slo_s: float, out: Path, keep_running: bool,
                  data_dir: Path, nats_port: int, pg_port: int, ticks: int, kill_leader_at: float = 0.0,
                  auth: bool = False, forecast_train_s: float = 0.0, elastic: bool = True,
                  forecast_ab: bool = False) -> None:
    if trace not in ("generator", "openb", "philly"):
        raise typer.BadParameter("--trace must be generator, openb or philly")
    if not (nodes in ("default", "openb") or nodes.isdigit()):
        raise typer.BadParameter("--nodes must be default, openb or a number of nodes")
    out.mkdir(parents=True, exist_ok=True)
    run_id = f"demo-{uuid.uuid4().hex[:6]}"
    stack = None
    try:
        with console.status("starting NATS (JetStream) and PostgreSQL"):
            stack = stack_up(data_dir, nats_port=nats_port, pg_port=pg_port, auth=auth, as_recorded=True,
                             auth_clusters=[f"{run_id}-{label}" for label in ("gpuaware", "baseline", NO_FORECASTS)])
            credentials = _demo_credentials(stack, data_dir)
            # the chart's provisioning, run as the chart runs it: streams as admin, migrations and each
            # service's login role as the owner; every service then logs in as its own role
            provisioned = provision_stack(stack.state, data_dir, streams=bool(credentials))
            databases = service_databases(stack.state, data_dir)
    except StackError as exc:
        console.print(f"[red]cannot start the stack:[/red] {exc}")
        if stack is not None and not stack.reused and not keep_running:
            stack_down(data_dir)
        raise typer.Exit(1) from None
    console.print(f"stack {'reused' if stack.reused else 'started'}: {stack.state.nats_url}, "
                  f"PostgreSQL on port {stack.state.postgres_port or 'external'}; provisioned: {provisioned}")
    ok = False
    try:
        if ticks:
            admin = {"user": credentials[ADMIN][0], "password": credentials[ADMIN][1]} if credentials else {}
            ok = _roundtrip_only(stack.state.nats_url, stack.state.database_url, out,
                                 int(nodes) if nodes.isdigit() else 8, ticks, started, admin)
        else:
            window = speed * duration if speed else window_h * 3600.0
            cfg = DemoConfig(out=out, run_id=run_id, duration_s=duration, window_s=window,
                             speed=speed or window / duration, trace=trace, nodes=nodes,
                             default_nodes=16, load=load, seed=seed, max_pods=max_pods, slo_s=slo_s,
                             shared_data=os.environ.get("GPUAWARE_SHARED_DATA", ""),
                             kill_leader_at_s=kill_leader_at, own_nats=not stack.state.nats_external,
                             nats_credentials=credentials, database_urls=databases, elastic=elastic,
                             forecast_ab=forecast_ab and service_built("gpuaware.services.forecasting"))
            if service_built("gpuaware.services.forecasting"):
                from gpuaware.cli.demo_forecast import ensure_demand_model
                from gpuaware.sim import shared_data_dir

                cfg = dataclasses.replace(cfg, demand_model=ensure_demand_model(
                    stack.state.database_url, data_dir, shared_data_dir(), forecast_train_s, console))
            if trace != "generator":
                with console.status(f"finding the busiest {window / 3600:.0f} h of the {trace} trace"):
                    whole = rebuild_workload(cfg, whole_trace=True)
                    start = busiest_window([p.arrival_s for p in whole.values()], window)
                cfg = dataclasses.replace(cfg, window_start_s=start)
                console.print(f"{trace}: replaying {window / 3600:.0f} h from day {start / 86400:.1f} of the trace")
            typical = out / "typical-pods.csv"
            if write_typical_pods(typical, rebuild_workload(cfg)):
                cfg = dataclasses.replace(cfg, typical_pods_file=str(typical.resolve()))
            ok = asyncio.run(_demo(cfg, stack.state.nats_url, stack.state.database_url, started, data_dir=data_dir))
    except (KeyboardInterrupt, Interrupted):
        console.print("[yellow]interrupted: services stopped"
                      + ("" if keep_running or stack.reused else ", stopping the stack") + "[/yellow]")
        raise typer.Exit(130) from None
    finally:
        if not keep_running and not stack.reused:
            stack_down(data_dir)
    if not ok:
        raise typer.Exit(1)


def _demo_credentials(stack: Any, data_dir: Path) -> dict[str, tuple[str, str]]:
    """The per-service NATS users of an auth stack (the provisioning creates the streams as admin:
    services may not); empty without auth. A running auth stack of another run cannot be reused: its
    users may act only for that run's clusters."""
    if not stack.state.nats_auth:
        return {}
    if stack.reused:
        raise StackError("the running stack requires NATS users made for another run: stop it (`gpuaware down "
                         "--data-dir ...`) or run the demo with --no-auth")
    return stack_credentials(data_dir)


# --- the legacy round-trip-only mode (kept for scripts and tests that pass --ticks) -------------------


def _roundtrip_section(nats_url: str, database_url: str, nodes: int, ticks: int,
                       nats_options: dict[str, str]) -> dict[str, Any]:
    result = asyncio.run(run_roundtrip(nats_url, database_url, nodes=nodes, ticks=ticks, nats_options=nats_options))
    return _roundtrip_dict(result)


def _roundtrip_dict(result: Any) -> dict[str, Any]:
    return {"published": result.published, "consumed": result.consumed, "stored_messages": result.stored_messages,
            "stored_samples": result.stored_samples, "redeliveries_ignored": result.redelivered_ignored,
            "p50_ms": result.percentile(50), "p99_ms": result.percentile(99),
            "ok": result.stored_messages == result.published}


def _roundtrip_only(nats_url: str, database_url: str, out: Path, nodes: int, ticks: int, started: float,
                    nats_options: dict[str, str]) -> bool:
    rt = _roundtrip_section(nats_url, database_url, nodes, ticks, nats_options)
    console.print(_roundtrip_table(rt))
    services = built_services()
    report = {"ok": rt["ok"], "seconds": round(time.perf_counter() - started, 2), "machine": _machine(),
              "roundtrip": rt,
              "services": {name: ("built" if built else "not built yet") for name, built in services.items()}}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    console.print(f"report written to {out / 'report.json'}")
    return bool(rt["ok"])


def _roundtrip_table(rt: dict[str, Any]) -> Table:
    table = Table(title="foundation: publish → JetStream → durable consumer → PostgreSQL")
    for column in ("published", "consumed", "stored msgs", "stored samples", "redeliveries ignored", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right")
    table.add_row(str(rt["published"]), str(rt["consumed"]), str(rt["stored_messages"]), str(rt["stored_samples"]),
                  str(rt["redeliveries_ignored"]), f"{rt['p50_ms']:.1f}", f"{rt['p99_ms']:.1f}")
    return table


def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}


# --- the full demo ------------------------------------------------------------------------------------


async def _start_telemetry(cfg: DemoConfig, procs: ProcessGroup, nats_url: str, database_url: str) -> dict[str, Any]:
    """The collector writing telemetry to PostgreSQL; each run starts its own agent on the twin's
    GPUs (``run_once``), so measured utilisation sits next to allocation in the report."""
    if not service_built("gpuaware.services.telemetry"):
        return {"status": "not built yet"}
    common = {"NATS_URL": nats_url, **database_env(cfg.database_urls, "telemetry-collector", database_url),
              **nats_login(cfg, TELEMETRY_COLLECTOR)}
    collector = procs.start("telemetry-collector", service_command("gpuaware.services.telemetry", "collector"),
                            {**common, "GPUAWARE_TELEMETRY_COLLECTOR_CLUSTER": f"{cfg.run_id}"},
                            cfg.out / "logs" / "telemetry-collector.log")
    await asyncio.sleep(2.0)
    if not collector.alive():
        return {"status": "built, but did not start", "failed": [collector.name], "log_tail": collector.log_tail(8)}
    return {"status": "running"}


async def _measured_utilisation(pool: Any, run: RunResult, cfg: DemoConfig) -> dict[str, Any]:
    """The run's GPU utilisation as the telemetry pipeline stored it (agent -> NATS -> collector ->
    PostgreSQL), time-weighted over all the twin's GPUs and mapped onto the virtual day."""
    if run.telemetry.get("status") != "running" or len(run.clock) < 2:
        return {"status": run.telemetry.get("status", "off")}
    (w0, v0), (w1, v1) = run.clock[0], run.clock[-1]
    async with pool.connection() as conn:
        rows = await tsdb.utilisation_range(conn, run.node_names, datetime.fromtimestamp(w0, UTC),
                                                  datetime.fromtimestamp(w1, UTC))
    walls = [w for w, _ in run.clock]
    virt = [v for _, v in run.clock]

    def virtual(t: float) -> float:  # piecewise-linear wall -> virtual (the twin may jump when idle)
        i = min(max(bisect.bisect_right(walls, t), 1), len(walls) - 1)
        (a, b), (x, y) = (walls[i - 1], walls[i]), (virt[i - 1], virt[i])
        return x + (y - x) * (t - a) / (b - a) if b > a else y

    samples = [(virtual(ts.timestamp()) - run.started_at, uuid, util) for ts, uuid, util in rows]
    samples.sort(key=lambda r: r[0])
    if not samples:
        return {"status": "no samples stored", "gpus": len(run.gpus)}
    # from the agent's first reading on (before it, the GPUs were not measured, not idle)
    t0, t1 = max(v0 - run.started_at, samples[0][0]), v1 - run.started_at
    # where the twin jumped over a quiet stretch no wall time passed and nothing was read: a gap, not
    # the last reading held flat across hours (a line "flat at 0.10 from hour 3 to 7" that nothing measured)
    gaps = [(a - run.started_at, b - run.started_at) for a, b in clock_jumps(run.clock, cfg.speed)]
    starts, means, mean = utilisation_series(samples, len(run.gpus), t0, t1, max((t1 - t0) / 96, 60.0), gaps=gaps)
    return {"status": "measured", "samples": len(rows), "gpus_reporting": len({u for _, u, _ in rows}),
            "gpus": len(run.gpus), "mean": None if math.isnan(mean) else round(mean, 4),
            "measured_from_h": round(t0 / 3600, 3),
            "not_measured_h": round(sum(min(b, t1) - max(a, t0) for a, b in gaps if b > t0 and a < t1) / 3600, 2),
            "series": {"t_h": [round(t / 3600, 4) for t in starts],
                       "utilisation": [None if math.isnan(m) else round(m, 4) for m in means]}}


async def _dashboard_panels(pool: Any, cfg: DemoConfig, run: RunResult) -> list[dict[str, Any]]:
    """The Grafana dashboards' SQL panels over this demo's database (the gpuaware run), drawn as images,
    over the twin's virtual day or, for telemetry, the run's wall-clock minutes."""
    from gpuaware.cli.demo_panels import render_panels

    now = time.time()
    ranges = {"the virtual day": (datetime.fromtimestamp(run.started_at, UTC), datetime.fromtimestamp(run.virtual_end, UTC)),
              "the run's wall clock": (datetime.fromtimestamp(now - run.wall_s - 600, UTC), datetime.fromtimestamp(now, UTC))}
    with console.status("drawing the dashboards' panels from their SQL"):
        return await render_panels(pool, run.spec.cluster, ranges, cfg.out / "panels")


async def _keep_stack_up(data_dir: Path, every_s: float = 1.0) -> None:
    """A server of the demo's own stack that dies (nats-server killed, PostgreSQL stopped) is started
    again where it ran; the services and the demo's own connections reconnect by themselves."""
    while True:
        await asyncio.sleep(every_s)
        _state, alive = await asyncio.to_thread(stack_health, data_dir)
        down = [name for name, ok in alive.items() if not ok]
        if not down:
            continue
        console.print(f"[yellow]{', '.join(down)} of the demo's stack stopped: starting it again[/yellow]")
        try:
            again = await asyncio.to_thread(stack_up, data_dir)
            console.print(f"[green]started again: {', '.join(again.restarted) or 'nothing needed'}[/green]")
        except StackError as exc:
            console.print(f"[red]cannot start it again:[/red] {exc} (retrying)")


async def _demo(cfg: DemoConfig, nats_url: str, database_url: str, started: float,
                data_dir: Path | None = None) -> bool:
    keeper = asyncio.create_task(_keep_stack_up(data_dir), name="stack keeper") if data_dir is not None else None
    try:
        return await _demo_runs(cfg, nats_url, database_url, started)
    finally:
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper


def run_specs(cfg: DemoConfig) -> list[RunSpec]:
    """gpuaware, stock Kubernetes, and (the forecast A/B) gpuaware again without its forecasts."""
    specs = [RunSpec("gpuaware", DEFAULT_PROFILE, f"{cfg.run_id}-gpuaware"),
             RunSpec("baseline", KUBE_DEFAULT, f"{cfg.run_id}-baseline")]
    if cfg.forecast_ab:
        specs.append(RunSpec(NO_FORECASTS, DEFAULT_PROFILE, f"{cfg.run_id}-{NO_FORECASTS}", forecasts=False))
    return specs


async def _demo_runs(cfg: DemoConfig, nats_url: str, database_url: str, started: float) -> bool:
    services = built_services()
    missing = [s for s in ("placement", "binder") if not services[s]]
    if missing:
        console.print(f"[red]the demo needs {', '.join(missing)}: not built[/red]")
        return False
    report: dict[str, Any] = {"machine": _machine(),
                              "stack": {"nats_auth": bool(cfg.nats_credentials),
                                        "nats_users": sorted(cfg.nats_credentials) if cfg.nats_credentials else []}}
    console.rule("foundation: bus → database round trip")
    rt = _roundtrip_dict(await run_roundtrip(nats_url, database_url, nodes=4, ticks=5, nats_options=nats_admin(cfg)))
    report["roundtrip"] = rt
    console.print(_roundtrip_table(rt))
    results: dict[str, RunResult] = {}
    counter = SubjectCounter()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    pool = await tsdb.open_pool(database_url, application_name="gpuaware-demo", max_size=2)
    try:
        async with bus.connected(nats_url, name="gpuaware-demo", **nats_admin(cfg)) as nc:
            # the round trip's batches name nodes no agent announced: a collector would dead-letter them
            with contextlib.suppress(Exception):
                await nc.jetstream().purge_stream(TELEMETRY.name, subject=GPU_SAMPLED)
            with ProcessGroup() as procs:
                try:
                    telemetry = await _start_telemetry(cfg, procs, nats_url, database_url)
                    report["telemetry"] = telemetry
                    view = LiveView(cfg, counter)
                    for spec in run_specs(cfg):
                        console.rule(f"run: {spec.label} — placement policy {spec.policy}, cluster {spec.cluster}")
                        results[spec.label] = await with_live(view, functools.partial(
                            run_once, cfg, spec, nc=nc, nats_url=nats_url, database_url=database_url, pool=pool,
                            counter=counter, procs=procs, progress=view, stop=stop))
                    if telemetry.get("status") == "running":
                        await asyncio.sleep(1.5)  # the collector's last batches reach PostgreSQL
                        for label, r in results.items():
                            telemetry[label] = await _measured_utilisation(pool, r, cfg)
                    report["dashboards"] = await _dashboard_panels(pool, cfg, results["gpuaware"])
                finally:
                    await asyncio.to_thread(procs.stop)
                    # the list's processes the demo ran: the provisioning (before the stack was handed
                    # over), then every service started (what the chart deploys, tests/cli compares)
                    report["processes"] = [PROVISION, *procs.started]
    finally:
        await pool.close()
    return _finish(cfg, report, results, services, started)


def _finish(cfg: DemoConfig, report: dict[str, Any], results: dict[str, RunResult], services: dict[str, bool],
            started: float) -> bool:
    """Analyse both runs, add the verdict to ``report``, write the CSVs, plots, JSON and HTML, print it."""
    workload = rebuild_workload(cfg)
    runs, full = analyse_runs(cfg, results, workload, report.get("telemetry", {}))
    summarise(cfg, report, results, runs, services, started)
    if NO_FORECASTS in runs:
        report["forecast_ab"] = forecast_ab(runs["gpuaware"], runs[NO_FORECASTS])
        effect = (results["gpuaware"].forecast or {}).get("placement") or {}
        report["forecast_ab"]["held_back_by_headroom"] = effect.get("headroom_held_back")
    a, b = runs["gpuaware"], runs["baseline"]
    for label, r in results.items():
        write_pods_csv(cfg.out / f"pods-{label}.csv", r, workload)
        write_jobs_csv(cfg.out / f"jobs-{label}.csv", r, workload, cfg.window_s)
    plots = write_plots(cfg.out, [a, b], full, cfg.window_s / 3600)
    (cfg.out / "report.json").write_text(json.dumps(plain(report), indent=2, default=str, allow_nan=False))
    write_html(cfg.out / "report.html", report, plots)
    print_report(report, a, b, plots, cfg)
    if not report["judgeable"]:
        console.print("[bold yellow]the demo could not judge this run[/bold yellow] (report.json: "
                      "\"judgeable\": false, \"reasons\"); run it longer or on a quieter machine")
    return bool(report["ok"])
