"""The drill's reads after a lost cluster node (its telemetry ledger, each stream's replicas): a
stream whose leader is still being elected answers nothing, so the drill asks again with the bus's
backoff, and gives up (raising the timeout) only after its last attempt."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gpuaware.cli import drill


class _Leaderless:
    """Answers stream info only after `silent` timeouts, as a stream between leaders does."""

    def __init__(self, silent: int) -> None:
        self.silent, self.asked = silent, 0

    async def stream_info(self, name: str) -> Any:
        self.asked += 1
        if self.asked <= self.silent:
            raise TimeoutError("nats: timeout")
        return SimpleNamespace(config=SimpleNamespace(num_replicas=3))


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    monkeypatch.setattr(drill.asyncio, "sleep", sleep)
    return waits


def test_a_read_is_asked_again_until_the_stream_answers(slept: list[float]) -> None:
    js = _Leaderless(silent=3)
    assert asyncio.run(drill._patiently(lambda: drill._replicas(js, "TELEMETRY"))) == 3
    assert js.asked == 4
    assert slept == [1.0, 2.0, 4.0]  # the bus's RetryPolicy doubling


def test_a_stream_that_never_answers_raises_after_the_last_attempt(slept: list[float]) -> None:
    js = _Leaderless(silent=100)
    with pytest.raises(TimeoutError):
        asyncio.run(drill._patiently(lambda: drill._replicas(js, "TELEMETRY"), attempts=4))
    assert js.asked == 4 and len(slept) == 3


def test_other_errors_are_not_asked_again(slept: list[float]) -> None:
    async def refused() -> int:
        raise PermissionError("not allowed")

    with pytest.raises(PermissionError):
        asyncio.run(drill._patiently(refused))
    assert slept == []
