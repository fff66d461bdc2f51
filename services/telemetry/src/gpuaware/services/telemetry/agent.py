"""The node agent: read the GPUs every ``fast_s``, publish what the edge logic says is news.

One process per GPU node (a DaemonSet), or one process reading several nodes: a simulated fleet
(demo, tests, benchmarks) or several dcgm-exporters (``dcgm_nodes``). Per read and per node:
``backend.sample(now)`` + ``backend.events()`` -> ``NodeEdge.observe`` (gpuaware.telemetry: adaptive
sampling, anomaly flags, per-pod usage) -> publish. The inventory is announced at start, whenever a
check finds it changed (or a GPU was lost), and every ``inventory_interval_s`` regardless, so a
reader that joins late finds it.

Pod allocations come from the simulated fleet's assignments (the digital twin), or from the
binder's events on ``binder.pod.>``. For the latter the agent replays the BINDER stream from its
start at every start-up (its durable consumer is recreated), so its ledger is whole again after a
restart; the stream's retention bounds that replay.

Samples go out with ``publish_async`` (pipelined; the stream acks are checked on the next read and
failures logged), inventory and usage reports with ``publish`` (each waits for its ack).

dcgm-exporter scrapes wait on the network, so they run in threads, all of a read's at once: one
agent can scrape many exporters (``dcgm_nodes``, e.g. every node of the digital twin as served by
the binder) without stalling its loop. NVML and the simulated fleet are read in place.

Time comes from ``clock`` (Unix seconds): the system clock in production, a ``ManualClock`` in
tests, which then call ``tick()`` themselves instead of ``run()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from gpuaware import bus
from gpuaware.gpu import (
    DcgmExporterBackend,
    EventKind,
    FleetSpec,
    GpuBackend,
    GpuBackendError,
    GpuBackendUnavailable,
    GpuEvent,
    GpuFrame,
    NvmlBackend,
    SimulatedFleet,
    system_clock,
)
from gpuaware.runtime import Sample, counter, supervise
from gpuaware.schemas import (
    TELEMETRY_AGENT,
    GpuSampled,
    NodeInventory,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUsageReported,
    consumer_name,
)
from gpuaware.services.telemetry.settings import AgentSettings
from gpuaware.telemetry import AllocationLedger, NodeEdge, PodAlloc, allocations_by_gpu, from_pod_shares

log = logging.getLogger(__name__)

# no message id: a sample is never re-published, and the collector stores it once by (gpu_uuid, ts)
SAMPLED = bus.event_channel(GpuSampled, dedupe=False)
INVENTORY = bus.event_channel(NodeInventory)
USAGE = bus.event_channel(PodUsageReported)
BinderEvent = PodBound | PodFinished | PodPreempted | PodPending | PodBindFailed
BINDER_EVENTS: bus.Channel[Any] = bus.Channel("binder.pod.>", BinderEvent)  # type: ignore[arg-type]  # a union of Structs decodes; Channel's type parameter wants one class
T = TypeVar("T")
TARGET_WAIT_S = 60.0
"""how long the agent waits at start for its dcgm-exporter targets to answer (then it reads what answers
and retries the rest on every read, as before)"""
TARGET_BACKOFF_S = (0.1, 2.0)
"""the first pause between tries at start, doubling up to the second"""


@dataclass
class AgentStats:
    reads: int = 0
    messages: int = 0
    rows: int = 0
    usage_reports: int = 0
    inventories: int = 0
    publish_errors: int = 0
    read_errors: int = 0
    refused_at_start: int = 0
    """tries at start that found a target not up yet (``Agent.await_targets``)"""


def _same_inventory(a: NodeInventory | None, b: NodeInventory) -> bool:
    return a is not None and msgspec.structs.replace(a, emitted_at=0.0, source="-") == msgspec.structs.replace(
        b, emitted_at=0.0, source="-")


class Agent:
    """Reads, decides and publishes for one or more nodes (see the module docstring)."""

    def __init__(self, settings: AgentSettings, js: Any, backends: Mapping[str, GpuBackend], *,
                 clock: Callable[[], float] = system_clock, fleet: SimulatedFleet | None = None,
                 instance: str = "") -> None:
        self.settings = settings
        self.js = js
        self.backends = dict(backends)
        self.clock = clock
        self.fleet = fleet
        self.source = f"{settings.service_name}/{instance or socket.gethostname()}"
        self.allocation_mode = settings.allocation_source()
        if self.allocation_mode == "fleet" and fleet is None:
            raise ValueError("allocations from the fleet need the simulated backend")
        cluster = settings.cluster
        self.edges = {node: NodeEdge(node, source=self.source, cluster=settings.cluster, policy=settings.policy(),
                                     usage_window_s=settings.usage_window_s) for node in self.backends}
        self.channels = {node: (SAMPLED.at(cluster, node), INVENTORY.at(cluster, node), USAGE.at(cluster, node))
                         for node in self.backends}
        self.ledgers = {node: AllocationLedger(node) for node in self.backends}
        self.stats = AgentStats()
        self._announced: dict[str, NodeInventory] = {}
        self._announced_at: dict[str, float] = {}
        self._checked_at = float("-inf")
        self._acks: list[asyncio.Future[bus.PubAck]] = []
        self._consumer: bus.DurableConsumer[Any] | None = None

    # --- life -------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Wait for the scrape targets, announce every node's inventory; follow the binder's events when
        they are the allocations."""
        if self.allocation_mode == "binder":
            await self._follow_binder()
        await self.await_targets()

    async def await_targets(self, *, ceiling_s: float = TARGET_WAIT_S,
                            backoff_s: tuple[float, float] = TARGET_BACKOFF_S) -> bool:
        """Announce the inventory of every dcgm-exporter target, trying again with exponential back-off
        those that did not answer yet, for at most ``ceiling_s``: an exporter that starts after the agent
        (the twin's, served by a binder still starting; a DaemonSet's pod beside ours) costs a few tries,
        not the samples read before its inventory was announced (a collector sets aside samples of GPUs
        no inventory named). A target that answered is not scraped again here (its last scrape is reused).
        True when every target was announced; False at the ceiling (logged; each read retries them and
        the next inventory check announces them). NVML and the simulated fleet are ready at once."""
        deadline = time.monotonic() + ceiling_s
        pause, most = backoff_s
        while True:
            await self.check_inventory(self.clock(), force=True)
            refused = [n for n, b in self.backends.items()
                       if isinstance(b, DcgmExporterBackend) and n not in self._announced]
            if not refused:
                return True
            self.stats.refused_at_start += len(refused)
            if time.monotonic() + pause > deadline:
                log.warning("%d of %d scrape targets still not announced after %.0f s (first: %s); reading on, "
                            "they are retried on every read", len(refused), len(self.backends), ceiling_s, refused[0])
                return False
            log.info("%d scrape target(s) not up yet (first: %s); trying again in %.2g s", len(refused), refused[0],
                     pause)
            await asyncio.sleep(pause)
            pause = min(most, pause * 2)

    async def _follow_binder(self) -> None:
        durable = consumer_name(TELEMETRY_AGENT, *sorted(self.backends))
        stream = await self.js.find_stream_name_by_subject(BINDER_EVENTS.subject)
        try:  # replay from the stream's start at every start-up: the ledger lives in memory
            await self.js.delete_consumer(stream, durable)
        except Exception as exc:
            log.debug("no previous consumer %s to delete (%s)", durable, exc)
        self._consumer = await bus.subscribe_durable(self.js, BINDER_EVENTS, durable, self._on_binder,
                                                     stream=stream, deliver_policy="all", batch=256, poll=0.5)

    async def _on_binder(self, event: Any, _delivery: bus.Delivery) -> None:
        if isinstance(event, PodBound):
            ledger = self.ledgers.get(event.node)
            if ledger is not None:
                ledger.bound(event)
        elif isinstance(event, PodFinished | PodPreempted):
            for ledger in self.ledgers.values():
                ledger.released(event.pod_uid)

    async def stop(self) -> None:
        """Report the unfinished usage windows, wait for pending acks, stop following the binder."""
        now = self.clock()
        for node, edge in self.edges.items():
            report = edge.close(now)
            if report is not None:
                await self._publish_report(node, report)
        await self._settle_acks(wait=True)
        if self._consumer is not None:
            await self._consumer.stop()
        for backend in self.backends.values():
            with contextlib.suppress(Exception):
                backend.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Read every ``fast_s`` of wall time until ``stop`` is set."""
        period = self.settings.fast_s
        next_at = time.monotonic()
        while not stop.is_set():
            await self.tick(self.clock())
            next_at += period
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow backend): skip the missed reads, do not burst
                next_at = time.monotonic()
                delay = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    # --- one read -----------------------------------------------------------------------------------
    def allocations(self, node: str) -> Mapping[str, Sequence[PodAlloc]]:
        if self.allocation_mode == "fleet" and self.fleet is not None:
            return allocations_by_gpu(from_pod_shares(p for ps in self.fleet.assignments(node).values() for p in ps))
        if self.allocation_mode == "binder":
            return self.ledgers[node].by_gpu()
        return {}

    async def tick(self, now: float) -> None:
        """One read of every node at ``now``: publish the rows that are news and closed usage windows."""
        await self._settle_acks(wait=False)
        lost = False

        def read(backend: GpuBackend) -> tuple[GpuFrame, list[GpuEvent]]:
            return backend.sample(now), backend.events(0.0)

        scraped = await self._scrape(read)
        for node, backend in self.backends.items():
            try:
                frame, events = _result(scraped, node) if node in scraped else read(backend)
            except GpuBackendError as exc:
                self.stats.read_errors += 1
                log.warning("reading the GPUs of %s failed (%s); next read retries", node, exc)
                continue
            lost |= any(e.kind is EventKind.GPU_LOST for e in events)
            self.stats.reads += 1
            out = self.edges[node].observe(frame, now, events=events, allocations=self.allocations(node),
                                           emitted_at=now)
            sampled_ch, _, _ = self.channels[node]
            if out.sampled is not None:
                try:
                    self._acks.append(await bus.publish_async(self.js, sampled_ch, out.sampled))
                    self.stats.messages += 1
                    self.stats.rows += len(out.sampled.gpu_uuid)
                except Exception as exc:
                    self.stats.publish_errors += 1
                    log.warning("publishing the samples of %s failed (%s)", node, exc)
            if out.usage is not None:
                await self._publish_report(node, out.usage)
        await self.check_inventory(now, force=lost)

    async def _scrape(self, read: Callable[[GpuBackend], T]) -> dict[str, T | BaseException]:
        """``read`` of every backend that waits on the network (a dcgm-exporter scrape), all at once in
        threads: the loop keeps serving NATS meanwhile, and N exporters cost one round trip, not N.
        The others are read in place by the caller, as before. Results or exceptions, by node."""
        nodes = [n for n, b in self.backends.items() if isinstance(b, DcgmExporterBackend)]
        if not nodes:
            return {}
        done = await asyncio.gather(*(asyncio.to_thread(read, self.backends[n]) for n in nodes),
                                    return_exceptions=True)
        return dict(zip(nodes, done, strict=True))

    async def _publish_report(self, node: str, report: PodUsageReported) -> None:
        try:
            await bus.publish(self.js, self.channels[node][2], report, timeout=self.settings.publish_timeout_s)
            self.stats.usage_reports += 1
        except Exception as exc:
            self.stats.publish_errors += 1
            log.warning("publishing the pod usage of %s failed (%s)", node, exc)

    async def _settle_acks(self, *, wait: bool) -> None:
        if not self._acks:
            return
        if wait:
            await asyncio.wait(self._acks, timeout=self.settings.publish_timeout_s)
        pending = []
        for fut in self._acks:
            if not fut.done():
                pending.append(fut)
            elif fut.cancelled() or fut.exception() is not None:
                self.stats.publish_errors += 1
                log.warning("a sample batch was not stored by the stream (%s)",
                            "cancelled" if fut.cancelled() else fut.exception())
        self._acks = pending

    async def check_inventory(self, now: float, *, force: bool = False) -> None:
        """Announce each node's inventory when it changed, or when it is due again."""
        s = self.settings
        if not force and now - self._checked_at < s.inventory_check_s:
            return
        self._checked_at = now
        scraped = await self._scrape(lambda backend: backend.inventory())
        for node, backend in self.backends.items():
            try:
                inv = _result(scraped, node) if node in scraped else backend.inventory()
            except GpuBackendError as exc:
                log.warning("reading the inventory of %s failed (%s)", node, exc)
                continue
            stale = now - self._announced_at.get(node, float("-inf")) >= s.inventory_interval_s
            if _same_inventory(self._announced.get(node), inv) and not stale:
                continue
            inv = msgspec.structs.replace(inv, source=self.source, emitted_at=now)
            try:
                await bus.publish(self.js, self.channels[node][1], inv, timeout=s.publish_timeout_s)
            except Exception as exc:
                self.stats.publish_errors += 1
                log.warning("announcing the inventory of %s failed (%s); the next check retries", node, exc)
                continue
            self._announced[node], self._announced_at[node] = inv, now
            self.stats.inventories += 1


