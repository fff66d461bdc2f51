"""Each checkpoint test talks to a private nats-server: acknowledgements are de-duplicated on the
request id, so a server shared with other tests could swallow one."""

from __future__ import annotations

import pytest

from gpuaware.devstack import NatsProcess


@pytest.fixture
def nats_url(nats_proc: NatsProcess) -> str:
    return nats_proc.url
