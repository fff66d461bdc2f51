"""Helpers shared by the tsdb tests (imported by name; pytest puts this folder on sys.path)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuaware.tsdb import Sample


def at(text: str) -> datetime:
    """'2025-03-01 10:00:30' -> aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def sample(ts: datetime | str, gpu: str = "GPU-a", node: str = "node-1", **metrics) -> Sample:
    return Sample(ts=at(ts) if isinstance(ts, str) else ts, node=node, gpu_uuid=gpu, **metrics)
