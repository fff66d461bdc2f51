"""Builders shared by the health tests: one GPU, observations at given times, quick configs."""

from __future__ import annotations

from typing import Any

from gpuaware.health import HealthBook, HealthConfig, Observation

GPU = "GPU-aaaa"
NODE = "node-a"
HOUR = 3600.0
DAY = 86400.0


def obs(at: float, **fields: Any) -> Observation:
    """An observation of GPU on NODE at ``at`` (a one-minute interval unless given)."""
    fields.setdefault("interval_s", 60.0)
    return Observation(gpu_uuid=fields.pop("gpu_uuid", GPU), node=NODE, at=at, **fields)


def book(**groups: Any) -> HealthBook:
    """A HealthBook whose config has ``groups`` merged in, e.g. ``book(risk={"aftershock_k": 0})``."""
    return HealthBook(HealthConfig().replace(**groups) if groups else HealthConfig())


def no_risk(**groups: Any) -> HealthBook:
    """A book whose failure risk is switched off (to test the other rules alone)."""
    risk = {"aftershock_k": 0.0, "ce_beta": 0.0, "xid_beta": 0.0, "thermal_beta": 0.0, **groups.pop("risk", {})}
    return book(risk=risk, **groups)
