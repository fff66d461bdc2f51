"""``python -m gpuaware.services.binder`` runs from its settings alone: it builds the twin the
environment describes, publishes its pods, answers ``world.snapshot``, and drains on SIGTERM. And
each setting picks the world it names."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from binder_helpers import T0, Recorder

from gpuaware import bus
from gpuaware.schemas import WORLD_SNAPSHOT, PodPending, WorldSnapshotReply, WorldSnapshotRequest
from gpuaware.services.binder.settings import BinderSettings
from gpuaware.services.binder.twin_world import build_twin


async def test_the_entry_point_serves_a_generated_world(private_nats: str) -> None:
    env = {**os.environ, "NATS_URL": private_nats, "GPUAWARE_BINDER_TWIN_NODES": "default",
           "GPUAWARE_BINDER_TWIN_DEFAULT_NODES": "6", "GPUAWARE_BINDER_WORKLOAD": "generator",
           "GPUAWARE_BINDER_MAX_PODS": "5", "GPUAWARE_BINDER_SPEED": "100000", "GPUAWARE_BINDER_START": str(T0),
           "GPUAWARE_BINDER_LOG_FORMAT": "console"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuaware.services.binder"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        async with bus.connected(private_nats, name="binder-process-test", initial_timeout=5) as nc:
            ask = WorldSnapshotRequest(source="test", emitted_at=T0, include_pods=False, limit=100)
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                try:
                    reply = await bus.request(nc, WORLD_SNAPSHOT, ask, WorldSnapshotReply, timeout=1)
                    break
                except bus.ServiceError:
                    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                    assert asyncio.get_running_loop().time() < deadline, "binder never answered"
                    await asyncio.sleep(0.2)
            assert reply.world == "twin" and reply.total_nodes == 6 and len(reply.nodes) == 6
            recorder = Recorder()
            await recorder.start(nc.jetstream())
            pending = await recorder.wait_for(lambda: len(recorder.of(PodPending)) >= 5, timeout=20)
            assert pending
            assert all(p.submitted_at >= T0 for p in recorder.of(PodPending))
            await recorder.stop()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_settings_choose_nodes_and_workload(shared_data: Path) -> None:
    default = build_twin(BinderSettings(twin_nodes="default", twin_default_nodes=8, workload="generator",
                                        window_s=3600, seed=4), start=T0)
    assert len(default.nodes) == 8 and default.counts()["future"] > 0
    models = {n.gpu_model for n in default.nodes.values()}
    assert all(set(p.gpu_types) <= models for p in default.pods())

    openb = build_twin(BinderSettings(twin_nodes="auto", shared_data=str(shared_data), workload="openb",
                                      window_start_s=11_000_000, window_s=86400, fleet=False), start=T0)
    assert len(openb.nodes) == 1213 and 100 < sum(openb.counts().values()) < 1000

    philly = build_twin(BinderSettings(twin_nodes="default", shared_data=str(shared_data), workload="philly",
                                       window_start_s=40 * 86400, window_s=3600, max_pods=50, fleet=False),
                        start=T0)
    assert 0 < sum(philly.counts().values()) <= 57  # the last job may be a gang of up to 8 pods
