"""What every benchmark notes about the machine it ran on (imported by the bench scripts by name)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(*packages: str, nats_server: bool = False) -> dict[str, Any]:
    """CPU count and model, Python, platform; the versions of `packages` (keys with `_` for `-`) and,
    with `nats_server`, of the nats-server binary the devstack runs."""
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "cpu_model": cpu_model(),
                           "python": platform.python_version(), "platform": platform.platform()}
    if nats_server:
        from gpuaware.devstack import nats_server_binary

        out["nats_server"] = subprocess.run([str(nats_server_binary()), "--version"], capture_output=True,
                                            text=True).stdout.strip()
    out.update({p.replace("-", "_"): version(p) for p in packages})
    return out


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]
