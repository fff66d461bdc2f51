"""A real nats-server with per-service users (devstack `start_nats(auth=True)`), streams provisioned
as admin, and a client per identity."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from gpuaware import bus
from gpuaware.devstack import NatsProcess, start_nats
from gpuaware.runtime import provision_streams
from gpuaware.schemas.permissions import ADMIN

Connect = Callable[[str], AbstractAsyncContextManager[bus.Client]]


@pytest.fixture(scope="module")
def auth_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsProcess]:
    proc = start_nats(tmp_path_factory.mktemp("auth") / "nats", auth=True)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
async def provisioned(auth_nats: NatsProcess) -> NatsProcess:
    user, password = auth_nats.credentials()[ADMIN]
    await provision_streams(auth_nats.url, user=user, password=password)
    return auth_nats


@pytest.fixture
def connect_as(provisioned: NatsProcess) -> Connect:
    """`async with connect_as("placement") as nc:` a client logged in as that identity."""
    creds = provisioned.credentials()

    def connect(identity: str) -> AbstractAsyncContextManager[bus.Client]:
        user, password = creds[identity]
        return bus.connected(provisioned.url, name=f"test-{identity}", initial_timeout=5, user=user,
                             password=password)

    return connect


@pytest.fixture
async def admin(connect_as: Connect) -> AsyncIterator[bus.Client]:
    async with connect_as(ADMIN) as nc:
        yield nc


@pytest.fixture
def data_dir(auth_nats: NatsProcess) -> Path:
    return auth_nats.data_dir
