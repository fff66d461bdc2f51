"""The node agent against a real nats-server (and the collector where the data must land), on a
simulated clock: adaptive vs fixed message counts, a step change on the bus within 2 s, inventory at
start and on change, per-pod/tenant attribution of a shared GPU, and the real entry point."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import msgspec
import psycopg
import pytest
from service_runner import ensure_streams
from telemetry_helpers import (
    REPO,
    T0,
    collect_into,
    collector_settings,
    count_rows,
    flat_trace,
    quiet_fleet,
    running_collector,
    step_trace,
    wait_for,
)

from gpuaware import bus
from gpuaware.gpu import ManualClock, PodLoad
from gpuaware.schemas import (
    GPU_SAMPLED,
    NODE_INVENTORY,
    POD_BOUND,
    POD_FINISHED,
    GpuSampled,
    GpuSlice,
    NodeInventory,
    PodBound,
    PodFinished,
    PodOutcome,
)
from gpuaware.services.telemetry.agent import Agent
from gpuaware.services.telemetry.settings import AgentSettings


def _settings(nats_url: str, **kw) -> AgentSettings:
    return AgentSettings(nats_url=nats_url, backend="simulated", log_format="console", **kw)


async def _drive(agent: Agent, clock: ManualClock, seconds: int) -> None:
    for _ in range(seconds):
        await agent.tick(clock.now)
        clock.advance(1.0)


async def test_adaptive_sends_five_times_fewer_messages_and_a_step_change_within_two_seconds(nats_proc) -> None:
    counts = {}
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        for mode, fixed in (("adaptive", False), ("fixed", True)):
            got: list[GpuSampled] = []
            sub = await nc.subscribe(f"{GPU_SAMPLED}.>",
                                     cb=collect_into(got, lambda m: msgspec.json.decode(m.data, type=GpuSampled)))
            clock = ManualClock(T0)
            # 8 GPUs at a steady 20 % that step to 80 % at T0 + 300 s
            fleet = quiet_fleet(1, 8, [step_trace(20, 80, at=300)], clock=clock)
            agent = Agent(_settings(nats_proc.url, fixed_rate=fixed), js, {"node-0": fleet.node("node-0")},
                          clock=clock, fleet=fleet)
            await agent.start()
            await _drive(agent, clock, 310)
            await agent.stop()
            await nc.flush()
            await wait_for(lambda got=got, agent=agent: len(got) == agent.stats.messages, 10, what="all messages")
            await sub.unsubscribe()
            stable = [m for m in got if m.sampled_at < T0 + 300]
            counts[mode] = len(stable)
            step = next(m for m in got if m.util_pct and max(m.util_pct) > 70)
            assert step.sampled_at - (T0 + 300) <= 2.0, mode
    # 300 stable seconds: fixed 1 Hz = 300 messages; adaptive = 1 + back-off 1, 2, 4, 8, 16 s + 30-s heartbeats
    assert counts["fixed"] == 300
    assert counts["adaptive"] == 14
    assert counts["fixed"] / counts["adaptive"] >= 5


class _Shrinking:
    """A simulated node whose inventory loses GPU 7 when told to (a GPU fallen off the bus)."""

    def __init__(self, node) -> None:
        self.node = node
        self.lost = False

    def inventory(self) -> NodeInventory:
        inv = self.node.inventory()
        return msgspec.structs.replace(inv, gpus=inv.gpus[:7]) if self.lost else inv

    def sample(self, now):
        return self.node.sample(now)

    def events(self, timeout=0.0):
        return self.node.events(timeout)

    def close(self) -> None:
        self.node.close()


async def test_inventory_is_announced_at_start_and_on_change_only(nats_proc) -> None:
    async with bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        got: list[NodeInventory] = []
        await nc.subscribe(f"{NODE_INVENTORY}.>",
                           cb=collect_into(got, lambda m: msgspec.json.decode(m.data, type=NodeInventory)))
        clock = ManualClock(T0)
        fleet = quiet_fleet(1, 8, clock=clock)
        backend = _Shrinking(fleet.node("node-0"))
        agent = Agent(_settings(nats_proc.url, inventory_check_s=10, inventory_interval_s=3600), js,
                      {"node-0": backend}, clock=clock, fleet=fleet)
        await agent.start()
        await _drive(agent, clock, 60)       # checked 6 times, unchanged: nothing more
        backend.lost = True
        await _drive(agent, clock, 15)       # the next check sees 7 GPUs
        await agent.stop()
        await nc.flush()
        await wait_for(lambda: len(got) == 2, 5, what="two inventories")
    assert [len(inv.gpus) for inv in got] == [8, 7]
    assert got[0].emitted_at == T0 and T0 + 60 <= got[1].emitted_at <= T0 + 70
    assert agent.stats.inventories == 2


async def test_shared_gpu_usage_is_attributed_per_pod_and_tenant_from_binder_events(
        nats_proc, fresh_database_url) -> None:
    clock = ManualClock(T0)
    fleet = quiet_fleet(1, 2, [flat_trace(50)], clock=clock, pods=False)
    gpu0, gpu1 = fleet.uuids
    # what the GPUs run (the world) ...
    fleet.assign(gpu0, PodLoad(name="a", namespace="ns-a", milli=300, trace=0, offset_s=0, memory_mib=10_000))
    fleet.assign(gpu0, PodLoad(name="b", namespace="ns-b", milli=700, trace=0, offset_s=0, memory_mib=30_000))
    fleet.assign(gpu1, PodLoad(name="c", namespace="ns-a", milli=1000, trace=0, offset_s=0, memory_mib=5_000))

    # ... and what the binder said about it (the agent's source of allocations)
    def bound(uid: str, name: str, ns: str, queue: str, gpu: str, index: int, milli: int, mem: int) -> PodBound:
        return PodBound(source="binder/0", emitted_at=T0 - 5, pod_uid=uid, pod_name=name, namespace=ns,
                        node="node-0", bound_at=T0 - 5, queue=queue,
                        slices=(GpuSlice(gpu_uuid=gpu, gpu_index=index, gpu_milli=milli, memory_mib=mem),))

    events = [bound("u-a", "a", "ns-a", "team-1", gpu0, 0, 300, 10_000),
              bound("u-b", "b", "ns-b", "team-2", gpu0, 0, 700, 30_000),
              bound("u-c", "c", "ns-a", "team-1", gpu1, 1, 1000, 5_000),
              msgspec.structs.replace(bound("u-x", "x", "ns-x", "team-3", gpu1, 1, 1000, 1), node="node-9")]
    settings = collector_settings(nats_proc.url, fresh_database_url)
    async with running_collector(settings), bus.connected(nats_proc.url, name="test") as nc:
        js = nc.jetstream()
        await ensure_streams(js)
        for ev in events:
            await bus.publish(js, bus.Channel(POD_BOUND, PodBound), ev)
        agent = Agent(_settings(nats_proc.url, allocations="binder", usage_window_s=60), js,
                      {"node-0": fleet.node("node-0")}, clock=clock, fleet=fleet)
        await agent.start()
        # node-9's binding is not this node's business
        await wait_for(lambda: len(agent.ledgers["node-0"]) == 3, 10, what="the ledger to replay the bindings")
        await _drive(agent, clock, 60)                 # window [T0, T0+60): a, b, c
        await bus.publish(js, bus.Channel(POD_FINISHED, PodFinished), PodFinished(
            source="binder/0", emitted_at=clock.now, pod_uid="u-b", pod_name="b", namespace="ns-b",
            outcome=PodOutcome.SUCCEEDED, finished_at=clock.now, node="node-0"))
        await wait_for(lambda: len(agent.ledgers["node-0"]) == 2, 10, what="b to be released")
        fleet.release("b", "ns-b")
        await _drive(agent, clock, 60)                 # window [T0+60, T0+120): a alone on GPU 0, c
        await agent.stop()                             # charges the last read, reports the second window
        await wait_for(lambda: count_rows(fresh_database_url, "gpu_pod_usage") == 5, 15, what="5 usage rows")
    with psycopg.connect(fresh_database_url) as conn:
        pods = conn.execute("SELECT window_start - to_timestamp(%s), pod, tenant, gpu_seconds_used, "
                            "gpu_seconds_allocated FROM gpu_pod_usage ORDER BY 1, 2", (T0,)).fetchall()
        tenants = dict(conn.execute("SELECT tenant, sum(gpu_seconds_used) FROM tenant_usage_1h GROUP BY 1"))
    rows = [(w.total_seconds(), pod, tenant, round(used, 6), round(held, 6)) for w, pod, tenant, used, held in pods]
    # first minute, GPU 0 at 15 + 35 = 50 %: a 50 x 0.3 = 15 % -> 9 GPU-s of 18 held, b 35 % -> 21 of 42;
    # GPU 1 at 50 % all c's: 30 of 60. Second minute GPU 0 runs a alone (15 %): charged all of it, 9 of 18
    assert rows == [(0.0, "a", "team-1", 9.0, 18.0), (0.0, "b", "team-2", 21.0, 42.0), (0.0, "c", "team-1", 30.0, 60.0),
                    (60.0, "a", "team-1", 9.0, 18.0), (60.0, "c", "team-1", 30.0, 60.0)]
    assert {t: round(v, 6) for t, v in tenants.items()} == {"team-1": 78.0, "team-2": 21.0}


async def test_agent_entry_point_runs_and_stops_cleanly(nats_proc, fresh_database_url, tmp_path) -> None:
    env = {**os.environ, "NATS_URL": nats_proc.url, "GPUAWARE_TELEMETRY_AGENT_BACKEND": "simulated",
           "GPUAWARE_TELEMETRY_AGENT_SIM_NODES": "2", "GPUAWARE_TELEMETRY_AGENT_SIM_TRACES": "synthetic",
           "GPUAWARE_TELEMETRY_AGENT_FAST_S": "0.2", "GPUAWARE_TELEMETRY_AGENT_LOG_FORMAT": "console"}
    log = tmp_path / "agent.log"
    settings = collector_settings(nats_proc.url, fresh_database_url)
    async with running_collector(settings):
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "gpuaware.services.telemetry", "agent"], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            await wait_for(lambda: count_rows(fresh_database_url, "gpu_inventory") == 16
                           and count_rows(fresh_database_url) >= 16, 30, what="inventory and samples")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 20) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "agent reading 2 node(s)" in log.read_text()


def test_entry_point_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "gpuaware.services.telemetry", "nonsense"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and "agent|collector" in done.stderr


@pytest.mark.parametrize("settings, message", [
    (dict(backend="nvml", allocations="fleet"), "fleet"),
])
def test_agent_refuses_inconsistent_settings(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        Agent(AgentSettings(**settings), None, {})
