"""The embedded stack starts real servers, reuses them, refuses taken ports, honours external URLs."""

import socket
from pathlib import Path

import psycopg
import pytest

from gpuaware.devstack import StackError, stack_down, stack_status, stack_up, start_nats


def test_up_reuses_then_down_stops(stack_dir: Path) -> None:
    data = stack_dir / "up-down"
    first = stack_up(data, nats_port=0, pg_port=0, env={})
    try:
        assert not first.reused
        with psycopg.connect(first.state.database_url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with socket.create_connection(("127.0.0.1", first.state.nats_port), timeout=2) as sock:
            assert sock.recv(4).startswith(b"INFO")
        second = stack_up(data, nats_port=0, pg_port=0, env={})
        assert second.reused
        assert second.state == first.state
    finally:
        stopped = stack_down(data)
    assert sorted(stopped) == ["nats", "postgres"]
    assert stack_status(data) is None


def test_external_urls_start_nothing(stack_dir: Path) -> None:
    env = {"NATS_URL": "nats://elsewhere:4222", "DATABASE_URL": "postgresql://u@elsewhere/db"}
    stack = stack_up(stack_dir / "external", env=env)
    assert stack.state.nats_external and stack.state.postgres_external
    assert stack.state.nats_url == env["NATS_URL"]
    assert stack_down(stack_dir / "external") == []


def test_taken_port_is_a_clear_error(stack_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(StackError, match=f"port {port} is already taken"):
            start_nats(stack_dir / "taken", port=port)


def test_down_forgets_the_nats_credentials(stack_dir: Path) -> None:
    # both credential files stayed on disk after `down` (issue 16): passwords must not outlive the stack
    data = stack_dir / "auth-down"
    stack = stack_up(data, nats_port=0, env={"DATABASE_URL": "postgresql://elsewhere/db"}, auth=True)
    try:
        assert stack.state.nats_auth
        assert (data / "nats" / "credentials.json").exists() and (data / "nats" / "auth.conf").exists()
    finally:
        assert stack_down(data) == ["nats"]
    assert not (data / "nats" / "credentials.json").exists() and not (data / "nats" / "auth.conf").exists()


def test_a_killed_nats_server_is_started_again_where_it_ran_and_postgres_kept(stack_dir: Path) -> None:
    # kill -9 of the stack's nats-server: `up` then refused with "PostgreSQL port ... already taken"
    # (it did not recognise its own PostgreSQL) and `status` said nothing ran (issue 16)
    import os
    import signal

    from typer.testing import CliRunner

    from gpuaware.cli.main import app
    from gpuaware.devstack import stack_health

    data = stack_dir / "revive"
    first = stack_up(data, nats_port=0, pg_port=0, env={})
    try:
        os.kill(first.state.nats_pid, signal.SIGKILL)
        _wait_dead(first.state.nats_pid)
        state, alive = stack_health(data)
        assert state == first.state and alive == {"nats": False, "postgres": True}
        assert stack_status(data) is None
        said = CliRunner().invoke(app, ["status", "--data-dir", str(data)])
        assert said.exit_code == 1 and "partly running: NATS stopped" in " ".join(said.stderr.split())
        again = stack_up(data, nats_port=0, pg_port=0, env={})
        assert again.reused and again.restarted == ("nats",)
        assert again.state.nats_port == first.state.nats_port and again.state.nats_url == first.state.nats_url
        assert again.state.postgres_pid == first.state.postgres_pid  # the living one, untouched
        assert again.state.nats_pid != first.state.nats_pid and stack_status(data) == again.state
        with socket.create_connection(("127.0.0.1", again.state.nats_port), timeout=2) as sock:
            assert sock.recv(4).startswith(b"INFO")
    finally:
        assert sorted(stack_down(data)) == ["nats", "postgres"]


def _wait_dead(pid: int, timeout: float = 5.0) -> None:
    import time

    from gpuaware.devstack.processes import pid_alive

    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)
