"""End to end under least privilege: the real placement process, logged in as `placement`, decides a
pending pod on an auth-enabled server whose streams an admin provisioned; its log never shows the
password."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuaware import bus
from gpuaware.devstack import start_nats
from gpuaware.runtime import provision_streams
from gpuaware.schemas import (
    PLACEMENT_DECIDED,
    GpuInfo,
    NodeInventory,
    PlacementDecided,
    PodPending,
)
from gpuaware.schemas.permissions import ADMIN, PLACEMENT_ID

CLUSTER = "default"


async def test_placement_process_decides_as_its_own_user(tmp_path: Path) -> None:
    server = start_nats(tmp_path / "nats", auth=True)
    proc: subprocess.Popen | None = None
    try:
        creds = server.credentials()
        admin_user, admin_pw = creds[ADMIN]
        await provision_streams(server.url, user=admin_user, password=admin_pw)
        user, password = creds[PLACEMENT_ID]
        env = {**os.environ, "NATS_URL": server.url, "NATS_USER": user, "NATS_PASSWORD": password,
               "GPUAWARE_PLACEMENT_CLUSTER": CLUSTER, "GPUAWARE_PLACEMENT_INSTANCE_ID": "auth1",
               "GPUAWARE_PLACEMENT_WORLD_SNAPSHOT": "false", "GPUAWARE_PLACEMENT_LOG_LEVEL": "INFO",
               "GPUAWARE_PLACEMENT_LOG_FORMAT": "json"}
        proc = subprocess.Popen([sys.executable, "-m", "gpuaware.services.placement"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        async with bus.connected(server.url, name="test-world", initial_timeout=5, user=admin_user,
                                 password=admin_pw) as nc:
            js = nc.jetstream()
            decided: list[PlacementDecided] = []
            decided_ch = bus.event_channel(PlacementDecided)

            async def on_decided(msg: object) -> None:
                decided.append(decided_ch.decode(msg.data))  # type: ignore[attr-defined]  # msg is a NATS Msg, typed loosely here

            await nc.subscribe(PLACEMENT_DECIDED, cb=on_decided)
            inv = NodeInventory(source="test", emitted_at=time.time(), cluster=CLUSTER, node="n1", cpu_milli=96_000,
                                memory_mib=786_432, gpus=tuple(
                                    GpuInfo(uuid=f"GPU-n1-{i}", index=i, model="A100", memory_mib=81920,
                                            pci_bus_id=f"00000000:{i:02x}:00.0", tensor_cores=True)
                                    for i in range(4)))
            await bus.publish(js, bus.event_channel(NodeInventory).at(CLUSTER, "n1"), inv)
            pod = PodPending(source="test", emitted_at=time.time(), cluster=CLUSTER, pod_uid="auth-pod",
                             pod_name="pod-auth", namespace="ns", submitted_at=time.time(), num_gpu=1,
                             gpu_milli=1000, cpu_milli=4000, memory_mib=8192)
            await bus.publish(js, bus.event_channel(PodPending), pod)
            deadline = time.monotonic() + 60
            while not any(d.pod_uid == "auth-pod" for d in decided):
                assert proc.poll() is None, f"placement exited:\n{proc.stderr.read() if proc.stderr else ''}"
                assert time.monotonic() < deadline, "no decision within 60s"
                await asyncio.sleep(0.05)
        d = next(d for d in decided if d.pod_uid == "auth-pod")
        assert d.node == "n1" and d.source == "placement/auth1"
    finally:
        err = ""
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        server.stop()
    assert "permissions violation" not in err.lower(), err[-3000:]
    assert password not in err
    assert '"nats_password": "***"' in err
