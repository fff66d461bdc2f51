"""The binder serves its twin's GPUs as dcgm-exporter text over real HTTP: read through the backend a
production agent uses, the GPU of a bound pod is busy and holds the pod's slice memory while idle GPUs
read idle; unknown nodes and paths are 404, other methods 405; the endpoint lives and dies with the
binder, refuses a taken port loudly, and is not started, with a line saying why, without a fleet."""

from __future__ import annotations

import asyncio
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from binder_helpers import T0, Harness, decision, sim_pod, twin_world

from gpuaware.gpu import DcgmExporterBackend
from gpuaware.runtime import SettingsError
from gpuaware.schemas import PodBound, PodPending
from gpuaware.services.binder.exporter import DcgmExporter
from gpuaware.services.binder.settings import BinderSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str) -> tuple[int, str, str]:
    """(status, content type, body) of one request (blocking: call it in a thread)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def exporter_log() -> Iterator[list[str]]:
    """What the exporter module logs (run_service replaces the root handlers, so listen on its logger)."""
    logger = logging.getLogger("gpuaware.services.binder.exporter")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_a_bound_pods_gpu_reads_busy_through_a_real_scrape(harness: Harness, exporter_log: list[str]) -> None:
    world = twin_world(sim_pod("a", milli=500, gmem=2000), fleet=True)
    port = free_port()
    running = await harness.start(world, exporter_port=port)
    base = f"http://127.0.0.1:{port}/metrics"
    assert f"{base}/<node>" in " ".join(exporter_log)

    status, _, body = await asyncio.to_thread(http, "GET", base)
    assert (status, body.split()) == (200, ["n1", "n2"])
    n1 = DcgmExporterBackend(f"{base}/n1", node="n1")
    before = {r.gpu_index: r for r in (await asyncio.to_thread(n1.sample, T0)).rows()}
    assert [(r.util_pct, r.mem_used_mib) for r in before.values()] == [(0, 1), (0, 1)]   # nothing bound yet

    rec = harness.recorder
    await rec.wait_for(lambda: rec.of(PodPending, "a"))
    await harness.decide(decision(world, "d-1", "a", "n1", [(0, 500, 2000)]))
    await rec.wait_for(lambda: rec.of(PodBound, "a"))

    frame = await asyncio.to_thread(n1.sample, T0)
    inventory = await asyncio.to_thread(n1.inventory)
    twin_uuids = [g.uuid for g in world.twin.node_gpus["n1"]]
    assert list(frame.gpu_uuid) == twin_uuids == [g.uuid for g in inventory.gpus]
    assert frame.gpu_index.tolist() == [0, 1] and inventory.node == "n1"
    busy, idle = (r for r in frame.rows())
    assert busy.util_pct is not None and busy.util_pct > 0
    # the pod holds its 2000-MiB slice: the fleet's 1 MiB of an idle board + 2000 x (0.9 .. 1.0) as its
    # duty cycle goes (a trace at v % holds 90 + v/10 % of the pod's memory); not the fleet's own guess
    # for a pod of unknown memory, 40-90 % of its share (half of 15360 MiB: 3072 .. 6912)
    assert busy.mem_used_mib is not None and 1 + 1800 <= busy.mem_used_mib <= 1 + 2000
    assert (idle.util_pct, idle.mem_used_mib, idle.tensor_active_pct) == (0, 1, 0)
    assert busy.power_w > idle.power_w and busy.sm_clock_mhz > idle.sm_clock_mhz
    n2 = await asyncio.to_thread(DcgmExporterBackend(f"{base}/n2", node="n2").sample, T0)
    assert [(r.util_pct, r.mem_used_mib) for r in n2.rows()] == [(0, 1)]

    status, content_type, text = await asyncio.to_thread(http, "GET", f"{base}/n1")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text and 'Hostname="n1"' in text
    assert (await asyncio.to_thread(http, "GET", f"{base}/nope"))[:1] == (404,)
    assert (await asyncio.to_thread(http, "GET", f"http://127.0.0.1:{port}/healthz"))[:1] == (404,)
    assert (await asyncio.to_thread(http, "POST", f"{base}/n1"))[:1] == (405,)
    assert "nope" in (await asyncio.to_thread(http, "GET", f"{base}/nope"))[2]

    await running.shutdown()
    assert refused(port), "the endpoint outlived the binder"


async def test_without_a_fleet_the_endpoint_is_not_started_and_the_log_says_why(
        harness: Harness, exporter_log: list[str]) -> None:
    port = free_port()
    running = await harness.start(twin_world(sim_pod("a"), fleet=False), exporter_port=port)
    assert refused(port)
    assert any("not started" in line and "GPUAWARE_BINDER_FLEET=false" in line for line in exporter_log), exporter_log
    await running.shutdown()


async def test_a_taken_port_stops_the_binder_with_a_clear_error(harness: Harness) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"{port}.*GPUAWARE_BINDER_EXPORTER_PORT"):
            await harness.start(twin_world(fleet=True), exporter_port=port)


def test_exporter_settings_from_the_environment() -> None:
    s = BinderSettings.from_env({"GPUAWARE_BINDER_EXPORTER_PORT": "9400", "GPUAWARE_BINDER_EXPORTER_HOST": "0.0.0.0"})
    assert (s.exporter_port, s.exporter_host) == (9400, "0.0.0.0")
    assert (BinderSettings().exporter_port, BinderSettings().exporter_host) == (0, "127.0.0.1")  # off by default
    with pytest.raises(SettingsError, match="EXPORTER_PORT"):
        BinderSettings.from_env({"GPUAWARE_BINDER_EXPORTER_PORT": "70000"})


async def test_the_http_edges() -> None:
    """Straight on the server (an OS-chosen port): a query string is ignored, HEAD has no body, a
    malformed request is 400, a client that sends nothing is dropped without hurting the next one."""
    world = twin_world(fleet=True)
    assert world.twin.fleet is not None
    exporter = DcgmExporter(world.twin.fleet, port=0)
    await exporter.start()
    try:
        assert exporter.port != 0 and exporter.url == f"http://127.0.0.1:{exporter.port}/metrics"

        async def raw(request: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", exporter.port)
            writer.write(request)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            return answer

        ok = await raw(b"GET /metrics/n1?format=text HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and b'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in ok
        head = await raw(b"HEAD /metrics/n2 HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
        assert b"Content-Length: 0" not in head                 # the length of the body GET would get
        assert (await raw(b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        assert (await raw(b"DELETE /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
        _, silent = await asyncio.open_connection("127.0.0.1", exporter.port)
        silent.close()                                           # connects, says nothing, leaves
        assert (await raw(b"GET /metrics HTTP/1.1\r\n\r\n")).endswith(b"\r\n\r\nn1\nn2\n")
        assert exporter.scrapes == 2                              # GET and HEAD of a node
    finally:
        await exporter.stop()
