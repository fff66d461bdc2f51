"""A tiny torch training loop that survives preemption: it checkpoints when the binder asks, and resumes.

    NATS_URL=nats://127.0.0.1:4222 POD_UID=pod-1 CLUSTER=default CHECKPOINT=/tmp/tiny.pt \\
        python libs/checkpoint/examples/train_tiny.py --steps 2000

Between steps it asks ``requested()``; when a request came, it saves model, optimiser and step to
CHECKPOINT (atomically: a temporary file renamed), acknowledges with the file as ``checkpoint_uri``
and exits 0 -- the binder evicts it and the pod goes back to pending. Started again, it loads
CHECKPOINT and continues from the saved step: no step is done twice, the loss keeps falling.
Without NATS_URL it trains without checkpoints (and still resumes from an existing file).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

import torch

from gpuaware.checkpoint import NatsCheckpoints


def model_and_optimiser() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)  # the data of a step does not depend on restarts
    x = torch.randn(64, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 1.0


def save(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--step-sleep-s", type=float, default=0.0, help="slow each step down (demos, tests)")
    args = ap.parse_args(argv)
    path = Path(os.environ.get("CHECKPOINT", "tiny-checkpoint.pt"))
    model, opt = model_and_optimiser()
    step = 0
    if path.exists():
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    resumed_at = step
    url = os.environ.get("NATS_URL", "")
    cp_ctx = (NatsCheckpoints(url, cluster=os.environ.get("CLUSTER", "default"), pod_uid=os.environ["POD_UID"],
                              namespace=os.environ.get("NAMESPACE", "default"))
              if url else contextlib.nullcontext(None))
    loss = float("nan")
    async with cp_ctx as cp:
        while step < args.steps:
            x, y = batch(step)
            opt.zero_grad()
            out = torch.nn.functional.mse_loss(model(x), y)
            out.backward()
            opt.step()
            loss = float(out)
            step += 1
            if cp is not None and (req := cp.requested()) is not None:
                save(path, model, opt, step)
                await cp.acknowledge(req, uri=path.resolve().as_uri(), message=f"step {step}")
                print(json.dumps({"event": "checkpointed", "step": step, "resumed_at": resumed_at, "loss": loss}))
                return 0
            if args.step_sleep_s:
                await asyncio.sleep(args.step_sleep_s)
    save(path, model, opt, step)
    print(json.dumps({"event": "finished", "step": step, "resumed_at": resumed_at, "loss": loss}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
