"""The embedded stack starts real servers, reuses them, refuses taken ports, honours external URLs."""

import socket
from pathlib import Path
from typing import ClassVar

import psycopg
import pytest

from gpuaware.devstack import StackError, database_passwords, stack_down, stack_status, stack_up, start_nats
from gpuaware.schemas import PROCESSES


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


async def test_nats_over_tls_with_a_throwaway_ca(tmp_path: Path) -> None:
    # TLS between the services and NATS (issue 16): a client that trusts the stack's CA talks; one
    # without TLS, or trusting another CA, is refused; the server's key is owner-only
    import asyncio
    import stat

    from gpuaware import bus
    from gpuaware.devstack.tls import make_server_certificates

    async def refused(url: str, **options: object) -> BaseException:
        try:
            async with bus.connected(url, name="refused", initial_timeout=3, **options):
                pass
        except Exception as exc:  # whatever the client library raises: the point is that it raises
            return exc
        raise AssertionError(f"{url} accepted a client it should refuse ({options})")

    proc = start_nats(tmp_path / "nats", tls=True)
    try:
        assert proc.url.startswith("tls://") and proc.tls_ca is not None
        assert stat.S_IMODE((proc.data_dir / "tls" / "server-key.pem").stat().st_mode) == 0o600
        async with bus.connected(proc.url, name="t", initial_timeout=5, tls=bus.tls_context(str(proc.tls_ca))) as nc:
            got: list[bytes] = []

            async def on(msg) -> None:
                got.append(msg.data)

            await nc.subscribe("tls.check", cb=on)
            await nc.publish("tls.check", b"over tls")
            await nc.flush()
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.02)
            assert got == [b"over tls"]
        await refused(proc.url.replace("tls://", "nats://"))  # no CA given: the server's cert is not trusted
        other = make_server_certificates(tmp_path / "other-ca")
        await refused(proc.url, tls=bus.tls_context(str(other.ca)))
    finally:
        proc.stop()


def test_every_dev_server_states_its_file_store_limit_instead_of_following_the_free_disk(tmp_path: Path) -> None:
    # nats-server's default limit is 75 % of the free disk, and gpuaware's streams reserve their
    # max_bytes against it: on a fuller disk they were refused ("insufficient storage"). Plain, with
    # auth, restarted and as a cluster node, the server reports the stated limit.
    import json
    import urllib.request

    from gpuaware.devstack.cluster import start_cluster_node
    from gpuaware.devstack.nats import MAX_FILE_STORE
    from gpuaware.devstack.ports import free_port

    def limit(proc) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.monitor_port}/jsz", timeout=5) as reply:
            return json.load(reply)["config"]["max_storage"]

    plain = start_nats(tmp_path / "plain")
    guarded = start_nats(tmp_path / "auth", auth=True)
    node = start_cluster_node(tmp_path / "cluster", 0, cluster_ports=[free_port()])
    try:
        assert [limit(p) for p in (plain, guarded, node)] == [MAX_FILE_STORE] * 3
        plain = plain.restart()
        guarded = guarded.restart()
        assert [limit(plain), limit(guarded)] == [MAX_FILE_STORE] * 2
        assert "authorization" in json.loads((tmp_path / "auth" / "auth.conf").read_text())  # auth kept
    finally:
        for p in (plain, guarded, node):
            p.stop()


def test_database_login_passwords_are_kept_private_then_forgotten_by_down(stack_dir: Path) -> None:
    data = stack_dir / "logins-down"
    stack = stack_up(data, nats_port=0, env={"DATABASE_URL": "postgresql://elsewhere/db"})
    try:
        first = database_passwords(data)
        assert set(first) == {p.name for p in PROCESSES if p.database_role}  # none for the agent or the bridge
        assert database_passwords(data) == first  # drawn once per stack
        assert (data / "postgres-logins.json").stat().st_mode & 0o777 == 0o600
    finally:
        assert stack_down(data) == ["nats"]
    assert stack.state.postgres_external and not (data / "postgres-logins.json").exists()
    assert database_passwords(data) != first


class _SamePortTwice:
    """A socket whose kernel hands out 5000, 5000, then 5001 (what two calls before either port is
    bound can get)."""

    ports: ClassVar[list[int]] = []

    def __init__(self, *_args: object) -> None:
        pass

    def __enter__(self) -> "_SamePortTwice":
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def bind(self, _address: object) -> None:
        pass

    def getsockname(self) -> tuple[str, int]:
        return "127.0.0.1", self.ports.pop(0)


def test_free_port_never_hands_the_same_port_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuaware.devstack import ports

    monkeypatch.setattr(_SamePortTwice, "ports", [5000, 5000, 5001])
    monkeypatch.setattr(ports.socket, "socket", _SamePortTwice)
    monkeypatch.setattr(ports, "_handed_out", ports.deque(maxlen=ports.RECENT_PORTS))
    assert [ports.free_port(), ports.free_port()] == [5000, 5001]  # a server's client and monitoring ports
