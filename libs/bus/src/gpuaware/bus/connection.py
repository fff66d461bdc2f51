"""Connecting to NATS: reconnect forever with bounded, jittered backoff; drain on the way out.

A service must outlive NATS restarts and rolling upgrades, so the client never gives up
(`max_reconnect_attempts=-1`); the wait between attempts grows exponentially from `base` to `cap`
with full jitter, so a fleet of services does not stampede a server coming back. Errors,
disconnects and reconnects are logged (nats-py would otherwise print or swallow them), and leaving
`connected()` drains: in-flight handlers finish and buffered publishes are flushed before close.

The initial connection retries the same way; `initial_timeout` bounds it for tools and tests that
would rather fail fast than wait for a server that may never come. Closing the client after a failed
connection (a TLS handshake refused, a login refused) is bounded too (``CLOSE_TIMEOUT_S``): nats-py's
close waits for the transport to close, which after a failed TLS handshake may never happen, and a
failed connect must return its error, not hang.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from gpuaware.bus.retry import RetryPolicy, Uniform
from gpuaware.schemas import inbox_prefix

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0
"""how long closing a client may take before it is abandoned (its tasks are cancelled by then)"""

__all__ = ["Client", "ReconnectPolicy", "connect", "connected", "reconnect_delay", "tls_context"]


def tls_context(ca_file: str) -> ssl.SSLContext:
    """What a client verifies a TLS NATS server with: this CA only, TLS 1.2 or newer, host name checked
    (``connect(..., tls=tls_context(ca))``; services get it from ``NATS_TLS_CA``)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """How long to wait before reconnect attempt n (0-based) to one server."""

    base: float = 0.1
    """first delay, seconds: a restarted local server is usually back within a fraction of a second"""
    cap: float = 5.0
    """longest delay, seconds: bounds the time a service stays offline after NATS is back"""
    jitter: float = 0.5
    """fraction of the delay drawn at random, so many clients spread their attempts"""
    connect_timeout: float = 2.0
    """TCP + handshake timeout of one attempt"""
    ping_interval: float = 10.0
    """seconds between client pings; a silent server is declared dead after 3 missed pongs"""

    @property
    def backoff(self) -> RetryPolicy:
        """The waits between attempts, as the bus's one backoff."""
        return RetryPolicy(base=self.base, cap=self.cap, jitter=self.jitter)


def reconnect_delay(attempt: int, policy: ReconnectPolicy, rng: Uniform | None = None) -> float:
    """The wait before reconnect attempt ``attempt`` (0-based: nats-py's count of failed attempts)."""
    return policy.backoff.delay(attempt + 1, rng)


async def connect(url: str | Sequence[str], *, name: str, policy: ReconnectPolicy | None = None,
                  initial_timeout: float | None = None, **options: Any) -> Client:
    """A connected client that reconnects forever; extra `options` go to `nats.connect`.

    A client connecting as a ``user`` gets that user's own inbox prefix (``_INBOX_<user>``, see
    ``gpuaware.schemas.permissions``): the server lets each identity read only its own replies."""
    policy = policy or ReconnectPolicy()
    # "nats://a:4222,nats://b:4222": the nodes of a cluster, as NATS_URL names them
    servers = [u.strip() for u in url.split(",") if u.strip()] if isinstance(url, str) else list(url)

    async def on_error(exc: Exception) -> None:
        log.warning("nats %s: %s: %s", name, type(exc).__name__, exc)

    async def on_disconnect() -> None:
        if nc.is_closed or nc.is_draining:
            log.debug("nats %s: disconnected (closing)", name)
        else:
            log.warning("nats %s: disconnected, reconnecting", name)

    async def on_reconnect() -> None:
        log.info("nats %s: reconnected to %s", name, nc.connected_url.netloc if nc.connected_url else "?")

    async def on_closed() -> None:
        log.info("nats %s: connection closed", name)

    def choose(servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        # nats-py counts failed attempts per server; pick the least-failed one and back off on it
        server = min(servers, key=lambda s: s.reconnects)
        return server, reconnect_delay(server.reconnects, policy)

    nc = Client()
    opts: dict[str, Any] = {
        "servers": servers,
        "name": name,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": policy.base,  # used by nats-py between failed *initial* attempts
        "reconnect_to_server_handler": choose,
        "connect_timeout": policy.connect_timeout,
        "ping_interval": policy.ping_interval,
        "max_outstanding_pings": 3,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "closed_cb": on_closed,
    }
    if options.get("user") and "inbox_prefix" not in options:
        opts["inbox_prefix"] = inbox_prefix(str(options["user"]))
    opts.update(options)
    try:
        await asyncio.wait_for(nc.connect(**opts), timeout=initial_timeout)
    except BaseException:
        await _close_bounded(nc, name)
        raise
    log.info("nats %s: connected to %s", name, nc.connected_url.netloc if nc.connected_url else "?")
    return nc


async def _close_bounded(nc: Client, name: str = "") -> None:
    """``nc.close()``, abandoned after ``CLOSE_TIMEOUT_S`` (its status is already closed and its reading,
    pinging and flushing tasks cancelled by then; what is left is waiting for the socket)."""
    if nc.is_closed:
        return
    try:
        await asyncio.wait_for(nc.close(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        log.warning("nats %s: close did not finish within %g s; abandoned", name or "client", CLOSE_TIMEOUT_S)
    except Exception as exc:
        log.warning("nats %s: close failed: %s: %s", name or "client", type(exc).__name__, exc)


async def close(nc: Client) -> None:
    """Drain (finish subscriptions, flush publishes) then close; tolerate a connection already gone."""
    if nc.is_closed:
        return
    if nc.is_connected:
        try:
            await nc.drain()
            return
        except Exception as exc:  # drain can fail mid-reconnect; closing is what matters now
            log.warning("nats drain failed (%s); closing", exc)
    await _close_bounded(nc)


@asynccontextmanager
async def connected(url: str | Sequence[str], *, name: str, policy: ReconnectPolicy | None = None,
                    initial_timeout: float | None = None, **options: Any) -> AsyncIterator[Client]:
    """`async with connected(url, name="placement") as nc:` — drained and closed on exit."""
    nc = await connect(url, name=name, policy=policy, initial_timeout=initial_timeout, **options)
    try:
        yield nc
    finally:
        await close(nc)
