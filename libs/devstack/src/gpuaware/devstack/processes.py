"""Process liveness and termination that tolerate zombies and processes we did not spawn."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped by its new parent) counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def terminate(pid: int, popen: subprocess.Popen | None, timeout: float) -> None:
    if popen is not None and popen.poll() is not None:
        return
    try:
        os.kill(pid, signal.SIGTERM if timeout > 0 else signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(timeout=5)


RUNNING = "running"
STOPPED = "stopped"
REUSED = "reused"
"""`pid_state`'s answer when a live process holds the PID but is not the one recorded"""

START_TOLERANCE_S = 0.5
"""how far a process's start time may be from the one recorded at launch and still be that process
(both come from the kernel's start time in clock ticks, so they normally agree to the tick)"""


def started_at(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch, from /proc/<pid>/stat through psutil); None when it
    is gone. Recorded at launch so that a later look can tell the process from one that reuses its PID."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def pid_state(pid: int, *, started: float | None, names: tuple[str, ...]) -> str:
    """`RUNNING` when `pid` is the process recorded (it started at `started`, when recorded, and its
    executable is one of `names`), `STOPPED` when nothing (or a zombie) holds the PID, `REUSED` when
    another process does: a PID is recycled by the kernel, so a PID alone must never be trusted with a
    signal or a "running"."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return STOPPED
        if started is not None and abs(proc.create_time() - started) > START_TOLERANCE_S:
            return REUSED
        return RUNNING if proc.name() in names else REUSED
    except psutil.NoSuchProcess:
        return STOPPED
    except psutil.AccessDenied:
        return REUSED  # not ours to look at, so not ours to signal
