"""The alert-bridge service in-process (``run_service`` with its real mount), and HTTP helpers."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from service_runner import in_process, quiet_settings

from gpuaware.services.alert_bridge.bridge import AlertBridge
from gpuaware.services.alert_bridge.handlers import make_mount
from gpuaware.services.alert_bridge.settings import AlertBridgeSettings


def bridge_settings(nats_url: str, **values: Any) -> AlertBridgeSettings:
    return quiet_settings(AlertBridgeSettings, nats_url=nats_url, instance_id="t1", **values)


@contextlib.asynccontextmanager
async def running_bridge(settings: AlertBridgeSettings) -> AsyncIterator[AlertBridge]:
    async with in_process(settings, make_mount, what="the alert bridge") as bridge:
        yield bridge


async def post(url: str, body: Any) -> tuple[int, Any]:
    """(status, the answer as JSON, or as text when it is not JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as s, s.post(url, data=data,
                                                     headers={"Content-Type": "application/json"}) as resp:
        return resp.status, _answer(await resp.text())


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, _answer(await resp.text())


def _answer(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
