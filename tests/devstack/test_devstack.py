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
