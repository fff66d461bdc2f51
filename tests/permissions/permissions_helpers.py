"""What a refused operation looks like to a client of the permissioned server: the call times out
(the server drops it) and the connection's last error names the subject it refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpuaware import bus
from gpuaware.schemas.streams import BINDER, TELEMETRY


async def assert_refused(nc: bus.Client, subject: str, call: Any) -> None:
    """`call()` (a request on `subject`) times out, and the server said why."""
    with pytest.raises(TimeoutError):
        await call()
    assert nc.last_error is not None
    text = str(nc.last_error).lower()
    assert "permissions violation" in text and f'"{subject.lower()}"' in text, text


async def assert_publish_refused(nc: bus.Client, subject: str) -> None:
    js = nc.jetstream(timeout=1.0)
    await assert_refused(nc, subject, lambda: js.publish(subject, b"{}", timeout=1.0))


async def assert_stream_admin_refused(nc: bus.Client) -> None:
    """No service may delete, create or purge a stream (the admin provisions them)."""
    js = nc.jetstream(timeout=1.0)
    await assert_refused(nc, f"$JS.API.STREAM.DELETE.{BINDER.name}", lambda: js.delete_stream(BINDER.name))
    await assert_refused(nc, "$JS.API.STREAM.CREATE.ROGUE",
                         lambda: js.add_stream(name="ROGUE", subjects=["rogue.>"]))
    await assert_refused(nc, f"$JS.API.STREAM.PURGE.{TELEMETRY.name}", lambda: js.purge_stream(TELEMETRY.name))


async def assert_discoverable(nc: bus.Client, name: str, *, timeout: float = 10.0) -> None:
    """Another user's ``$SRV.PING``, ``$SRV.PING|INFO|STATS.<name>`` are answered by service ``name``: one
    micro service per process, so each request gets one reply per process, which the server lets through
    (two micro services of one name on one connection both reply, and both replies are refused)."""
    for subject in ("$SRV.PING", f"$SRV.PING.{name}", f"$SRV.INFO.{name}", f"$SRV.STATS.{name}"):
        inbox = nc.new_inbox()
        seen = asyncio.Event()

        async def on(msg: Any, seen: asyncio.Event = seen) -> None:
            if json.loads(msg.data).get("name") == name:
                seen.set()

        sub = await nc.subscribe(inbox, cb=on)
        try:
            await nc.publish(subject, b"", reply=inbox)
            try:
                await asyncio.wait_for(seen.wait(), timeout)
            except TimeoutError:
                raise AssertionError(f"{subject}: no reply from {name} within {timeout}s "
                                     f"(last error: {nc.last_error})") from None
        finally:
            await sub.unsubscribe()
