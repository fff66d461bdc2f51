"""`gpuaware up --auth --tls --nats-cluster 3`: every node has the same users and certificates, the
routes between nodes are authenticated and TLS, and after all the nodes died a plain `up` brings the
cluster back exactly so (same users, passwords, CA, ports and JetStream stores).

One cluster for the whole module: each embedded start costs seconds on a loaded machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import stat
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuaware import bus
from gpuaware.devstack import StackError, describe, stack_credentials, stack_down, stack_status, stack_up
from gpuaware.devstack.processes import pid_alive
from gpuaware.runtime import provision_streams
from gpuaware.schemas import POD_BOUND
from gpuaware.schemas.permissions import ADMIN, BINDER_ID, TELEMETRY_AGENT
from gpuaware.schemas.streams import BINDER

EXTERNAL_DB = {"DATABASE_URL": "postgresql://u@elsewhere/db"}
"""PostgreSQL somebody else's: only NATS is started (cheaper)"""
CLUSTER = "default"  # the devstack renders the permissions for the default cluster


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """A stand-in payload (permissions and routes are about subjects, not schemas)."""

    text: str = ""


async def _retry(call: Callable[[], Awaitable[Any]], *, what: str, timeout: float = 60.0) -> Any:
    """``call`` until it succeeds: a fresh (or revived) cluster elects its leaders first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except Exception as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout}s ({type(exc).__name__}: {exc})") from exc
            await asyncio.sleep(0.3)


async def _refused(urls: str, **options: Any) -> None:
    accepted = False

    async def attempt() -> None:
        nonlocal accepted
        async with bus.connected(urls, name="refused", initial_timeout=3, **options):
            accepted = True

    # whatever the client library raises, the point is that it is refused; bounded as a whole, since
    # closing a refused TLS connection can wait on its socket indefinitely
    with contextlib.suppress(Exception):
        await asyncio.wait_for(attempt(), timeout=20)
    assert not accepted, f"{urls} accepted a client it should refuse ({sorted(options)})"


def _route_greeting(port: int, tls: Path, *, with_certificate: bool) -> bytes:
    """What a node's route port says to a TLS client trusting the stack's CA (with the nodes' certificate
    as a client certificate, or none): the first line after the handshake, or b"" when refused."""
    ctx = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    if with_certificate:
        ctx.load_cert_chain(str(tls / "server.pem"), str(tls / "server-key.pem"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            return sock.makefile("rb").readline()
    except (ssl.SSLError, ConnectionError):
        return b""


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


async def _check_secure(data: Path, state: Any) -> None:
    """What a secure cluster requires: every client URL TLS, a user, the stack's CA; every route a
    user and TLS."""
    ca = str(data.resolve() / "nats" / "tls" / "ca.pem")
    assert state.nats_auth and state.nats_tls_ca == ca and len(state.nats_nodes) == 3
    assert all(u.startswith("tls://") for u in state.nats_url.split(","))
    user, password = stack_credentials(data)[BINDER_ID]
    await _refused(state.nats_url, tls=bus.tls_context(ca))  # TLS but no user
    await _refused(state.nats_url.replace("tls://", "nats://"), user=user, password=password)  # a user, no TLS
    for node in state.nats_nodes:  # a route must present a certificate of the CA, then a route user
        port, tls = int(node["cluster_port"]), data / "nats" / "tls"
        assert not _route_greeting(port, tls, with_certificate=False).startswith(b"INFO")
        greeting = _route_greeting(port, tls, with_certificate=True)
        assert greeting.startswith(b"INFO "), greeting
        info = json.loads(greeting[5:])
        assert info.get("auth_required") and info.get("tls_required"), info


def _as(state: Any, data: Path, identity: str) -> Any:
    user, password = stack_credentials(data)[identity]
    return bus.connected(state.nats_url, name=f"test-{identity}", initial_timeout=10, user=user, password=password,
                         tls=bus.tls_context(state.nats_tls_ca))


async def _replayed(state: Any, data: Path, expected: set[str]) -> None:
    """As the telemetry agent (a service user): a durable on the R3 binder stream replays ``expected``."""
    seen: set[str] = set()

    async def on_event(msg: Note, _d: bus.Delivery) -> None:
        seen.add(msg.text)

    async with _as(state, data, TELEMETRY_AGENT) as nc:
        js = nc.jetstream()
        durable = f"telemetry-agent-n{uuid.uuid4().hex[:8]}"
        consumer = await _retry(lambda: bus.subscribe_durable(js, bus.Channel("binder.pod.>", Note), durable,
                                                              on_event, stream=BINDER.name, deliver_policy="all",
                                                              batch=64, poll=0.5),
                                what="a durable on the binder stream")
        try:
            deadline = time.monotonic() + 60
            while not expected <= seen:
                assert time.monotonic() < deadline, f"replayed {sorted(seen)}, expected {sorted(expected)}"
                await asyncio.sleep(0.1)
        finally:
            await consumer.stop()
        await _retry(lambda: js.delete_consumer(BINDER.name, durable), what="delete the durable")


async def test_an_auth_tls_cluster_guards_clients_and_routes_and_comes_back_so_after_a_full_death(
        stack_dir: Path) -> None:
    # `up --auth --tls --nats-cluster 3` was refused ("not supported with a NATS cluster yet")
    data = stack_dir / "secure-cluster"
    first = stack_up(data, nats_nodes=3, auth=True, tls=True, env=EXTERNAL_DB)
    try:
        state = first.state
        assert "3-node cluster (--nats-cluster 3) with --auth --tls" in describe(state)
        await _check_secure(data, state)
        for node in state.nats_nodes:  # the route password is in each node's configuration: owner-only
            assert stat.S_IMODE((data / node["data_dir"] / "node.conf").stat().st_mode) == 0o600
        admin, admin_password = stack_credentials(data)[ADMIN]
        await provision_streams(state.nats_url, user=admin, password=admin_password, streams=[BINDER],
                                tls_ca=state.nats_tls_ca, timeout=60)
        async with _as(state, data, BINDER_ID) as nc:  # a service user publishes into the R3 stream
            js = nc.jetstream()
            for i in range(3):
                await _retry(lambda i=i: bus.publish(js, bus.Channel(POD_BOUND, Note).at(CLUSTER), Note(text=f"b{i}"),
                                                     timeout=3.0), what=f"publish b{i}")
            info = await js.stream_info(BINDER.name)
            assert info.config.num_replicas == 3 and info.state.messages >= 3
        await _replayed(state, data, {"b0", "b1", "b2"})

        creds = (data / "nats" / "credentials.json").read_text()
        ca = Path(state.nats_tls_ca).read_bytes()
        for node in state.nats_nodes:
            _kill(int(node["pid"]))
        with pytest.raises(StackError, match="--no-tls contradicts"):
            stack_up(data, tls=False, env=EXTERNAL_DB)
        again = stack_up(data, env=EXTERNAL_DB)  # plain: as recorded
        assert again.restarted == ("nats-n0", "nats-n1", "nats-n2") and not again.reused
        assert again.state.nats_url == state.nats_url and again.state.nats_tls_ca == state.nats_tls_ca
        assert [{k: n[k] for k in ("port", "monitor_port", "cluster_port")} for n in again.state.nats_nodes] == \
               [{k: n[k] for k in ("port", "monitor_port", "cluster_port")} for n in state.nats_nodes]
        assert (data / "nats" / "credentials.json").read_text() == creds  # the same passwords
        assert Path(again.state.nats_tls_ca).read_bytes() == ca  # the same CA: clients keep trusting it
        assert stack_status(data) == again.state
        await _check_secure(data, again.state)
        await _replayed(again.state, data, {"b0", "b1", "b2"})  # the JetStream stores survived, R3
    finally:
        stopped = stack_down(data)
    assert sorted(stopped) == ["nats-n0", "nats-n1", "nats-n2"]
    for gone in ("credentials.json", "auth.conf", "route-credentials.json", "n0/node.conf"):
        assert not (data / "nats" / gone).exists(), gone
