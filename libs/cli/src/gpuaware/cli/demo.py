"""`gpuaware demo`: bring the platform up and show what it does, in one command.

It grows with every issue. Today: start (or reuse) the embedded stack, apply migrations, push
telemetry-shaped batches through JetStream into PostgreSQL and account for every one of them,
then say which of the six services exist yet. The report goes to the terminal and to
`<out>/report.json`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import platform
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware.cli.roundtrip import run_roundtrip
from gpuaware.devstack import StackError, stack_down, stack_up
from gpuaware.devstack.stack import DEFAULT_DATA_DIR
from gpuaware.tsdb import migrate

SERVICES = ("telemetry", "forecasting", "placement", "quota", "health_scoring", "binder")

console = Console()


def built_services() -> dict[str, bool]:
    if importlib.util.find_spec("gpuaware.services") is None:
        return dict.fromkeys(SERVICES, False)
    return {name: importlib.util.find_spec(f"gpuaware.services.{name}") is not None for name in SERVICES}


def demo(
    out: Annotated[Path, typer.Option(help="Folder for the report.")] = Path("demo-out"),
    nodes: Annotated[int, typer.Option(min=1, help="Simulated GPU nodes publishing telemetry.")] = 8,
    ticks: Annotated[int, typer.Option(min=1, help="Telemetry ticks per node.")] = 25,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Embedded stack data folder.")] = DEFAULT_DATA_DIR,
    keep_running: Annotated[bool, typer.Option(help="Leave the stack running afterwards.")] = False,
) -> None:
    """Start the embedded stack, run a publish → consume → store round trip, print a report."""
    started = time.perf_counter()
    try:
        with console.status("starting NATS (JetStream) and PostgreSQL"):
            stack = stack_up(data_dir)
            applied = migrate(stack.state.database_url)
    except StackError as exc:
        console.print(f"[red]cannot start the stack:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"stack {'reused' if stack.reused else 'started'}: {stack.state.nats_url}, "
                  f"PostgreSQL on port {stack.state.postgres_port or 'external'}; {len(applied)} migrations applied")
    try:
        with Progress(TextColumn("[bold]round trip"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task("roundtrip", total=nodes * ticks)
            result = asyncio.run(run_roundtrip(
                stack.state.nats_url, stack.state.database_url, nodes=nodes, ticks=ticks,
                progress=lambda done, _total: bar.update(task, completed=done)))
    finally:
        if not keep_running and not stack.reused:
            stack_down(data_dir)

    table = Table(title="publish → JetStream → durable consumer → PostgreSQL")
    for column in ("published", "consumed", "stored msgs", "stored samples", "redeliveries ignored",
                   "p50 ms", "p99 ms"):
        table.add_column(column, justify="right")
    table.add_row(str(result.published), str(result.consumed), str(result.stored_messages),
                  str(result.stored_samples), str(result.redelivered_ignored),
                  f"{result.percentile(50):.1f}", f"{result.percentile(99):.1f}")
    console.print(table)

    services = built_services()
    svc = Table(title="services")
    svc.add_column("service")
    svc.add_column("status")
    for name, built in services.items():
        svc.add_row(name, "[green]running[/green]" if built else "[yellow]not built yet[/yellow]")
    console.print(svc)

    ok = result.stored_messages == result.published
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "ok": ok, "seconds": round(time.perf_counter() - started, 2),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "roundtrip": {"published": result.published, "consumed": result.consumed,
                      "stored_messages": result.stored_messages, "stored_samples": result.stored_samples,
                      "redeliveries_ignored": result.redelivered_ignored,
                      "p50_ms": result.percentile(50), "p99_ms": result.percentile(99)},
        "services": {name: ("built" if built else "not built yet") for name, built in services.items()},
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    console.print(f"report written to {out / 'report.json'}")
    if not ok:
        console.print("[red]some published messages were not stored[/red]")
        raise typer.Exit(1)
