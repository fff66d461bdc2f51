"""Signal → event → drain: SIGTERM/SIGINT set an asyncio.Event the entry point waits on."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def stop_on_signals(*signals: signal.Signals) -> AsyncIterator[asyncio.Event]:
    sigs = signals or (signal.SIGTERM, signal.SIGINT)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in sigs:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in sigs:
            loop.remove_signal_handler(sig)
