"""Binder fixtures: a private nats-server per test (streams and durables start empty) and a harness
connected to it (see binder_helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from binder_helpers import Harness, Recorder

from gpuaware import bus
from gpuaware.devstack import start_nats


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[str]:
    proc = start_nats(tmp_path / "nats")
    yield proc.url
    proc.stop()


@pytest.fixture
async def harness(private_nats: str) -> AsyncIterator[Harness]:
    async with bus.connected(private_nats, name="binder-tests", initial_timeout=5) as nc:
        h = Harness(private_nats, nc, nc.jetstream(), Recorder())
        yield h
        await h.recorder.stop()
