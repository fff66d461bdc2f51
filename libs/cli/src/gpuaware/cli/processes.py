"""Services as real child processes: start with an environment and a log file, stop with SIGTERM.

The demo runs every service exactly as a deployment would (``python -m gpuaware.services.<name>``),
never importing one. ``ServiceProcess`` owns one child: its own process group (a Ctrl-C in the
terminal reaches the demo, which then stops the children in order instead of them dying mid-write),
stdout and stderr appended to ``<logs>/<name>.log``, and a stop that sends SIGTERM (the services
drain: in-flight messages are finished and acknowledged), waits, and only then kills.
``ProcessGroup`` stops everything it started, last started first, whatever happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ProcessGroup", "ServiceProcess", "listed_process", "service_built", "service_command"]


def service_built(module: str) -> bool:
    """Whether ``python -m <module>`` can run here (the package and its ``__main__`` exist)."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:
        return False


def service_command(module: str, *args: str) -> list[str]:
    """The argv that runs a service module: ``python -m <module> [args]``."""
    return [sys.executable, "-m", module, *args]


def listed_process(argv: Sequence[str]) -> str | None:
    """The entry of the list of processes (``gpuaware.schemas.PROCESSES``) an argv runs: its module,
    then its args; None for anything else."""
    from gpuaware.schemas import PROCESSES

    if len(argv) < 3 or argv[1] != "-m":
        return None
    for p in PROCESSES:
        if argv[2] == p.module and tuple(argv[3:3 + len(p.args)]) == p.args:
            return p.name
    return None


@dataclass
class ServiceProcess:
    """One service child process (see the module docstring)."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    exit_code: int | None = None

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` for the drain, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)
            except ProcessLookupError:
                pass
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ProcessGroup:
    """Processes stopped together, in reverse start order (a context manager)."""

    processes: list[ServiceProcess] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    """the list's processes started so far (``listed_process``), each once, in order"""

    def start(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path) -> ServiceProcess:
        p = ServiceProcess(name, argv, env, log_path).start()
        self.processes.append(p)
        listed = listed_process(argv)
        if listed is not None and listed not in self.started:
            self.started.append(listed)
        return p

    def stop(self, name: str | None = None, timeout: float = 15.0) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for p in reversed(self.processes):
            if name is None or p.name == name:
                out[p.name] = p.stop(timeout)
        self.processes = [p for p in self.processes if name is not None and p.name != name]
        return out

    def dead(self) -> list[ServiceProcess]:
        return [p for p in self.processes if not p.alive()]

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
