"""`gpuaware up | down | status`: the embedded NATS + PostgreSQL, migrated and ready.

`up` is idempotent: a running stack is reused and reported, never started twice. When
`NATS_URL` / `DATABASE_URL` are set, those servers are used as they are (migrations still run
against the database, because services need the schema either way).

`up` remembers how the stack was started (`<data>/stack.json`: auth, TLS, cluster size, ports, data
folders): after any death a plain `up` starts it again exactly so, and options that contradict the
record are refused with the reason (exit 1), running or not, unless `--reset` forgets the record
first (it says what it stops and deletes). `status` and `down` check every recorded PID against the
process's start time and executable before reporting or signalling it: a PID the kernel handed to
another process is "not running (PID reused by another process)" and never signalled.

`up --auth` starts NATS with one least-privilege user per service (`gpuaware.schemas.permissions`)
and provisions the platform's streams as `admin`, since the services may not create them; the
passwords stay in `<data>/nats/credentials.json` (owner-only) and are never printed.

Provisioning is the chart's: `provision_stack` runs the list's provisioning process
(`python -m gpuaware.services.provision`, what the chart's Job runs) against the stack: the streams
as `admin` (with `--auth`, or a NATS cluster), the migrations and one LOGIN role per service with a
database role as the database's owner (passwords in `<data>/postgres-logins.json`, owner-only); each
service then connects with its own DSN (`service_databases`), never as the owner.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuaware.cli.processes import service_built, service_command
from gpuaware.devstack import (
    DEFAULT_DATA_DIR,
    DEFAULT_NATS_PORT,
    DEFAULT_PG_PORT,
    REUSED,
    RUNNING,
    StackError,
    StackState,
    database_passwords,
    describe,
    stack_credentials,
    stack_down,
    stack_reset,
    stack_servers,
    stack_up,
)
from gpuaware.runtime import redact_url
from gpuaware.schemas import ADMIN, PROVISION, process_named
from gpuaware.tsdb import login_url

console = Console(stderr=True)

DataDir = Annotated[Path, typer.Option("--data-dir", help="Folder holding the servers' data and state.")]


def up(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    nats_port: Annotated[int | None, typer.Option(
        min=0, max=65_535, help=f"NATS client port of a new stack (default {DEFAULT_NATS_PORT}; 0: a free one); a recorded stack "
             "keeps its own, and another one is refused.", show_default=False)] = None,
    pg_port: Annotated[int | None, typer.Option(
        min=0, max=65_535, help=f"PostgreSQL port of a new stack (default {DEFAULT_PG_PORT}; 0: a free one); a recorded stack "
             "keeps its own, and another one is refused.", show_default=False)] = None,
    auth: Annotated[bool | None, typer.Option(
        "--auth/--no-auth", show_default=False,
        help="Require one least-privilege NATS user per service; streams are provisioned as admin "
             "and the credentials written to <data-dir>/nats/credentials.json (owner-only). "
             "Default: as recorded, else without.")] = None,
    tls: Annotated[bool | None, typer.Option(
        "--tls/--no-tls", show_default=False,
        help="NATS speaks TLS only, with a certificate from a throwaway CA in <data-dir>/nats/tls; "
             "clients trust its ca.pem (export NATS_TLS_CA=...). Default: as recorded, else without.")] = None,
    nats_cluster: Annotated[int | None, typer.Option(
        "--nats-cluster", min=1, max=9, show_default=False,
        help="Run NATS as a JetStream cluster of this many nodes (odd: 3 or 5) on free loopback ports; streams "
             "get 3 replicas, so a lost node loses nothing; --auth and --tls apply to every node and to the "
             "routes between them. 1: a single server. Default: as recorded, else 1.")] = None,
    reset: Annotated[bool, typer.Option(
        "--reset", help="Forget how the stack in --data-dir was started, to start it over with these options: "
                        "stops what of it still runs and deletes stack.json, the NATS credentials and the "
                        "database logins' passwords (each is listed). The JetStream stores and the database "
                        "are kept; delete --data-dir to lose them too.")] = False,
) -> None:
    """Start (or reuse) NATS with JetStream and PostgreSQL, apply migrations, print the URLs.

    <data-dir>/stack.json records how the stack was started (auth, TLS, cluster size, ports, data folders).
    After any death, `gpuaware up` starts it again exactly so (credentials and data kept).
    Options that contradict the record are refused, running or not; --reset starts over."""
    try:
        if reset:
            stopped, deleted = stack_reset(data_dir)
            console.print("--reset: " + (f"stopped {', '.join(stopped)}; " if stopped else "")
                          + (f"deleted {', '.join(str(p) for p in deleted)}" if deleted else "nothing recorded to forget")
                          + "; the JetStream stores and the database are kept", markup=False, highlight=False)
        with console.status("starting the embedded stack"):
            started = stack_up(data_dir, nats_port=nats_port, pg_port=pg_port, auth=auth, tls=tls,
                               nats_nodes=nats_cluster)
            summary = provision_stack(started.state, data_dir,
                                      streams=started.state.nats_auth or (bool(started.state.nats_nodes)
                                                                          and not started.reused))
    except StackError as exc:
        console.print(f"[red]cannot start the stack:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None
    if auth and not started.state.nats_auth:
        console.print("[yellow]NATS is external (NATS_URL): --auth does not apply to it[/yellow]")
    if started.restarted and started.reused:
        verb = "reusing; started again: " + ", ".join(started.restarted)
    elif started.restarted:
        verb = "started again as recorded: " + ", ".join(started.restarted)
    else:
        verb = "reusing" if started.reused else "started"
    _print_state(started.state, title=f"gpuaware stack ({verb})")
    console.print(f"provisioned: {summary}")


def provision_stack(state: StackState, data_dir: Path, *, streams: bool, timeout: float = 180.0) -> str:
    """Run the list's provisioning process against the stack (see the module docstring); returns its
    summary. Raises ``StackError`` with the end of its output when it fails."""
    entry = process_named(PROVISION)
    if not service_built(entry.module):
        raise StackError(f"the provisioning ({entry.module}) is not installed: run `make venv`")
    env = {**os.environ, **provision_env(state, data_dir, streams=streams)}
    try:
        done = subprocess.run(service_command(entry.module, *entry.args), env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise StackError(f"the provisioning did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise StackError(f"the provisioning failed (exit {done.returncode}): {tail}")
    return done.stdout.strip().splitlines()[-1].removeprefix("provisioned: ") if done.stdout.strip() else ""


def provision_env(state: StackState, data_dir: Path, *, streams: bool) -> dict[str, str]:
    """The provisioning's environment, as the chart's Job has it: NATS as ``admin``, the owner's DSN, a
    password per service login (``<data>/postgres-logins.json``)."""
    entry = process_named(PROVISION)
    env = {"NATS_URL": state.nats_url, "DATABASE_URL": state.database_url,
           f"{entry.env_prefix}STREAMS": "true" if streams else "false", f"{entry.env_prefix}LOG_FORMAT": "console"}
    if state.nats_tls_ca:
        env["NATS_TLS_CA"] = state.nats_tls_ca
    if state.nats_auth:
        env["NATS_USER"], env["NATS_PASSWORD"] = stack_credentials(data_dir)[ADMIN]
    for name, password in database_passwords(data_dir).items():
        variable = process_named(name).secret_variable
        if variable is not None:
            env[variable] = password
    return env


def service_databases(state: StackState, data_dir: Path) -> dict[str, str]:
    """process name -> the DSN its own login role connects with (after ``provision_stack``)."""
    out: dict[str, str] = {}
    for name, password in database_passwords(data_dir).items():
        login = process_named(name).database_login
        if login is not None:
            out[name] = login_url(state.database_url, login, password)
    return out


def database_env(databases: Mapping[str, str], name: str, fallback: str = "") -> dict[str, str]:
    """The ``DATABASE_URL`` of process ``name``: its own DSN; none for a process without a database role
    (``fallback``, a shared DSN, only where no logins were provisioned)."""
    if process_named(name).database_role is None:
        return {}
    url = databases.get(name) or fallback
    return {"DATABASE_URL": url} if url else {}


def down(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Stop the servers `up` started (external ones are left alone) and forget how the stack was started
    and its passwords (the JetStream stores and the database stay). Each PID is checked first: one now
    held by another process is not signalled."""
    _state, servers = stack_servers(data_dir)
    for name, (how, pid) in servers.items():
        if how == REUSED:
            console.print(f"{_server_name(name)}: not running (PID {pid} reused by another process; left alone)")
    stopped = stack_down(data_dir)
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing of ours was running")


