"""The example torch loop resumes at a new world size and its loss continues: two workers are asked to
resize (the binder's request, over NATS), save and exit for torchrun to restart them; one worker resumes
from their checkpoint; two resume from its. Steps and samples continue where they stopped, and every
step's loss is the one an uninterrupted run on one process computes.

The workers are the example's own ``main`` under the environment torchrun gives a worker (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``: a real gloo group, a real DistributedDataParallel),
each in a process forked from this one after it imported torch -- so a phase costs no interpreter start
and no torch import, which keeps the three phases fast on a busy machine. Nothing runs torch in this
process before the forks.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import multiprocessing
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from checkpoint_helpers import REQUESTED, request, watching_acks

from gpuaware import bus
from gpuaware.checkpoint import RESIZE_EXIT_CODE

EXAMPLE = Path(__file__).resolve().parents[2] / "libs/checkpoint/examples/train_tiny.py"
GLOBAL_BATCH = 64  # the example's default
READ_TIMEOUT_S = 120  # only a hung worker gets near it


@pytest.fixture(scope="module")
def example() -> ModuleType:
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    importlib.import_module("torch._dynamo")  # what an optimiser imports on first use: once here, not per worker
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(example: ModuleType, argv: list[str], env: dict[str, str], out_fd: int | None) -> None:
    """A forked worker: torchrun's environment, rank 0's stdout into the test's pipe, the example's main.
    One intra-op thread, as torchrun sets for several workers on one machine."""
    os.environ.update(env)
    example.torch.set_num_threads(1)
    sys.stdout = os.fdopen(out_fd, "w", buffering=1) if out_fd is not None else open(os.devnull, "w")  # noqa: SIM115
    sys.exit(asyncio.run(example.main(argv)))


@dataclass
class Phase:
    """One run of the job at one world size: its workers, and the JSON events rank 0 printed."""

    processes: list[multiprocessing.process.BaseProcess]
    stdout: asyncio.StreamReader
    events: list[dict[str, Any]] = field(default_factory=list)

    async def next_event(self) -> dict[str, Any] | None:
        line = await asyncio.wait_for(self.stdout.readline(), READ_TIMEOUT_S)
        if not line:
            return None
        self.events.append(json.loads(line))
        return self.events[-1]

    async def finished(self) -> list[int]:
        """Every event to the end (the pipe closes once every worker exited), then the exit codes."""
        while await self.next_event() is not None:
            pass
        for p in self.processes:
            p.join()
        return [p.exitcode if p.exitcode is not None else -1 for p in self.processes]

    def kill(self) -> None:
        for p in self.processes:
            if p.is_alive():
                p.kill()
                p.join()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def losses(self) -> dict[int, float]:
        return {e["step"]: e["loss"] for e in self.of("step")}


async def start(example: ModuleType, world_size: int | None, argv: list[str], env: dict[str, str]) -> Phase:
    """Fork ``world_size`` workers of one gloo group (None: one process outside torch.distributed)."""
    fork = multiprocessing.get_context("fork")
    read_fd, write_fd = os.pipe()
    port = free_port()
    processes = []
    for rank in range(world_size or 1):
        worker_env = dict(env) if world_size is None else {
            **env, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "POD_UID": f"worker-{rank}"}
        p = fork.Process(target=_worker, args=(example, argv, worker_env, write_fd if rank == 0 else None),
                         name=f"train_tiny-rank{rank}")
        p.start()
        processes.append(p)
    os.close(write_fd)
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                       os.fdopen(read_fd, "rb"))
    return Phase(processes, reader)


async def test_resumes_two_one_two_workers_and_the_loss_continues(example: ModuleType, nats_url: str,
                                                                  tmp_path: Path) -> None:
    ckpt = tmp_path / "job.pt"
    env = {"CHECKPOINT": str(ckpt), "NATS_URL": "", "CLUSTER": "c1", "NAMESPACE": "ns"}
    phases: list[Phase] = []
    try:
        # 1. two workers train until the binder shrinks the job to one: worker-1 is asked to resize
        async with watching_acks(nats_url) as (js, acks):
            two = await start(example, 2, ["--steps", "100000", "--log-every", "1"], {**env, "NATS_URL": nats_url})
            phases.append(two)
            assert await two.next_event() == {"event": "started", "step": 0, "samples_seen": 0, "world_size": 2,
                                              "saved_by_world_size": None}
            while (event := await two.next_event()) is not None and event["step"] < 20:
                pass  # past the first, steep part of the curve
            shrink = request("worker-1", "r-shrink", world_size=1)
            # published again every 200 steps it goes unseen (core NATS: see publish_until)
            while event is not None and event["event"] == "step":
                if (event["step"] - 20) % 200 == 0:
                    await bus.publish(js, REQUESTED.at("c1", "n1"), shrink)
                event = await two.next_event()
            # both stop at one step: the asked worker, and its peer whose world changes
            assert await two.finished() == [RESIZE_EXIT_CODE, RESIZE_EXIT_CODE]
            await asyncio.wait_for(acks.arrived.wait(), 10)
        [saved] = two.of("checkpointed")
        stop = saved["step"]
        assert saved["samples_seen"] == stop * GLOBAL_BATCH and stop >= 20 and ckpt.exists()
        assert [(a.request_id, a.pod_uid, a.checkpoint_uri) for a in acks.received] == [
            ("r-shrink", "worker-1", ckpt.resolve().as_uri())]

        # 2. torchrun restarts the job with one worker: it resumes from two workers' checkpoint
        one = await start(example, 1, ["--steps", str(stop + 20), "--log-every", "1"], env)
        phases.append(one)
        assert await one.finished() == [0]
        # 3. grown back to two workers: they resume from one worker's checkpoint
        two_again = await start(example, 2, ["--steps", str(stop + 40), "--log-every", "1"], env)
        phases.append(two_again)
        assert await two_again.finished() == [0, 0]
        # the same 40 + stop steps, once, on one process outside torch.distributed
        reference = await start(example, None, ["--steps", str(stop + 40), "--log-every", "1"],
                                {"CHECKPOINT": str(tmp_path / "reference.pt")})
        phases.append(reference)
        assert await reference.finished() == [0]
    finally:
        for phase in phases:
            phase.kill()

    # the counters continue: each run starts where the last saved, whatever world size saved it
    assert [(p.of("started")[0]["step"], p.of("started")[0]["samples_seen"], p.of("started")[0]["world_size"],
             p.of("started")[0]["saved_by_world_size"]) for p in (one, two_again)] == [
        (stop, stop * GLOBAL_BATCH, 1, 2), (stop + 20, (stop + 20) * GLOBAL_BATCH, 2, 1)]
    [end] = two_again.of("finished")
    assert (end["step"], end["samples_seen"], end["resumed_at"]) == (stop + 40, (stop + 40) * GLOBAL_BATCH, stop + 20)

    # every step ran once, and its loss is the uninterrupted run's: the same samples, the same gradient
    losses = {**two.losses(), **one.losses(), **two_again.losses()}
    steps = [s for p in (two, one, two_again) for s in p.losses()]
    assert steps == list(range(1, stop + 41))
    expected = reference.losses()
    assert all(losses[s] == pytest.approx(expected[s], rel=1e-4, abs=1e-6) for s in steps), [
        (s, losses[s], expected[s]) for s in steps if losses[s] != pytest.approx(expected[s], rel=1e-4, abs=1e-6)]

    # and the curve continues across each resize: the first loss after it is near the last before it
    # (one batch's loss can differ from the next by up to twice near the data's noise), far below the start
    for last in (stop, stop + 20):
        assert losses[last] / 2.5 <= losses[last + 1] <= losses[last] * 2.5
        assert losses[last + 1] < 0.2 * losses[1]
