"""How much slower this machine runs right now than the quiet machine the suite's ceilings were set on.

A test that must bound a wait in wall-clock time (a subprocess's answer, a condition polled until a
deadline, pytest-timeout's per-test ceiling) multiplies its bound by `SLOWDOWN`, so the same suite
passes on a laptop that is busy with other work: the ceilings are generous on a quiet machine and
grow with the load instead of failing under it. Nothing asserts that anything is fast.

`SLOWDOWN` is measured once per process: a fixed piece of pure-Python work is run a few times, and
each run gives two ratios: wall time over the CPU time the process got (how much of a core other work
leaves it) and that CPU time over the same work's on the quiet machine (how fast this CPU is). Their
product's median is the factor. Set GPUAWARE_TEST_SLOWDOWN to override it (a number ≥ 1).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time

QUIET_CPU_SECONDS = 0.10
"""the calibration work's CPU time on the quiet machine the ceilings were set on"""
MAX_SLOWDOWN = 8.0


def _one_round() -> float:
    wall, cpu = time.perf_counter(), time.process_time()
    digest = b"gpuaware"
    for _ in range(100_000):
        digest = hashlib.sha256(digest).digest()
    wall, cpu = time.perf_counter() - wall, max(time.process_time() - cpu, 1e-6)
    return (wall / cpu) * max(1.0, cpu / QUIET_CPU_SECONDS)


def measure(rounds: int = 5) -> float:
    """The factor by which work is slower now than on the quiet machine, in [1, 8]."""
    median = statistics.median(_one_round() for _ in range(rounds))
    return min(MAX_SLOWDOWN, max(1.0, median))


def _slowdown() -> float:
    given = os.environ.get("GPUAWARE_TEST_SLOWDOWN", "").strip()
    if not given:
        return measure()
    try:
        value = float(given)
    except ValueError:
        raise SystemExit(f"GPUAWARE_TEST_SLOWDOWN={given!r} is not a number") from None
    if not 1.0 <= value <= 100.0:
        raise SystemExit(f"GPUAWARE_TEST_SLOWDOWN={given!r} must be between 1 and 100")
    return value


SLOWDOWN = _slowdown()


def ceiling(seconds: float) -> float:
    """`seconds`, a bound set on a quiet machine, scaled to how loaded this machine is now."""
    return seconds * SLOWDOWN
