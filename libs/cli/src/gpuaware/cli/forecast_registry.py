"""`--model latest`: the newest model of the registry (DATABASE_URL), read through gpuaware.tsdb."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console

from gpuaware import forecast, tsdb


async def _latest(dsn: str) -> forecast.RegistryEntry | None:
    async with await tsdb.connect(dsn) as conn:
        return await forecast.latest_async(conn)


def latest_model_bytes(dsn: str) -> tuple[bytes, str]:
    console = Console()
    if not dsn:
        console.print("[red]--model latest needs DATABASE_URL[/red] (the registry lives in PostgreSQL)")
        raise typer.Exit(2)
    try:
        entry = asyncio.run(_latest(dsn))
    except Exception as exc:  # the driver's errors, surfaced with their message
        console.print(f"[red]cannot read the model registry:[/red] {type(exc).__name__}: {exc}")
        raise typer.Exit(3) from None
    if entry is None:
        console.print("[red]the model registry is empty[/red]: publish one (gpuaware forecast train, then the registry)")
        raise typer.Exit(2)
    return entry.onnx, f"registry {entry.label}"
