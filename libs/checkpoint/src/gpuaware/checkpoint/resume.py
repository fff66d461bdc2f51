"""What a data-parallel training loop saves so it can resume at another world size.

An elastic job (torchrun ``--nnodes MIN:MAX``) may be restarted with fewer or more workers after a
resize. For its loss curve to continue as if nothing happened, everything the run depends on must be
counted in units that do not depend on the world size:

- the **global batch** stays fixed; each rank's local batch is its share of it, recomputed from the
  world size of the run that resumes (``Progress.shard``);
- the position in the data is **samples seen**, not steps times the local batch, so the next step reads
  the samples the interrupted run would have read next, split over however many ranks there are now;
- the **step** counts optimiser steps (learning-rate schedules key on it).

With each rank's loss summed over its shard and divided by the global batch, the gradient summed over
the ranks is the global batch's mean gradient at any world size (scale by the world size under
``DistributedDataParallel``, which averages). ``examples/train_tiny.py`` does exactly that.

This module stays free of torch (only ``gpuaware.forecast`` imports it): the loop serialises its
model and optimiser with ``torch.save`` into the file ``write_atomically`` opens, and stores
``Progress.to_dict()`` beside them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

__all__ = ["Progress", "write_atomically"]


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a data-parallel run got, independent of how many workers ran it."""

    global_batch: int
    """samples per optimiser step summed over all ranks; fixed for the life of the run"""
    step: int = 0
    """optimiser steps taken"""
    samples_seen: int = 0
    """samples consumed; the next step reads ``samples_seen .. samples_seen + global_batch``"""

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise ValueError(f"global_batch must be at least 1, not {self.global_batch}")
        if self.step < 0 or self.samples_seen < 0:
            raise ValueError(f"step and samples_seen cannot be negative ({self.step}, {self.samples_seen})")

    def local_batch(self, rank: int, world_size: int) -> int:
        """How many of the next step's samples ``rank`` trains on."""
        return len(self.shard(rank, world_size))

    def shard(self, rank: int, world_size: int) -> range:
        """The sample indices ``rank`` of ``world_size`` trains on in the next step.

        The global batch is cut into contiguous parts, the first ``global_batch % world_size`` ranks
        taking one sample more, so the parts cover it exactly once at any world size."""
        if not 1 <= world_size <= self.global_batch:
            raise ValueError(f"world size {world_size} must be between 1 and the global batch {self.global_batch}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        base, extra = divmod(self.global_batch, world_size)
        start = self.samples_seen + rank * base + min(rank, extra)
        return range(start, start + base + (1 if rank < extra else 0))

    def advanced(self) -> Progress:
        """The progress after one more optimiser step over the global batch."""
        return replace(self, step=self.step + 1, samples_seen=self.samples_seen + self.global_batch)

    def to_dict(self) -> dict[str, int]:
        """Plain integers, to store inside a checkpoint (``torch.load(weights_only=True)`` reads them)."""
        return {"global_batch": self.global_batch, "step": self.step, "samples_seen": self.samples_seen}

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any]) -> Progress:
        return cls(global_batch=int(saved["global_batch"]), step=int(saved["step"]),
                   samples_seen=int(saved["samples_seen"]))


def write_atomically(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write a checkpoint through ``write(file)`` so that ``path`` holds either the old file or the
    whole new one: the bytes go to a temporary file in the same directory, are flushed to disk, and
    the file is renamed over ``path``. A worker evicted in the middle of a save (its deadline passed)
    leaves the previous checkpoint intact instead of a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
