"""The launcher remembers how a stack was started and trusts no PID it has not checked.

`stack.json` records auth, TLS, the cluster's size, the ports and the data folders: after its servers
die, a plain `up` starts exactly that again; options that contradict it are refused with the reason
(running or not) unless `--reset` forgets it; `status` and `down` check each PID's start time and
executable before reporting or signalling it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from typer.testing import CliRunner

from gpuaware.cli.main import app
from gpuaware.devstack import (
    REUSED,
    RUNNING,
    STOPPED,
    PostgresProcess,
    StackError,
    database_passwords,
    free_port,
    pid_state,
    stack_down,
    stack_reset,
    stack_status,
    stack_up,
)
from gpuaware.devstack.processes import pid_alive, started_at

EXTERNAL_DB = {"DATABASE_URL": "postgresql://u@elsewhere/db"}
"""PostgreSQL somebody else's: the NATS-only cases start no database (cheaper), as test_devstack does"""

runner = CliRunner()


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


def _said(result) -> str:
    return " ".join((result.stdout + result.stderr).split())  # rich wraps long lines


def _refused(result) -> str:
    """A refusal: exit 1 through typer.Exit, the reason on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return " ".join(result.stderr.split())


def test_an_auth_stack_whose_servers_all_died_comes_back_with_auth_and_its_credentials(stack_dir: Path) -> None:
    # both servers of an `up --auth` stack killed: a plain `up` brought it back open and deleted the
    # credentials without a word
    data = stack_dir / "record-auth"
    first = stack_up(data, nats_port=0, env=EXTERNAL_DB, auth=True)
    creds = (data / "nats" / "credentials.json").read_text()
    try:
        assert first.state.nats_auth and first.state.nats_pid is not None
        _kill(first.state.nats_pid)
        with pytest.raises(StackError, match=r"--no-auth contradicts.*--reset"):
            stack_up(data, auth=False, env=EXTERNAL_DB)
        again = stack_up(data, env=EXTERNAL_DB)  # plain: as recorded
        assert again.restarted == ("nats",) and not again.reused
        assert again.state.nats_auth and again.state.nats_port == first.state.nats_port
        assert (data / "nats" / "credentials.json").read_text() == creds  # the same passwords
        assert str(data.resolve() / "nats" / "auth.conf") in psutil.Process(again.state.nats_pid).cmdline()
        assert stack_status(data) == again.state
    finally:
        assert stack_down(data) == ["nats"]


def test_a_cluster_whose_nodes_all_died_comes_back_as_that_cluster_on_its_stores_and_ports(stack_dir: Path) -> None:
    # a `--nats-cluster 3` stack came back as one server on a new, empty JetStream store
    data = stack_dir / "record-cluster"
    first = stack_up(data, nats_nodes=3, env=EXTERNAL_DB)
    try:
        for node in first.state.nats_nodes:
            _kill(int(node["pid"]))
        with pytest.raises(StackError, match="--nats-cluster 1 contradicts"):
            stack_up(data, nats_nodes=1, env=EXTERNAL_DB)
        again = stack_up(data, env=EXTERNAL_DB)
        assert again.restarted == ("nats-n0", "nats-n1", "nats-n2")
        assert again.state.nats_url == first.state.nats_url
        for i, (was, now) in enumerate(zip(first.state.nats_nodes, again.state.nats_nodes, strict=True)):
            assert {k: now[k] for k in ("port", "monitor_port", "cluster_port")} == \
                   {k: was[k] for k in ("port", "monitor_port", "cluster_port")}
            args = psutil.Process(int(now["pid"])).cmdline()
            assert args[args.index("-sd") + 1] == str(data.resolve() / "nats" / f"n{i}" / "jetstream")
        assert stack_status(data) == again.state
    finally:
        assert sorted(stack_down(data)) == ["nats-n0", "nats-n1", "nats-n2"]


def test_a_stack_on_its_own_ports_comes_back_on_them(stack_dir: Path) -> None:
    # a stack started on --nats-port 14222 --pg-port 15433 came back on 4222 / 5433
    data = stack_dir / "record-ports"
    nats_port, pg_port = free_port(), free_port()
    first = stack_up(data, nats_port=nats_port, pg_port=pg_port, env={})
    try:
        assert (first.state.nats_port, first.state.postgres_port) == (nats_port, pg_port)
        assert first.state.nats_pid is not None and first.state.postgres_pid is not None
        _kill(first.state.nats_pid)
        PostgresProcess(port=pg_port, data_dir=data / "postgres", pid=first.state.postgres_pid).stop(mode="immediate")
        said = runner.invoke(app, ["status", "--data-dir", str(data)])
        assert said.exit_code == 1 and f"on port {nats_port}" in _said(said) and f"port {pg_port}" in _said(said)
        refused = _refused(runner.invoke(app, ["up", "--data-dir", str(data), "--pg-port", str(free_port())]))
        assert "--pg-port" in refused and "contradicts" in refused and "--reset" in refused
        again = stack_up(data, env={})
        assert sorted(again.restarted) == ["nats", "postgres"]
        assert (again.state.nats_port, again.state.postgres_port) == (nats_port, pg_port)
        with psycopg.connect(again.state.database_url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        assert sorted(stack_down(data)) == ["nats", "postgres"]


def test_status_and_down_never_trust_a_pid_another_process_now_holds(stack_dir: Path) -> None:
    # NATS dead and its PID reused by an unrelated process: `status` said running (rc 0) and `down`
    # killed that process
    data = stack_dir / "record-pid"
    first = stack_up(data, nats_port=0, env=EXTERNAL_DB)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        assert first.state.nats_pid is not None
        _kill(first.state.nats_pid)
        record = json.loads((data / "stack.json").read_text())
        record["nats_pid"] = stranger.pid  # what the kernel does when it hands the PID out again
        (data / "stack.json").write_text(json.dumps(record))
        said = runner.invoke(app, ["status", "--data-dir", str(data)])
        assert said.exit_code == 1
        assert f"NATS: not running (PID {stranger.pid} reused by another process)" in _said(said)
        down = runner.invoke(app, ["down", "--data-dir", str(data)])
        assert down.exit_code == 0 and "reused by another process" in _said(down)
        assert "nothing of ours was running" in _said(down)
        time.sleep(0.2)
        assert stranger.poll() is None  # left alone
        assert not (data / "stack.json").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_pid_is_the_recorded_process_only_with_its_start_time_and_executable() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        began = started_at(proc.pid)
        assert began is not None
        assert pid_state(proc.pid, started=began, names=("sleep",)) == RUNNING
        assert pid_state(proc.pid, started=None, names=("sleep",)) == RUNNING  # a record from before start times
        assert pid_state(proc.pid, started=began - 60.0, names=("sleep",)) == REUSED  # same name, started later
        assert pid_state(proc.pid, started=began, names=("nats-server",)) == REUSED
    finally:
        proc.kill()
        proc.wait()
    assert pid_state(proc.pid, started=began, names=("sleep",)) == STOPPED


def test_another_mode_asked_of_a_running_stack_is_refused_not_reused(stack_dir: Path) -> None:
    # `up --tls` / `up --nats-cluster 3` on a running plain stack printed "reusing" and a plaintext URL
    data = stack_dir / "record-running"
    first = stack_up(data, nats_port=0, env=EXTERNAL_DB)
    try:
        for asked in (["--tls"], ["--nats-cluster", "3"], ["--auth"]):
            said = _refused(runner.invoke(app, ["up", "--data-dir", str(data), *asked]))
            assert f"{' '.join(asked)} contradicts" in said and "and runs" in said and "--reset" in said
            assert "reusing" not in said
        with pytest.raises(StackError, match="--tls contradicts"):
            stack_up(data, tls=True, env=EXTERNAL_DB)
        assert stack_up(data, nats_port=0, tls=False, env=EXTERNAL_DB).reused  # what it is: reused
        assert stack_status(data) == first.state
        stopped, deleted = stack_reset(data)  # `up --reset`: forget it, then start over otherwise
        assert stopped == ["nats"] and data.resolve() / "stack.json" in deleted
        over = stack_up(data, nats_port=0, tls=True, env=EXTERNAL_DB)
        assert not over.reused and over.state.nats_url.startswith("tls://")
    finally:
        stack_down(data)


def test_up_reset_says_what_it_stops_and_deletes_then_starts_over(stack_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    data = stack_dir / "record-reset"
    first = stack_up(data, nats_port=0, pg_port=0, auth=True, env={})
    database_passwords(data)  # as `up`'s provisioning draws them
    try:
        assert first.state.nats_pid is not None
        _kill(first.state.nats_pid)  # half gone: the reset still stops what runs (PostgreSQL)
        over = runner.invoke(app, ["up", "--data-dir", str(data), "--reset", "--no-auth", "--tls",
                                   "--nats-port", "0", "--pg-port", "0"])
        assert over.exit_code == 0, over.output
        said = _said(over)
        assert "--reset: stopped postgres; deleted" in said
        for gone in ("nats/credentials.json", "nats/auth.conf", "postgres-logins.json", "stack.json"):
            assert str(data.resolve() / gone) in said
        assert "the JetStream stores and the database are kept" in said and "(started)" in said
        assert "NATS_URL=tls://127.0.0.1:" in over.stdout
        assert not first.state.postgres_pid or not pid_alive(first.state.postgres_pid)
    finally:
        assert sorted(stack_down(data)) == ["nats", "postgres"]
