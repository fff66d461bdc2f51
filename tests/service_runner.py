"""Run one service in the test's own process against real servers, the way `python -m` runs it:
`run_service` with its settings and its mount, started, handed to the test, drained on exit.

One implementation for every service test (health-scoring, forecasting, quota, placement), so a change
to how services start is made once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import msgspec
from machine_speed import ceiling

from gpuaware import bus
from gpuaware.runtime import run_service
from gpuaware.schemas import STREAMS

S = TypeVar("S")


async def ensure_streams(js: Any) -> None:
    """Declare every stream of the contract (as the services do), so what a test publishes before a
    service starts is stored."""
    for spec in STREAMS:
        await bus.ensure_stream(js, spec)


@contextlib.asynccontextmanager
async def streams_ready(url: str, name: str) -> AsyncIterator[Any]:
    """A NATS connection to ``url`` once every stream of the contract is declared."""
    async with bus.connected(url, name=name) as nc:
        await ensure_streams(nc.jetstream())
        yield nc


@contextlib.asynccontextmanager
async def in_process(settings: Any, mounter: Callable[[Callable[[Any], None]], Any], *, what: str,
                     start_timeout: float = 30.0, stop_timeout: float = 30.0) -> AsyncIterator[Any]:
    """``async with in_process(settings, mounter, what="quota") as service:`` — ``mounter(on_service)``
    is the service's ``handlers.mounter`` (it hands the running service object to ``on_service``)."""
    got: list[Any] = []
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(settings, version="0.0.1", mount=mounter(got.append), stop=stop,
                                           ready=ready))
    waiting = asyncio.ensure_future(ready.wait())
    done, _ = await asyncio.wait({task, waiting}, timeout=start_timeout, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task in done:
        task.result()  # it stopped while starting: its exception is the test's failure
    assert got, f"{what} did not start within {start_timeout:g} s"
    try:
        yield got[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, stop_timeout)


async def record(nc: Any, cluster: str, into: Mapping[str, tuple[type, list[Any]]]) -> list[Any]:
    """Subscribe (core NATS) to each subject's routed messages and append those of ``cluster``, decoded
    as the type given, to the list given. Returns the subscriptions, flushed: nothing published after
    the call is missed."""
    subs = []
    for subject, (typ, events) in into.items():
        async def on(msg: Any, typ: type = typ, events: list[Any] = events) -> None:
            ev = msgspec.json.decode(msg.data, type=typ)
            if ev.cluster == cluster:
                events.append(ev)

        subs.append(await nc.subscribe(f"{subject}.>", cb=on))
    await nc.flush()
    return subs


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait until ``predicate()`` is true, polling every 20 ms; fail naming ``what`` after ``timeout``."""
    timeout = ceiling(timeout)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def quiet_settings(cls: type[S], **values: Any) -> S:
    """A service's settings for a test: console logs at WARNING, then ``values`` (the test's own)."""
    return msgspec.convert({"log_format": "console", "log_level": "WARNING", **values}, cls)


def placement_settings(url: str, cluster: str, **kw: Any) -> Any:
    """Placement's settings for a test: quick leases, no world snapshot, console logs; ``kw`` overrides."""
    from gpuaware.services.placement.settings import PlacementSettings

    return quiet_settings(PlacementSettings, **{
        "nats_url": url, "cluster": cluster, "instance_id": "p1", "lease_ttl_s": 1.5, "lease_poll_s": 0.1,
        "pending_ack_wait_s": 1.0, "world_snapshot": False, "quota_recheck_s": 60.0, **kw})


@contextlib.asynccontextmanager
async def placement(url: str, cluster: str, **kw: Any) -> AsyncIterator[Any]:
    """The real placement service in this process, leading (its pending-pods consumer running)."""
    from gpuaware.services.placement.handlers import mounter

    async with in_process(placement_settings(url, cluster, **kw), mounter, what="placement") as service:
        await eventually(lambda: service.consumer is not None, timeout=10, what="placement leading")
        yield service


class ClusterClient:
    """A test's connection to one cluster: it publishes through ``js`` and records what the services
    publish for ``cluster`` (``listen``: core subscriptions, dropped by ``stop``). Each service's test
    helpers subclass it with their lists and their publishing methods."""

    def __init__(self, nc: Any, cluster: str) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.cluster = cluster
        self._subs: list[Any] = []

    async def listen(self, into: Mapping[str, tuple[type, list[Any]]]) -> None:
        """``record`` these subjects into these lists until ``stop``."""
        self._subs += await record(self.nc, self.cluster, into)

    async def stop(self) -> None:
        for s in self._subs:
            with contextlib.suppress(Exception):
                await s.unsubscribe()
