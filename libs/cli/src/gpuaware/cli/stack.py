"""`gpuaware up | down | status`: the embedded NATS + PostgreSQL, migrated and ready.

`up` is idempotent: a running stack is reused and reported, never started twice. When
`NATS_URL` / `DATABASE_URL` are set, those servers are used as they are (migrations still run
against the database, because services need the schema either way).

`up --auth` starts NATS with one least-privilege user per service (`gpuaware.schemas.permissions`)
and provisions the platform's streams as `admin`, since the services may not create them; the
passwords stay in `<data>/nats/credentials.json` (owner-only) and are never printed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

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
from gpuaware.runtime import provision_streams, redact_url
from gpuaware.schemas import ADMIN
from gpuaware.tsdb import migrate

console = Console(stderr=True)

DataDir = Annotated[Path, typer.Option("--data-dir", help="Folder holding the servers' data and state.")]


def up(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_port: Annotated[int, typer.Option(help="NATS client port.")] = DEFAULT_NATS_PORT,
    pg_port: Annotated[int, typer.Option(help="PostgreSQL port.")] = DEFAULT_PG_PORT,
    auth: Annotated[bool, typer.Option(
        "--auth", help="Require one least-privilege NATS user per service; streams are provisioned as admin "
                       "and the credentials written to <data-dir>/nats/credentials.json (owner-only).")] = False,
    tls: Annotated[bool, typer.Option(
        "--tls", help="NATS speaks TLS only, with a certificate from a throwaway CA in <data-dir>/nats/tls; "
                      "clients trust its ca.pem (export NATS_TLS_CA=...).")] = False,
    nats_cluster: Annotated[int, typer.Option(
        "--nats-cluster", min=1, max=9, help="Run NATS as a JetStream cluster of this many nodes (odd: 3 or 5) on "
                                             "free loopback ports; streams get 3 replicas, so a lost node loses "
                                             "nothing. 1: a single server.")] = 1,
) -> None:
    """Start (or reuse) NATS with JetStream and PostgreSQL, apply migrations, print the URLs."""
    try:
        with console.status("starting the embedded stack"):
            started = stack_up(data_dir, nats_port=nats_port, pg_port=pg_port, auth=auth, tls=tls,
                               nats_nodes=nats_cluster)
            applied = asyncio.run(migrate(started.state.database_url))
            if started.state.nats_auth:
                user, password = stack_credentials(data_dir)[ADMIN]
                asyncio.run(provision_streams(started.state.nats_url, user=user, password=password,
                                              tls_ca=started.state.nats_tls_ca))
            elif started.state.nats_nodes and not started.reused:  # replicated from the start
                asyncio.run(provision_streams(started.state.nats_url))
    except StackError as exc:
        console.print(f"[red]cannot start the stack:[/red] {exc}")
        raise typer.Exit(1) from None
    if auth and not started.state.nats_auth:
        console.print("[yellow]NATS was already running without --auth (or is external): "
                      "run `gpuaware down` first to restart it with per-service users[/yellow]")
    verb = ("reusing; started again: " + ", ".join(started.restarted) if started.restarted
            else "reusing" if started.reused else "started")
    _print_state(started.state, title=f"gpuaware stack ({verb}; {len(applied)} migrations applied)")


def down(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Stop the servers `up` started (external ones are left alone)."""
    stopped = stack_down(data_dir)
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing of ours was running")


def status(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Show whether the embedded stack runs, and where (exit 1 unless all of it runs)."""
    state, alive = stack_health(data_dir)
    if state is None or (not any(alive.values()) and alive):
        console.print("the embedded stack is not running (start it with `gpuaware up`)")
        raise typer.Exit(1)
    down = [name for name, ok in alive.items() if not ok]
    if down:
        names = {"nats": "NATS", "postgres": "PostgreSQL"}
        console.print(f"[yellow]the embedded stack is partly running: {', '.join(names.get(d, d) for d in down)} "
                      "stopped; `gpuaware up` starts it again where it ran (data kept)[/yellow]")
        _print_state(state, title="gpuaware stack (partly running)")
        raise typer.Exit(1)
    _print_state(state, title="gpuaware stack (running)")


def _print_state(state, *, title: str) -> None:
    table = Table(title=title, show_header=True)
    table.add_column("server")
    table.add_column("url")
    table.add_column("managed by")
    if state.nats_nodes:
        for node in state.nats_nodes:
            table.add_row(f"NATS node {node['name']} (cluster)", f"nats://127.0.0.1:{node['port']}", f"pid {node['pid']}")
    else:
        table.add_row("NATS (JetStream)", state.nats_url,
                      "external" if state.nats_external else f"pid {state.nats_pid}")
    table.add_row("PostgreSQL", redact_url(state.database_url),
                  "external" if state.postgres_external else f"pid {state.postgres_pid}")
    console.print(table)
    if state.nats_auth:
        console.print("NATS requires per-service users: NATS_USER=<service> and NATS_PASSWORD from "
                      "<data-dir>/nats/credentials.json (never printed)")
    typer.echo(f"NATS_URL={state.nats_url}")
    if state.nats_tls_ca:
        typer.echo(f"NATS_TLS_CA={state.nats_tls_ca}")
    typer.echo(f"DATABASE_URL={redact_url(state.database_url)}")

