"""Shared by the bus tests: a stand-in event Struct, unique names, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import msgspec


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """A stand-in event: the bus is schema-agnostic, so tests bring their own Struct."""

    id: str
    gpu: str
    util: Annotated[float, msgspec.Meta(ge=0, le=100)]


@dataclass(frozen=True)
class Names:
    """Unique stream/subject/durable names, so tests never meet on the shared server."""

    token: str

    @property
    def stream(self) -> str:
        return f"T_{self.token}"

    @property
    def subject(self) -> str:
        return f"test.{self.token}.sampled.v1"

    def durable(self, suffix: str = "c") -> str:
        return f"d_{self.token}_{suffix}"


async def eventually(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll `check` until true; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
