"""Shared by the bus tests: a stand-in event Struct, unique names, a stream of the test's own, a handler
that keeps what it is given."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import msgspec

from gpuaware import bus


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """A stand-in event: the bus is schema-agnostic, so tests bring their own Struct."""

    id: str
    gpu: str
    util: Annotated[float, msgspec.Meta(ge=0, le=100)]


class Handled(list[Sample]):
    """A consumer's handler that keeps every message it is given, in the order given."""

    async def __call__(self, msg: Sample, ctx: bus.Delivery) -> None:
        self.append(msg)


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


@contextlib.asynccontextmanager
async def own_stream(js: bus.JetStream, names: Names, duplicate_window_s: float) -> AsyncIterator[str]:
    """A file stream on ``names.subject`` with this duplicate window, deleted afterwards."""
    await bus.ensure_stream(js, bus.SimpleStreamSpec(name=names.stream, subjects=(names.subject,),
                                                     duplicate_window_s=duplicate_window_s))
    try:
        yield names.stream
    finally:
        await js.delete_stream(names.stream)