def _result(scraped: Mapping[str, T | BaseException], node: str) -> T:
    value = scraped[node]
    if isinstance(value, BaseException):
        raise value
    return value


def make_backends(settings: AgentSettings, *, clock: Callable[[], float] = system_clock
                  ) -> tuple[dict[str, GpuBackend], SimulatedFleet | None]:
    """The backends the settings ask for; ``GpuBackendUnavailable`` says clearly why not."""
    if settings.backend == "simulated":
        fleet = SimulatedFleet(FleetSpec.uniform(settings.sim_nodes, settings.sim_gpus_per_node, settings.sim_model,
                                                 prefix=settings.sim_prefix, seed=settings.sim_seed,
                                                 occupancy=settings.sim_occupancy, traces=settings.sim_traces,
                                                 cluster=settings.cluster), clock=clock)
        return {node: fleet.node(node) for node in fleet.nodes}, fleet
    if settings.backend == "dcgm" and settings.dcgm_nodes:
        return {name: DcgmExporterBackend(settings.dcgm_url.replace("{node}", urllib.parse.quote(name, safe="")),
                                          node=name, clock=clock)
                for name in settings.dcgm_node_names()}, None
    node = settings.node_name or socket.gethostname()
    if settings.backend == "dcgm":
        return {node: DcgmExporterBackend(settings.dcgm_url, node=node, clock=clock)}, None
    try:
        return {node: NvmlBackend(node, clock=clock)}, None
    except GpuBackendUnavailable as exc:
        raise GpuBackendUnavailable(
            f"NVML is not usable on this machine ({exc}). On a GPU node, run the agent with the NVIDIA "
            "driver and libnvidia-ml mounted; elsewhere set GPUAWARE_TELEMETRY_AGENT_BACKEND=dcgm "
            "(a dcgm-exporter URL) or =simulated.") from exc


