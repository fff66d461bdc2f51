"""A connection that fails returns its error promptly: `bus.connect` gives up after `initial_timeout`
and then closes the half-made client, and that close is bounded (`CLOSE_TIMEOUT_S`). nats-py's close
waits for the socket to close, and a TLS socket cut off mid-handshake (a server that never completes
it) never does: unbounded, the failed connect hung for good instead of raising."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gpuaware import bus
from gpuaware.bus import connection
from gpuaware.devstack import NatsProcess, start_nats
from gpuaware.devstack.tls import make_server_certificates
from gpuaware.schemas.permissions import ADMIN

CEILING_S = 60.0
"""a connect that has not returned by then hangs (it takes initial_timeout + the bound here)"""


@pytest.fixture(scope="module")
def tls_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsProcess]:
    proc = start_nats(tmp_path_factory.mktemp("tls") / "nats", tls=True, auth=True)
    yield proc
    proc.stop()


@pytest.fixture
async def stalled_tls() -> AsyncIterator[str]:
    """A server that announces TLS (its INFO says tls_required) and then never answers the handshake."""
    writers: list[asyncio.StreamWriter] = []
    done = asyncio.Event()

    async def handle(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        writers.append(w)
        w.write(b"INFO " + json.dumps({"server_id": "stalled", "version": "2.10.0", "proto": 1, "headers": True,
                                        "max_payload": 1048576, "tls_required": True}).encode() + b"\r\n")
        await w.drain()
        await done.wait()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield f"tls://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    done.set()
    for w in writers:
        w.close()
    server.close()
    await server.wait_closed()


async def test_a_handshake_that_never_completes_returns_its_error(stalled_tls: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "CLOSE_TIMEOUT_S", 0.5)  # the production bound, shorter
    ca = make_server_certificates(tmp_path / "ca").ca
    outcome: BaseException | None = None
    async with asyncio.timeout(CEILING_S):  # a hang fails here (an error other than the connect's)
        try:
            await bus.connect(stalled_tls, name="stalled", initial_timeout=1.0, tls=bus.tls_context(str(ca)))
        except TimeoutError as exc:
            outcome = exc
    assert isinstance(outcome, TimeoutError)


async def test_a_wrong_ca_returns_its_error(tls_nats: NatsProcess, tmp_path: Path) -> None:
    other = make_server_certificates(tmp_path / "other")  # a CA that did not sign the server's certificate
    user, password = tls_nats.credentials()[ADMIN]
    errors: list[BaseException] = []

    async def remember(exc: Exception) -> None:
        errors.append(exc)

    outcome: BaseException | None = None
    async with asyncio.timeout(CEILING_S):
        try:
            async with bus.connected(tls_nats.url, name="wrong-ca", initial_timeout=1.0, error_cb=remember,
                                     tls=bus.tls_context(str(other.ca)), user=user, password=password):
                pass
        except TimeoutError as exc:
            outcome = exc
    assert isinstance(outcome, TimeoutError), "a server the CA does not verify was accepted"
    assert any("CERTIFICATE_VERIFY_FAILED" in str(e) for e in errors), errors


async def test_a_refused_login_returns_its_error(tls_nats: NatsProcess) -> None:
    user, _password = tls_nats.credentials()[ADMIN]
    errors: list[BaseException] = []

    async def remember(exc: Exception) -> None:
        errors.append(exc)

    outcome: BaseException | None = None
    async with asyncio.timeout(CEILING_S):
        try:
            async with bus.connected(tls_nats.url, name="bad-login", initial_timeout=2.0, error_cb=remember,
                                     tls=bus.tls_context(str(tls_nats.tls_ca)), user=user, password="wrong"):
                pass
        except Exception as exc:
            outcome = exc
    assert outcome is not None, "a refused login connected"
    assert any("authorization" in str(e).lower() for e in [outcome, *errors]), (outcome, errors)