def status(data_dir: DataDir = DEFAULT_DATA_DIR) -> None:
    """Show whether the embedded stack runs, and where (exit 1 unless all of it runs). Each recorded PID
    is checked against the process's start time and executable, not merely looked up."""
    state, servers = stack_servers(data_dir)
    for name, (how, pid) in servers.items():
        if how == REUSED:
            console.print(f"{_server_name(name)}: not running (PID {pid} reused by another process)")
    if state is None:
        console.print("the embedded stack is not running (start it with `gpuaware up`)")
        raise typer.Exit(1)
    down = [name for name, (how, _pid) in servers.items() if how != RUNNING]
    if servers and len(down) == len(servers):
        console.print(f"the embedded stack is not running; `gpuaware up` starts it again as it was started: "
                      f"{describe(state)} (data kept)", highlight=False)
        raise typer.Exit(1)
    if down:
        console.print(f"[yellow]the embedded stack is partly running: {', '.join(_server_name(d) for d in down)} "
                      "stopped; `gpuaware up` starts it again where it ran (data kept)[/yellow]")
        _print_state(state, title="gpuaware stack (partly running)")
        raise typer.Exit(1)
    _print_state(state, title="gpuaware stack (running)")


def _server_name(name: str) -> str:
    return {"nats": "NATS", "postgres": "PostgreSQL"}.get(name, name)


def _print_state(state, *, title: str) -> None:
    table = Table(title=title, show_header=True)
    table.add_column("server")
    table.add_column("url")
    table.add_column("managed by")
    if state.nats_nodes:
        for node in state.nats_nodes:
            table.add_row(f"NATS node {node['name']} (cluster)",
                          f"{'tls' if state.nats_tls else 'nats'}://127.0.0.1:{node['port']}", f"pid {node['pid']}")
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

