"""A tiny data-parallel torch loop that survives preemption and resizes: it checkpoints when the binder
asks, and resumes -- at the same or another world size -- where it stopped.

    # one process, no torch.distributed
    NATS_URL=nats://127.0.0.1:4222 POD_UID=pod-1 CLUSTER=default CHECKPOINT=/tmp/tiny.pt \\
        python libs/checkpoint/examples/train_tiny.py --steps 2000
    # an elastic job: one worker per pod, 1 to 4 pods, restarted by torchrun after each resize
    torchrun --nnodes 1:4 --nproc-per-node 1 --max-restarts 100 --rdzv-backend c10d \\
        --rdzv-endpoint "$JOB_HOST:29400" --rdzv-id "$JOB" libs/checkpoint/examples/train_tiny.py --steps 2000

Under torchrun (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set) the workers join a gloo
process group and train under ``DistributedDataParallel``; without them the loop runs alone.

Every step reads the next ``--global-batch`` samples of a fixed synthetic regression data set; each
rank trains on its contiguous share (``Progress.shard``), and its summed loss is divided by the global
batch (times the world size, which DDP's averaging divides out again), so the gradient -- and the loss
curve -- is the same at any world size. After the step the ranks agree, in the one collective that also
sums the loss, whether any of them was asked to checkpoint; if so they all stop at that step: rank 0
saves model, optimiser and ``Progress`` to CHECKPOINT (``write_atomically``), the others wait for it at a
barrier, each asked rank acknowledges with the file as ``checkpoint_uri``, and every rank exits --
0 when its pod is preempted (it goes away), ``RESIZE_EXIT_CODE`` for a resize or when only a peer was
asked, so torchrun restarts the worker group at the new world size. Started again, every rank loads
CHECKPOINT and continues from the saved step and sample. Without NATS_URL it trains without requests
(and still resumes from an existing file).

Rank 0 prints JSON lines: ``started`` (once every rank listens for requests), ``step`` (every ``--log-every``
steps), then ``checkpointed`` or ``finished``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gpuaware.checkpoint import RESIZE_EXIT_CODE, NatsCheckpoints, Progress, write_atomically

DATASET_SIZE = 4096
"""samples in the synthetic data set; sample ``i`` of the run is row ``i % DATASET_SIZE``"""


@dataclass(frozen=True, slots=True)
class World:
    rank: int = 0
    world_size: int = 1
    distributed: bool = False


def join_world() -> World:
    """The gloo process group torchrun's environment describes, or a world of one without it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return World()
    dist.init_process_group("gloo")
    return World(dist.get_rank(), dist.get_world_size(), distributed=True)


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy linear targets: the loss falls towards the noise's variance (0.01), not to zero."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(DATASET_SIZE, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 1.0 + 0.1 * torch.randn(DATASET_SIZE, 1, generator=g)


def model_and_optimiser() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Momentum, so that resuming without the optimiser's state would show in the loss."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)


def save(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, progress: Progress, world: World) -> None:
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "progress": progress.to_dict(),
             "world_size": world.world_size}
    write_atomically(path, lambda f: torch.save(state, f))


def load(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[Progress, int] | None:
    """The saved progress and the world size that saved it; None where there is no checkpoint yet."""
    if not path.exists():
        return None
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return Progress.from_dict(state["progress"]), int(state["world_size"])


def agree(loss_sum: torch.Tensor, asked: bool, world: World) -> tuple[torch.Tensor, bool]:
    """The loss summed over all ranks, and whether any rank was asked to checkpoint (one all-reduce)."""
    both = torch.stack([loss_sum.detach(), torch.tensor(1.0 if asked else 0.0)])
    if world.distributed:
        dist.all_reduce(both)
    return both[0], bool(both[1] > 0)


def emit(world: World, **fields: object) -> None:
    if world.rank == 0:
        print(json.dumps(fields), flush=True)


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000, help="train until this many optimiser steps in all")
    ap.add_argument("--global-batch", type=int, default=64,
                    help="samples per step over all ranks (a fresh run; a resumed one keeps its own)")
    ap.add_argument("--log-every", type=int, default=0, help="print the loss every N steps (0: never)")
    ap.add_argument("--step-sleep-s", type=float, default=0.0, help="slow each step down (demos, tests)")
    args = ap.parse_args(argv)
    world = join_world()
    try:
        return await train(args, world)
    finally:
        if world.distributed:
            dist.destroy_process_group()


async def train(args: argparse.Namespace, world: World) -> int:
    path = Path(os.environ.get("CHECKPOINT", "tiny-checkpoint.pt"))
    model, opt = model_and_optimiser()
    saved = load(path, model, opt)
    progress, saved_by = saved if saved is not None else (Progress(global_batch=args.global_batch), None)
    resumed_at = progress.step
    scale = world.world_size / progress.global_batch  # DDP averages over ranks: undo it, then mean over the batch
    trained = DistributedDataParallel(model) if world.distributed else model
    xs, ys = dataset()
    url = os.environ.get("NATS_URL", "")
    cp_ctx = (NatsCheckpoints(url, cluster=os.environ.get("CLUSTER", "default"), pod_uid=os.environ["POD_UID"],
                              namespace=os.environ.get("NAMESPACE", "default"))
              if url else contextlib.nullcontext(None))
    loss = float("nan")
    async with cp_ctx as cp:
        if world.distributed:
            dist.barrier()  # every rank listens for requests before anyone says it started
        emit(world, event="started", step=progress.step, samples_seen=progress.samples_seen,
             world_size=world.world_size, saved_by_world_size=saved_by)
        while progress.step < args.steps:
            shard = progress.shard(world.rank, world.world_size)
            rows = torch.arange(shard.start, shard.stop) % DATASET_SIZE
            opt.zero_grad()
            loss_sum = torch.nn.functional.mse_loss(trained(xs[rows]), ys[rows], reduction="sum")
            (loss_sum * scale).backward()
            opt.step()
            progress = progress.advanced()
            req = cp.requested() if cp is not None else None
            total, anyone_asked = agree(loss_sum, req is not None, world)
            loss = float(total) / progress.global_batch
            if args.log_every and progress.step % args.log_every == 0:
                emit(world, event="step", step=progress.step, samples_seen=progress.samples_seen, loss=loss)
            if anyone_asked:
                if world.rank == 0:
                    save(path, model, opt, progress, world)
                if world.distributed:
                    dist.barrier()  # the file is whole before anyone says it is
                if cp is not None and req is not None:
                    await cp.acknowledge(req, uri=path.resolve().as_uri(), message=f"step {progress.step}")
                emit(world, event="checkpointed", step=progress.step, samples_seen=progress.samples_seen,
                     resumed_at=resumed_at, world_size=world.world_size, loss=loss)
                return req.exit_code if req is not None else RESIZE_EXIT_CODE
            await asyncio.sleep(args.step_sleep_s)  # also gives the checkpoint client its turn
    if world.rank == 0:
        save(path, model, opt, progress, world)
    emit(world, event="finished", step=progress.step, samples_seen=progress.samples_seen, resumed_at=resumed_at,
         world_size=world.world_size, loss=loss)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
