"""Shared builders for the forecast tests: synthetic series with a known answer, the shared data path."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpuaware.forecast import Series

REPO = Path(__file__).resolve().parents[2]


def shared_data() -> Path:
    env = os.environ.get("GPUAWARE_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


def square_wave(steps: int, period: int = 6, high: float = 10.0, step_s: float = 600.0, noise: float = 0.0,
                seed: int = 0) -> Series:
    """0 for period/2 steps, then ``high`` for period/2 steps, repeated: a pattern the state can count
    and persistence cannot (half a period ahead it is wrong every time)."""
    rng = np.random.default_rng(seed)
    k = np.arange(steps)
    v = np.where((k % period) < period // 2, 0.0, high) + noise * rng.standard_normal(steps)
    return Series(name="square", start=1_700_000_000.0 - 1_700_000_000.0 % 86_400, step_s=step_s, values=v)
