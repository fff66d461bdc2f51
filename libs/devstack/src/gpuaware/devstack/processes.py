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