class AgentRunner:
    """The agent's read loop as a background task that `run_service` stops on SIGTERM."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.agent.start()
        self._task = supervise("telemetry-agent", lambda: self.agent.run(self._stop), until=self._stop.is_set)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self.agent.stop()


def agent_samples(agent: Agent) -> Iterable[Sample]:
    """The agent's Prometheus series: GPU rows read and published, read and publish errors."""
    st = agent.stats
    yield counter("gpuaware_telemetry_agent_rows", "GPU sample rows published", st.rows)
    yield counter("gpuaware_telemetry_agent_messages", "sample messages published", st.messages)
    for kind, n in (("read", st.read_errors), ("publish", st.publish_errors)):
        yield counter("gpuaware_telemetry_agent_errors", "failed GPU reads and publishes", n, kind=kind)


async def mount_agent(ctx: Any) -> list[bus.Endpoint[Any, Any]]:
    settings: AgentSettings = ctx.settings
    backends, fleet = make_backends(settings)
    runner = AgentRunner(Agent(settings, ctx.js, backends, fleet=fleet, instance=ctx.instance_id))
    await runner.start()
    ctx.on_stop(runner)
    ctx.metrics.source(lambda: agent_samples(runner.agent))
    log.info("agent reading %d node(s) every %.3gs (%s sampling, allocations from %s)", len(backends),
             settings.fast_s, "fixed" if settings.fixed_rate else "adaptive", runner.agent.allocation_mode)
    return []
