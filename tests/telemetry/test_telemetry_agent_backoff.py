"""The agent waits for a scrape target that is not up yet - with back-off - instead of losing its first
samples: its inventory is announced once the exporter answers (a collector sets aside samples of GPUs no
inventory named), and a target that never comes up is given up on at a ceiling, not waited on forever."""

from __future__ import annotations

import pytest
from service_runner import ensure_streams
from telemetry_helpers import T0

from gpuaware import bus
from gpuaware.gpu import (
    DcgmExporterBackend,
    FleetNode,
    FleetSpec,
    GpuBackendError,
    ManualClock,
    SimulatedFleet,
    render_dcgm_metrics,
)
from gpuaware.services.telemetry.agent import Agent
from gpuaware.services.telemetry.settings import AgentSettings


def exporter_up_after(refusals: int) -> tuple[list[int], object]:
    """A dcgm-exporter stand-in that refuses its first ``refusals`` scrapes (not listening yet), then
    serves a fleet node's GPUs; the list counts the scrapes."""
    fleet = SimulatedFleet(FleetSpec(nodes=(FleetNode("s0", gpus=2),), seed=5, traces="synthetic"),
                           clock=ManualClock(T0))
    calls = [0]

    def fetch() -> str:
        calls[0] += 1
        if calls[0] <= refusals:
            raise GpuBackendError("scraping http://s0/metrics failed (connection refused)")
        return render_dcgm_metrics(fleet.inventory("s0"), fleet.node("s0").sample(T0))

    return calls, fetch


@pytest.mark.timeout(60)
async def test_a_target_that_comes_up_late_is_announced_once_it_answers(nats_proc) -> None:
    calls, fetch = exporter_up_after(3)
    settings = AgentSettings(nats_url=nats_proc.url, backend="dcgm", dcgm_nodes="s0",
                             dcgm_url="http://127.0.0.1:1/metrics/{node}", allocations="none", log_format="console")
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        clock = ManualClock(T0)
        backend = DcgmExporterBackend(fetch, node="s0", clock=clock)  # type: ignore[arg-type]  # the stand-in's callable
        agent = Agent(settings, js, {"s0": backend}, clock=clock, instance="test")
        await agent.start()
        # three refusals, then one scrape that announced the inventory; the first read reuses nothing stale
        assert calls[0] == 4 and agent.stats.refused_at_start == 3 and agent.stats.inventories == 1
        await agent.tick(clock.now)
        assert agent.stats.reads == 1 and agent.stats.read_errors == 0 and agent.stats.rows == 2
        await agent.stop()


@pytest.mark.timeout(60)
async def test_a_target_that_never_answers_is_given_up_at_the_ceiling(nats_proc) -> None:
    calls, fetch = exporter_up_after(10**9)
    settings = AgentSettings(nats_url=nats_proc.url, backend="dcgm", dcgm_nodes="s0",
                             dcgm_url="http://127.0.0.1:1/metrics/{node}", allocations="none", log_format="console")
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        clock = ManualClock(T0)
        agent = Agent(settings, js, {"s0": DcgmExporterBackend(fetch, node="s0", clock=clock)},  # type: ignore[arg-type]  # the stand-in's callable
                      clock=clock, instance="test")
        assert await agent.await_targets(ceiling_s=0.3, backoff_s=(0.05, 0.1)) is False
        # tried again with pauses growing 0.05, 0.1, 0.1 ... within 0.3 s: a few tries, not a busy loop
        assert 2 <= calls[0] <= 8 and agent.stats.inventories == 0
