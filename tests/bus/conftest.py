"""Bus test helpers: a client per test on the session nats-server, unique names, polling."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from bus_helpers import Names, Sample, own_stream

from gpuaware import bus


@pytest.fixture
def names() -> Names:
    return Names(uuid.uuid4().hex[:10])


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[bus.Client]:
    async with bus.connected(nats_url, name="bus-tests", initial_timeout=5) as client:
        yield client


@pytest.fixture
def js(nc: bus.Client) -> bus.JetStream:
    return nc.jetstream()


@pytest.fixture
async def stream(js: bus.JetStream, names: Names) -> AsyncIterator[str]:
    """A file stream on `names.subject` with a 2-minute duplicate window, deleted afterwards."""
    async with own_stream(js, names, 120) as name:
        yield name


@pytest.fixture
def channel(names: Names) -> bus.Channel[Sample]:
    return bus.Channel(names.subject, Sample, id_of=lambda s: s.id)
