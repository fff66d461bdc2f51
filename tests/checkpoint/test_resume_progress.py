"""Progress: a run's position in units that survive a change of world size, and the checkpoint file that
is never half-written."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pytest

from gpuaware.checkpoint import Progress, write_atomically


@pytest.mark.parametrize("world_size", [1, 2, 3, 5, 7, 64])
def test_the_shards_cover_the_global_batch_exactly_once(world_size: int) -> None:
    p = Progress(global_batch=64, step=3, samples_seen=192)
    shards = [p.shard(rank, world_size) for rank in range(world_size)]
    assert [i for s in shards for i in s] == list(range(192, 256))
    # local batches differ by at most one sample
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_the_first_ranks_take_the_remainder() -> None:
    # 10 samples over 4 ranks: 10 = 4 * 2 + 2, so ranks 0 and 1 take 3, ranks 2 and 3 take 2
    p = Progress(global_batch=10, samples_seen=100)
    assert [p.shard(r, 4) for r in range(4)] == [range(100, 103), range(103, 106), range(106, 108), range(108, 110)]
    assert [p.local_batch(r, 4) for r in range(4)] == [3, 3, 2, 2]


def test_a_step_advances_by_the_global_batch_whatever_the_world_size() -> None:
    p = Progress(global_batch=64).advanced().advanced()
    assert (p.step, p.samples_seen) == (2, 128)
    # the next step's samples follow on, split over one rank or two alike
    assert p.shard(0, 1) == range(128, 192)
    assert [*p.shard(0, 2), *p.shard(1, 2)] == list(range(128, 192))


def test_round_trip_through_plain_integers() -> None:
    p = Progress(global_batch=48, step=7, samples_seen=336)
    assert p.to_dict() == {"global_batch": 48, "step": 7, "samples_seen": 336}
    assert Progress.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(("rank", "world_size"), [(0, 0), (0, 65), (2, 2), (-1, 2)])
def test_a_world_that_cannot_split_the_batch_is_refused(rank: int, world_size: int) -> None:
    with pytest.raises(ValueError):
        Progress(global_batch=64).shard(rank, world_size)


def test_a_progress_that_cannot_be_is_refused() -> None:
    with pytest.raises(ValueError):
        Progress(global_batch=0)
    with pytest.raises(ValueError):
        Progress(global_batch=8, step=-1)


def test_write_atomically_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "run" / "ckpt.pt"
    write_atomically(path, lambda f: f.write(b"first"))
    write_atomically(path, lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["ckpt.pt"]


def test_a_save_that_fails_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    write_atomically(path, lambda f: f.write(b"good"))

    def interrupted(f: IO[bytes]) -> None:
        f.write(b"half")
        raise KeyboardInterrupt  # e.g. the worker was stopped in the middle of the save

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, interrupted)
    assert path.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]
