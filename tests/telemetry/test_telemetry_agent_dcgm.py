"""One agent scraping several dcgm-exporters (``dcgm_nodes`` + a ``{node}`` URL): one backend per
node, settings that cannot work refused with a message naming the variables, and end to end the
digital twin's GPUs - served by a real binder process as dcgm-exporter text - published as
``GpuSampled`` for each twin node by an agent in this process, with the load the twin bound."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from service_runner import ensure_streams
from telemetry_helpers import REPO, T0, collect_into, wait_for

from gpuaware import bus
from gpuaware.gpu import (
    DcgmExporterBackend,
    FleetNode,
    FleetSpec,
    ManualClock,
    SimulatedFleet,
    render_dcgm_metrics,
)
from gpuaware.runtime import SettingsError
from gpuaware.schemas import (
    GPU_SAMPLED,
    NODE_INVENTORY,
    PLACEMENT_DECIDED,
    WORLD_SNAPSHOT,
    GpuSampled,
    GpuSlice,
    NodeInventory,
    PlacementDecided,
    WorldSnapshotReply,
    WorldSnapshotRequest,
)
from gpuaware.services.telemetry.agent import Agent, make_backends
from gpuaware.services.telemetry.settings import AgentSettings

# --- settings and backends ----------------------------------------------------------------------------


class DcgmExporter(http.server.BaseHTTPRequestHandler):
    """A quiet stand-in for dcgm-exporter; a subclass's ``do_GET`` answers with ``answer``."""

    def answer(self, fleet: SimulatedFleet, node: str) -> None:
        """Serve ``node``'s GPUs of ``fleet`` as dcgm-exporter text."""
        body = render_dcgm_metrics(fleet.inventory(node), fleet.node(node).sample(T0)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporters() -> Iterator[tuple[str, list[str]]]:
    """A dcgm-exporter for nodes n-a and n-b on one port (``/metrics/<node>``, ``/metrics`` = n-a), and
    the paths it was asked for."""
    fleet = SimulatedFleet(FleetSpec(nodes=(FleetNode("n-a", gpus=2), FleetNode("n-b", gpus=1)), seed=5,
                                     traces="synthetic"), clock=ManualClock(T0))
    asked: list[str] = []

    class Handler(DcgmExporter):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.answer(fleet, self.path.rsplit("/", 1)[-1] if self.path.startswith("/metrics/") else "n-a")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()
    server.server_close()


def test_one_backend_per_named_node_each_on_its_own_url(exporters: tuple[str, list[str]]) -> None:
    url, asked = exporters
    settings = AgentSettings(backend="dcgm", dcgm_url=f"{url}/metrics/{{node}}", dcgm_nodes="n-a, n-b")
    backends, fleet = make_backends(settings)
    assert fleet is None and list(backends) == ["n-a", "n-b"]
    assert all(isinstance(b, DcgmExporterBackend) for b in backends.values())
    frames = {name: b.sample(T0) for name, b in backends.items()}
    assert asked == ["/metrics/n-a", "/metrics/n-b"]
    assert [len(f) for f in frames.values()] == [2, 1]
    assert [b.inventory().node for b in backends.values()] == ["n-a", "n-b"]


def test_without_dcgm_nodes_the_agent_scrapes_its_own_node_as_before(exporters: tuple[str, list[str]]) -> None:
    url, asked = exporters
    backends, _ = make_backends(AgentSettings(backend="dcgm", dcgm_url=f"{url}/metrics", node_name="here"))
    assert list(backends) == ["here"]
    assert len(backends["here"].sample(T0)) == 2 and asked == ["/metrics"]
    one, _ = make_backends(AgentSettings(backend="dcgm", dcgm_url=f"{url}/metrics", dcgm_nodes="n-a"))
    assert list(one) == ["n-a"]  # one named node needs no placeholder


@pytest.mark.parametrize("settings, message", [
    (dict(backend="dcgm", dcgm_url="http://binder:9400/metrics/{node}"), "placeholder but .*DCGM_NODES is empty"),
    (dict(backend="dcgm", dcgm_nodes="a,b"), "names 2 nodes but .*no \\{node\\} placeholder"),
    (dict(backend="nvml", dcgm_nodes="a"), "BACKEND=dcgm only"),
    (dict(backend="dcgm", dcgm_nodes="a,a", dcgm_url="http://b/{node}"), "repeats a node"),
    (dict(backend="dcgm", dcgm_nodes="a,b", dcgm_url="http://b/{node}", node_name="c"), "NODE_NAME"),
])
def test_settings_that_cannot_work_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        AgentSettings(**settings)


def test_the_environment_names_them() -> None:
    env = {"GPUAWARE_TELEMETRY_AGENT_BACKEND": "dcgm",
           "GPUAWARE_TELEMETRY_AGENT_DCGM_URL": "http://binder:9400/metrics/{node}",
           "GPUAWARE_TELEMETRY_AGENT_DCGM_NODES": "twin-a,twin-b"}
    assert AgentSettings.from_env(env).dcgm_node_names() == ["twin-a", "twin-b"]
    with pytest.raises(SettingsError, match="DCGM_NODES"):
        AgentSettings.from_env({k: v for k, v in env.items() if not k.endswith("DCGM_NODES")})


async def test_scrapes_run_together_and_off_the_loop(nats_proc) -> None:
    """Four exporters that answer only once all four are asked, and only after the agent's event loop has
    turned meanwhile: a read one after the other, or one holding the loop (NATS pings, acks, the binder's
    events), gets no answer in time and counts as a read error."""
    names = [f"s{k}" for k in range(4)]
    fleet = SimulatedFleet(FleetSpec(nodes=tuple(FleetNode(n, gpus=1) for n in names), seed=5, traces="synthetic"),
                           clock=ManualClock(T0))
    all_asked = threading.Barrier(len(names), timeout=10)
    turns = [0]
    held: list[str] = []

    class Slow(DcgmExporter):
        def do_GET(self) -> None:
            all_asked.wait()  # BrokenBarrierError (no answer) unless the four scrapes are in flight together
            seen, waited = turns[0], 0
            while turns[0] < seen + 3 and waited < 1000:  # the loop turns while the scrape waits on us
                time.sleep(0.01)
                waited += 1
            if turns[0] < seen + 3:
                held.append(self.path)
            self.answer(fleet, self.path.rsplit("/", 1)[-1])

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = AgentSettings(nats_url=nats_proc.url, backend="dcgm", dcgm_nodes=",".join(names),
                                 dcgm_url=f"http://127.0.0.1:{server.server_address[1]}/metrics/{{node}}",
                                 allocations="none", log_format="console")
        async with bus.connected(nats_proc.url, name="test") as nc:
            js = nc.jetstream()
            await ensure_streams(js)
            clock = ManualClock(T0)
            agent = Agent(settings, js, make_backends(settings, clock=clock)[0], clock=clock, instance="test")

            async def spin() -> None:
                while True:
                    await asyncio.sleep(0.01)
                    turns[0] += 1

            spinner = asyncio.create_task(spin())
            await agent.start()  # waits for the four targets to answer (their inventories, scraped together)
            await agent.tick(clock.now)
            spinner.cancel()
            await agent.stop()
    finally:
        server.shutdown()
        server.server_close()
    assert agent.stats.reads == 4 and agent.stats.read_errors == 0, "the scrapes did not run together"
    assert held == [], f"the agent's loop stood still while {held} were scraped"


# --- end to end: the twin in a binder process, scraped by an agent here ------------------------------

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,2,T4\nn2,64000,262144,1,A100\n"
PODS_CSV = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time\np0,1000,2048,1,1000,,LS,Running,0,100000,0\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError):
        return None


