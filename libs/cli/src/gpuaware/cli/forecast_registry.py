"""`--model latest`: the newest model of the registry (DATABASE_URL), read through gpuaware.tsdb."""

from __future__ import annotations

import asyncio

from gpuaware import forecast, tsdb
from gpuaware.cli.options import refuse


async def _latest(dsn: str) -> forecast.RegistryEntry | None:
    async with await tsdb.connect(dsn) as conn:
        return await forecast.latest_async(conn)


def latest_model_bytes(dsn: str) -> tuple[bytes, str]:
    if not dsn:
        refuse("the registry lives in PostgreSQL; set DATABASE_URL", label="--model latest needs DATABASE_URL")
    try:
        entry = asyncio.run(_latest(dsn))
    except Exception as exc:  # the driver's errors, surfaced with their message
        refuse(f"{type(exc).__name__}: {exc}", label="cannot read the model registry", code=3)
    if entry is None:
        refuse("publish one (gpuaware forecast train, then the registry)", label="the model registry is empty")
    return entry.onnx, f"registry {entry.label}"
