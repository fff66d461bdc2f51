"""The twin's GPUs as dcgm-exporter text, over plain HTTP: what a telemetry agent scrapes.

Why: the agent should read the twin's simulated GPUs the way it reads a production node, by
scraping dcgm-exporter (``DcgmExporterBackend``) from another process, so a twin run exercises the
scrape, the parser and the agent's dcgm path instead of an in-process shortcut. One binder serves
every node of its twin; one agent may scrape many of them:

    GPUAWARE_TELEMETRY_AGENT_BACKEND=dcgm
    GPUAWARE_TELEMETRY_AGENT_DCGM_URL=http://127.0.0.1:9400/metrics/{node}
    GPUAWARE_TELEMETRY_AGENT_DCGM_NODES=twin-a100x8-000,twin-h100x8-000

    GET /metrics/<node>    200 text/plain; version=0.0.4: the node's GPUs now (``render_dcgm_metrics``)
    GET /metrics           200 text/plain: the twin's node names, one per line
    an unknown node/path   404        another method   405        a malformed request   400

Values are the fleet sampled at its own clock, the twin's virtual now, so a scrape shows the load
of the pods the twin holds bound at that instant (the GPU uuids are the twin's). The handler runs on
the binder's loop, the one that advances the twin, so it reads a consistent twin without locks; a
scrape is a few numpy operations on the fleet's cached frame and never waits on anything but its
own socket. The HTTP is the minimum a Prometheus-style scraper needs - one request per connection,
``Connection: close`` - written on ``asyncio.start_server`` so the binder gains no dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse

from gpuaware.gpu import SimulatedFleet, render_dcgm_metrics
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.services.binder.world import World

__all__ = ["CONTENT_TYPE", "DcgmExporter", "start_exporter"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""the Prometheus text exposition format, as dcgm-exporter answers"""
_PLAIN = "text/plain; charset=utf-8"
_READ_TIMEOUT_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error"}


class DcgmExporter:
    """An HTTP server answering ``/metrics/<node>`` from a ``SimulatedFleet`` (see the module docstring)."""

    def __init__(self, fleet: SimulatedFleet, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fleet = fleet
        self.host = host
        self.port = port
        """the port asked for; the one bound after ``start`` (0 asks the OS for a free one)"""
        self.scrapes = 0
        self._nodes = frozenset(fleet.nodes)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # --- what is answered -------------------------------------------------------------------------
    def metrics(self, node: str) -> str:
        """One node's GPUs as dcgm-exporter text, sampled at the fleet's clock (the twin's now)."""
        backend = self.fleet.node(node)
        return render_dcgm_metrics(backend.inventory(), backend.sample(self.fleet.clock()))

    def respond(self, method: str, target: str) -> tuple[int, str, str]:
        """(status, content type, body) for one request."""
        path = urllib.parse.urlsplit(target).path
        node: str | None = None
        if path.startswith("/metrics/") and path != "/metrics/":
            node = urllib.parse.unquote(path.removeprefix("/metrics/"))
            if node not in self._nodes:
                return 404, _PLAIN, f"no node {node!r} in the twin; GET /metrics lists them\n"
        elif path not in ("/metrics", "/metrics/"):
            return 404, _PLAIN, "not found: GET /metrics lists the nodes, GET /metrics/<node> serves one\n"
        if method not in ("GET", "HEAD"):
            return 405, _PLAIN, f"{method} not allowed here: GET /metrics or /metrics/<node>\n"
        if node is None:
            return 200, _PLAIN, "".join(f"{n}\n" for n in self.fleet.nodes)
        self.scrapes += 1
        return 200, CONTENT_TYPE, self.metrics(node)

    # --- HTTP -------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return  # the client went away, sent too much, or nothing at all: nothing to answer
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            method = parts[0] if parts else ""
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                status, content_type, body = 400, _PLAIN, "malformed request line\n"
            else:
                try:
                    status, content_type, body = self.respond(method, parts[1])
                except Exception:
                    log.exception("dcgm-exporter endpoint: answering %s %s failed", method, parts[1])
                    status, content_type, body = 500, _PLAIN, "rendering the metrics failed (see the binder's log)\n"
            data = body.encode("utf-8")
            allow = "Allow: GET, HEAD\r\n" if status == 405 else ""
            writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(data)}\r\n{allow}Connection: close\r\n\r\n".encode("latin-1"))
            if method != "HEAD":
                writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def start_exporter(world: World, settings: BinderSettings) -> DcgmExporter | None:
    """The endpoint the settings ask for, listening; None (and a log line saying why) when off or impossible."""
    if not settings.exporter_port:
        return None
    fleet = world.twin.fleet if isinstance(world, TwinWorld) else None
    if fleet is None:
        why = ("the twin runs without its simulated GPUs (GPUAWARE_BINDER_FLEET=false)"
               if isinstance(world, TwinWorld) else f"the {world.kind} world has no simulated GPUs")
        log.warning("dcgm-exporter endpoint not started: %s; GPUAWARE_BINDER_EXPORTER_PORT=%d is ignored",
                    why, settings.exporter_port)
        return None
    exporter = DcgmExporter(fleet, host=settings.exporter_host, port=settings.exporter_port)
    try:
        await exporter.start()
    except OSError as exc:
        raise RuntimeError(f"cannot serve the dcgm-exporter endpoint on {settings.exporter_host}:"
                           f"{settings.exporter_port} ({exc}); free the port or change "
                           "GPUAWARE_BINDER_EXPORTER_PORT (0 = off)") from exc
    log.info("dcgm-exporter endpoint for the twin's %d nodes at %s/<node>", len(fleet.nodes), exporter.url)
    return exporter
