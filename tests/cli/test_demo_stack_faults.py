"""What the demo does when its stack misbehaves: a nats-server named by NATS_URL keeps its streams, a
run's durable consumers do not outlive it, and a killed nats-server of the demo's own stack is started
again. (Events recorded through a PostgreSQL stop: the recorder service's own test,
tests/recorder/test_recorder_outage.py.)"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from gpuaware import bus
from gpuaware.cli.demo import _keep_stack_up
from gpuaware.cli.demo_bus import delete_loop_streams, delete_run_consumers
from gpuaware.devstack import NatsProcess, stack_down, stack_health, stack_up, start_nats
from gpuaware.devstack.processes import pid_alive
from gpuaware.schemas import recorder_durable
from gpuaware.schemas.streams import BINDER, PLACEMENT

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


async def _eventually(check, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_somebody_elses_server_keeps_its_streams_and_a_run_leaves_no_durables(tmp_path: Path) -> None:
    proc: NatsProcess = start_nats(tmp_path / "nats")
    try:
        async with bus.connected(proc.url, name="t") as nc:
            js = nc.jetstream()
            for spec in (BINDER, PLACEMENT):
                await bus.ensure_stream(js, spec)
            await js.publish("binder.pod.pending.v1", b"{}")
            await delete_loop_streams(js, ours=False)  # NATS_URL: not ours, nothing deleted
            assert (await js.stream_info(BINDER.name)).state.messages == 1
            await delete_loop_streams(js, ours=True)
            assert (await js.stream_info(BINDER.name)).state.messages == 0
            for durable in ("placement-run1-gpuaware", "binder-run1-gpuaware", recorder_durable("run1-gpuaware"),
                            "placement-other"):
                await js.add_consumer(BINDER.name, durable_name=durable, filter_subject="binder.pod.pending.*")
            gone = await delete_run_consumers(js, "run1-gpuaware")
            assert sorted(gone) == ["BINDER/binder-run1-gpuaware", "BINDER/placement-run1-gpuaware",
                                    "BINDER/recorder-run1-gpuaware"]
            assert [c.name for c in await js.consumers_info(BINDER.name)] == ["placement-other"]
    finally:
        proc.stop()


async def test_the_demo_starts_a_killed_nats_server_of_its_own_stack_again(stack_dir: Path) -> None:
    data = stack_dir / "keeper"
    first = await asyncio.to_thread(stack_up, data, nats_port=0, pg_port=0, env={})
    keeper = asyncio.create_task(_keep_stack_up(data, every_s=0.2))
    try:
        os.kill(first.state.nats_pid, signal.SIGKILL)
        await _eventually(lambda: not pid_alive(first.state.nats_pid), what="nats-server gone")

        def revived() -> bool:
            state, alive = stack_health(data)
            return state is not None and state.nats_pid != first.state.nats_pid and all(alive.values())

        await _eventually(revived, what="nats-server started again")
        async with bus.connected(first.state.nats_url, name="t") as nc:  # the same URL works again
            assert nc.is_connected
    finally:
        keeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await keeper
        await asyncio.to_thread(stack_down, data)
