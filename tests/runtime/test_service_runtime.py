"""A service built on run_service answers $SRV and its endpoints, and drains cleanly on SIGTERM."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from gpuaware import bus

HERE = Path(__file__).parent


class Note(msgspec.Struct, frozen=True):
    text: str


async def _wait_for_ping(nc, name: str, timeout: float = 20.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            msg = await nc.request(f"$SRV.PING.{name}", b"", timeout=0.5)
            return json.loads(msg.data)
        except Exception:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.fixture
def echo_process(nats_url: str):
    env = {**os.environ, "NATS_URL": nats_url, "GPUAWARE_ECHO_INSTANCE_ID": "echo-test-1",
           "GPUAWARE_ECHO_HANDLE_DELAY_S": "0.5", "PYTHONPATH": str(HERE)}
    proc = subprocess.Popen([sys.executable, str(HERE / "echo_service.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


async def test_service_identity_endpoints_and_graceful_drain(nats_url: str, echo_process) -> None:
    async with bus.connected(nats_url, name="test-client") as nc:
        ping = await _wait_for_ping(nc, "echo")
        assert ping["name"] == "echo" and ping["version"] == "0.0.1"

        info = json.loads((await nc.request("$SRV.INFO.echo", b"", timeout=2)).data)
        assert info["metadata"]["instance"] == "echo-test-1"
        assert [e["name"] for e in info["endpoints"]] == ["echo"]

        reply = await bus.request(nc, "echotest.echo", Note("hello"), Note)
        assert reply == Note("HELLO")
        stats = json.loads((await nc.request("$SRV.STATS.echo", b"", timeout=2)).data)
        assert stats["endpoints"][0]["num_requests"] == 1

        # a note in flight when SIGTERM arrives is finished (handler sleeps 0.5 s) before exit
        noted: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_noted(msg) -> None:
            noted.put_nowait(msg.data)

        sub = await nc.subscribe("echotest.noted.v1", cb=on_noted)
        js = nc.jetstream()
        await bus.publish(js, bus.Channel("echotest.note.v1", Note), Note("in flight"))
        await asyncio.sleep(0.3)
        echo_process.send_signal(signal.SIGTERM)
        got = await asyncio.wait_for(noted.get(), timeout=10)
        assert msgspec.json.decode(got, type=Note) == Note("in flight")
        await sub.unsubscribe()

        code = await asyncio.to_thread(echo_process.wait, 15)
        assert code == 0
        logs = [json.loads(line) for line in echo_process.stderr.read().splitlines() if line.startswith("{")]
        messages = [entry["msg"] for entry in logs]
        assert "echo draining" in messages and "echo stopped" in messages
        # acked before exit: the durable consumer has nothing pending or waiting for an ack
        info = await js.consumer_info("ECHOTEST", "echo")
        assert info.num_ack_pending == 0 and info.num_pending == 0
