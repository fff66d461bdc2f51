"""The checkpoint client over a real nats-server: a request for the pod arrives, one for another pod
does not, the acknowledgement is stored where the binder reads it; the downward-API annotations
variant; and the example torch loop checkpoints when asked, exits, and resumes from its checkpoint."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoint_helpers import REQUESTED, publish_until, request, watching_acks
from machine_speed import ceiling
from nats.aio.msg import Msg

from gpuaware import bus
from gpuaware.checkpoint import RESIZE_EXIT_CODE, AnnotationCheckpoints, NatsCheckpoints
from gpuaware.schemas import CheckpointStatus

REPO = Path(__file__).resolve().parents[2]


async def test_request_received_and_acknowledged(nats_url: str) -> None:
    async with watching_acks(nats_url) as (js, acks):
        async with NatsCheckpoints(nats_url, cluster="c1", pod_uid="pod-a", namespace="ns") as cp:
            assert cp.requested() is None
            await bus.publish(js, REQUESTED.at("c1", "n1"), request("pod-b", "r-other"))
            await publish_until(js, request("pod-a", "r1", deadline_s=30), cp.event.wait())
            req = cp.requested()
            assert req is not None and req.request_id == "r1" and 25 < req.seconds_left() <= 30
            assert (req.reason, req.world_size, req.is_resize, req.exit_code) == ("preemption", None, False, 0)
            await cp.acknowledge(req, uri="file:///ckpt/pod-a.pt")
            assert cp.requested() is None
        await asyncio.wait_for(acks.arrived.wait(), 5)
    assert [(a.request_id, a.pod_uid, a.status, a.checkpoint_uri) for a in acks.received] == [
        ("r1", "pod-a", CheckpointStatus.COMPLETED, "file:///ckpt/pod-a.pt")]


async def test_a_repeat_under_the_same_message_id_still_reaches_core_subscribers(nats_url: str) -> None:
    """What the binder's repeat relies on: JetStream stores a message id once, and core subscribers
    (the checkpoint client) receive every copy."""
    twice = asyncio.Event()
    seen: list[bytes] = []

    async def on(msg: Msg) -> None:
        seen.append(msg.data)
        if len(seen) == 2:
            twice.set()

    async with watching_acks(nats_url) as (js, _acks):
        listener = await bus.connect([nats_url], name="core-listener")
        try:
            await listener.subscribe(REQUESTED.at("c1", "n1").subject, cb=on)
            await listener.flush()
            req = request("pod-a", "r-twice")
            acks = []
            for _ in range(10):  # a copy moments after subscribing may itself be missed: that is the point
                acks.append(await bus.publish(js, REQUESTED.at("c1", "n1"), req, msg_id="ckpt/r-twice"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(twice.wait(), 1.0)
                if twice.is_set():
                    break
        finally:
            await bus.close(listener)
    # stored once, every later publish a duplicate; two copies arrived, so a duplicate did
    assert [a.duplicate for a in acks] == [False] + [True] * (len(acks) - 1) and len(seen) >= 2
    assert seen[0] == seen[1]


async def test_a_repeat_of_an_answered_request_is_not_a_new_request(nats_url: str) -> None:
    async with watching_acks(nats_url) as (_js, acks):
        async with NatsCheckpoints(nats_url, cluster="c1", pod_uid="pod-a", namespace="ns") as cp:
            req = request("pod-a", "r1")
            assert cp.offer(req) and cp.event.is_set()
            assert not cp.offer(request("pod-b", "r9"))          # another pod's
            open_req = cp.requested()
            assert open_req is not None
            await cp.acknowledge(open_req)
            assert not cp.offer(req)                             # the binder's repeat, crossing the answer
            assert cp.requested() is None and not cp.event.is_set()
            assert cp.offer(request("pod-a", "r2"))              # a new request still is
        await asyncio.wait_for(acks.arrived.wait(), 5)


async def test_a_resize_request_carries_the_new_world_size(nats_url: str) -> None:
    """A resize is answered like a preemption, but the worker then exits non-zero so torchrun restarts it."""
    async with watching_acks(nats_url) as (js, _), \
            NatsCheckpoints(nats_url, cluster="c1", pod_uid="pod-a", namespace="ns") as cp:
        await publish_until(js, request("pod-a", "r-resize", world_size=3), cp.event.wait())
        req = cp.requested()
    assert req is not None and (req.reason, req.world_size, req.is_resize) == ("resize", 3, True)
    assert req.exit_code == RESIZE_EXIT_CODE != 0


async def test_annotations_variant(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    patched: list[dict] = []
    cp = AnnotationCheckpoints(f, patched.append, pod_uid="u1", namespace="ns")
    assert cp.requested() is None  # no file yet
    f.write_text('kubernetes.io/config.seen="2026-11-23T10:00:00Z"\n')
    assert cp.requested() is None
    f.write_text('gpuaware.io/checkpoint-requested="2026-11-23T10:00:00Z"\n'
                 'gpuaware.io/checkpoint-deadline="2026-11-23T10:01:00Z"\n')
    req = cp.requested()
    assert req is not None and req.deadline_at == 1795428060.0
    assert (req.reason, req.world_size, req.exit_code) == ("preemption", None, 0)
    await cp.acknowledge(req, uri="s3://bucket/ckpt")
    assert patched and "gpuaware.io/checkpoint-completed" in patched[0]
    assert patched[0]["gpuaware.io/checkpoint-uri"] == "s3://bucket/ckpt"


@pytest.mark.parametrize(("written", "reason", "world_size"), [
    ('"2"', "resize", 2),          # the downward API quotes every value
    ("4", "resize", 4),
    ('"0"', "preemption", None),   # not a worker count: save and leave, which loses nothing
    ('"two"', "preemption", None),
])
def test_annotations_variant_reads_a_resize(tmp_path: Path, written: str, reason: str, world_size: int | None) -> None:
    f = tmp_path / "annotations"
    f.write_text('gpuaware.io/checkpoint-requested="2026-11-23T10:00:00Z"\n'
                 'gpuaware.io/checkpoint-deadline="2026-11-23T10:01:00Z"\n'
                 f"gpuaware.io/checkpoint-world-size={written}\n")
    req = AnnotationCheckpoints(f, lambda _: None).requested()
    assert req is not None and (req.reason, req.world_size) == (reason, world_size)


async def test_the_example_survives_preemption_and_resumes(nats_url: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ckpt = tmp_path / "tiny.pt"
    env = {**os.environ, "NATS_URL": nats_url, "POD_UID": "tiny-1", "CLUSTER": "c1", "CHECKPOINT": str(ckpt)}
    script = str(REPO / "libs/checkpoint/examples/train_tiny.py")
    async with watching_acks(nats_url) as (js, acks):
        proc = await asyncio.create_subprocess_exec(sys.executable, script, "--steps", "100000", "--step-sleep-s",
                                                    "0.002", env=env, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        started = json.loads(await asyncio.wait_for(proc.stdout.readline(), ceiling(120)))
        assert started["event"] == "started"  # torch imported, listening for requests
        await publish_until(js, request("tiny-1", "r-tiny"), proc.wait(), wait_s=ceiling(20))
        out, _ = await asyncio.wait_for(proc.communicate(), ceiling(60))
        first = json.loads(out.decode().strip().splitlines()[-1])
        assert proc.returncode == 0 and first["event"] == "checkpointed" and first["resumed_at"] == 0
        assert first["step"] > 0 and ckpt.exists()
        await asyncio.wait_for(acks.arrived.wait(), 5)
        assert acks.received[0].request_id == "r-tiny"
        assert acks.received[0].checkpoint_uri == ckpt.resolve().as_uri()
    # started again (the pod back from pending): resumes where it saved, finishes
    done = subprocess.run([sys.executable, script, "--steps", str(first["step"] + 50)], env=env, capture_output=True,
                          text=True, timeout=ceiling(120), check=True)
    second = json.loads(done.stdout.strip().splitlines()[-1])
    assert second == {**second, "event": "finished", "resumed_at": first["step"], "step": first["step"] + 50}
    # resumed from the checkpoint, not from scratch: the loss did not jump back up (once the tiny model has
    # converged its loss sits at the data's noise, about 0.01, where one batch's loss can double the last's)
    assert second["loss"] <= max(first["loss"] * 1.5, 0.05)