async def _snapshot(nc: object) -> WorldSnapshotReply:
    ask = WorldSnapshotRequest(source="test", emitted_at=T0, limit=100)
    return await bus.request(nc, WORLD_SNAPSHOT, ask, WorldSnapshotReply, timeout=2)


async def test_an_agent_publishes_the_twins_gpus_scraped_from_the_binder(nats_proc, tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    port = _free_port()
    env = {**os.environ, "NATS_URL": nats_proc.url, "GPUAWARE_BINDER_TWIN_NODES": str(tmp_path / "nodes.csv"),
           "GPUAWARE_BINDER_WORKLOAD": "openb", "GPUAWARE_BINDER_WORKLOAD_FILE": str(tmp_path / "pods.csv"),
           # real time, and no jump over idle stretches: a jump would run p0 to its end at once
           "GPUAWARE_BINDER_START": str(T0), "GPUAWARE_BINDER_SPEED": "1", "GPUAWARE_BINDER_SKIP_IDLE": "false",
           "GPUAWARE_BINDER_EXPORTER_PORT": str(port), "GPUAWARE_BINDER_LOG_FORMAT": "console"}
    log = tmp_path / "binder.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gpuaware.services.binder"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO)
    base = f"http://127.0.0.1:{port}/metrics"
    try:
        async def up() -> bool:
            assert proc.poll() is None, log.read_text()
            return await asyncio.to_thread(_get, base) == "n1\nn2\n"

        await wait_for(up, 30, what="the binder's dcgm-exporter endpoint")
        async with bus.connected(nats_proc.url, name="test") as nc:
            js = nc.jetstream()
            await ensure_streams(js)

            async def pending() -> WorldSnapshotReply | None:
                reply = await _snapshot(nc)
                return reply if reply.pending_pods == 1 else None

            world = await wait_for(pending, 20, what="p0 to arrive in the twin")
            gpus = {n.name: [g.uuid for g in n.gpus] for n in world.nodes}
            await bus.publish(js, bus.Channel(PLACEMENT_DECIDED, PlacementDecided), PlacementDecided(
                source="placement/test", emitted_at=T0, decision_id="d-1", pod_uid="p0", pod_name="p0",
                namespace="openb", node="n1", policy="test", score=50.0, decided_at=T0,
                slices=(GpuSlice(gpu_uuid=gpus["n1"][0], gpu_index=0, gpu_milli=1000, memory_mib=4000),)),
                msg_id="test/d-1")

            async def bound() -> bool:
                return (await _snapshot(nc)).total_pods == 1

            try:
                await wait_for(bound, 20, what="p0 to be bound")
            except AssertionError:
                raise AssertionError(log.read_text()) from None

            sampled: list[GpuSampled] = []
            inventories: list[NodeInventory] = []
            await nc.subscribe(f"{GPU_SAMPLED}.>", cb=collect_into(
                sampled, lambda m: msgspec.json.decode(m.data, type=GpuSampled)))
            await nc.subscribe(f"{NODE_INVENTORY}.>", cb=collect_into(
                inventories, lambda m: msgspec.json.decode(m.data, type=NodeInventory)))
            settings = AgentSettings.from_env({
                "NATS_URL": nats_proc.url, "GPUAWARE_TELEMETRY_AGENT_BACKEND": "dcgm",
                "GPUAWARE_TELEMETRY_AGENT_DCGM_URL": f"{base}/{{node}}",
                "GPUAWARE_TELEMETRY_AGENT_DCGM_NODES": "n1,n2", "GPUAWARE_TELEMETRY_AGENT_ALLOCATIONS": "none",
                "GPUAWARE_TELEMETRY_AGENT_FIXED_RATE": "true", "GPUAWARE_TELEMETRY_AGENT_LOG_FORMAT": "console"})
            clock = ManualClock(T0)
            backends, _ = make_backends(settings, clock=clock)
            agent = Agent(settings, js, backends, clock=clock, instance="test")
            await agent.start()
            for _ in range(3):
                await agent.tick(clock.now)
                clock.advance(1.0)
            await agent.stop()
            await nc.flush()
            await wait_for(lambda: len(sampled) == agent.stats.messages == 6 and len(inventories) == 2, 10,
                           what="3 reads x 2 nodes and 2 inventories")
        assert agent.stats.read_errors == 0 and agent.stats.publish_errors == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, log.read_text()
    assert f"{base}/<node>" in log.read_text()   # the bound address is logged

    # the twin's own GPUs, by the uuids the twin gave them, node by node
    assert {i.node: [g.uuid for g in i.gpus] for i in inventories} == gpus
    assert {i.node: [g.model for g in i.gpus] for i in inventories} == {
        "n1": ["Tesla T4", "Tesla T4"], "n2": ["NVIDIA A100-SXM4-80GB"]}
    by_node = {n: [m for m in sampled if m.node == n] for n in ("n1", "n2")}
    assert [len(v) for v in by_node.values()] == [3, 3]
    for node, messages in by_node.items():
        assert all(list(m.gpu_uuid) == gpus[node] for m in messages)
    for m in by_node["n1"]:
        (busy_util, idle_util), (busy_mem, idle_mem) = m.util_pct, m.mem_used_mib
        assert busy_util is not None and busy_util > 0 and idle_util == 0
        # p0 holds its 4000-MiB slice: 1 MiB of an idle board + 4000 x (0.9 .. 1.0) with its duty cycle
        assert busy_mem is not None and 1 + 3600 <= busy_mem <= 1 + 4000 and idle_mem == 1
    assert all(m.util_pct == (0,) and m.mem_used_mib == (1,) for m in by_node["n2"])
