"""Start and stop a real Alertmanager (Debian's ``prometheus-alertmanager``), for tests and the demo.

Alertmanager is not a wheel: it is used when the machine has it (``make test`` installs the Debian
package when it runs as root with apt-get) and ``alertmanager_binary()`` says None otherwise, so a
caller can skip with the reason (``ALERTMANAGER_MISSING``). The server runs in one data folder on a
loopback port, as a single node (no gossip), with one route: every alert, grouped by all its labels
and sent at once (``group_wait: 0s``, ``group_interval: 1s``), to the ``gpuaware`` receiver, which
calls each of ``webhook_urls`` (firing and resolved) when any are given.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.ports import free_port
from gpuaware.devstack.processes import terminate

__all__ = ["ALERTMANAGER_MISSING", "AlertmanagerProcess", "alertmanager_binary", "start_alertmanager"]

ALERTMANAGER_MISSING = ("Alertmanager is not installed (Debian's `prometheus-alertmanager`; `make test` installs "
                        "it when it runs as root with apt-get)")
_NAMES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_binary() -> Path | None:
    """The Alertmanager on PATH, or None."""
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


@dataclass
class AlertmanagerProcess:
    """A running Alertmanager; ``url`` is its base URL (``/api/v2/alerts``, ``/-/ready``)."""

    port: int
    data_dir: Path
    popen: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "alertmanager.log"

    def alerts(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every alert Alertmanager holds now (``GET /api/v2/alerts``: active, suppressed, unprocessed)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=timeout) as resp:
            return list(json.loads(resp.read()))

    def ready(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=timeout) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        terminate(self.popen.pid, self.popen, timeout)


def config_text(webhook_urls: Sequence[str] = ()) -> str:
    """Alertmanager's configuration: one route to the ``gpuaware`` receiver (see the module docstring)."""
    receiver: dict[str, Any] = {"name": "gpuaware"}
    if webhook_urls:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in webhook_urls]
    config = {"route": {"receiver": "gpuaware", "group_by": ["..."], "group_wait": "0s", "group_interval": "1s",
                        "repeat_interval": "1h"},
              "receivers": [receiver]}
    return json.dumps(config, indent=1) + "\n"  # JSON is YAML


def start_alertmanager(data_dir: Path, *, webhook_urls: Sequence[str] = (), port: int = 0,
                       timeout: float = 30.0) -> AlertmanagerProcess:
    """Start Alertmanager in ``data_dir`` on ``port`` (0: a free one) and wait until it is ready.
    Raises ``StackError`` when it is not installed or does not become ready (with its log's end)."""
    binary = alertmanager_binary()
    if binary is None:
        raise StackError(ALERTMANAGER_MISSING)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "alertmanager.yml").write_text(config_text(webhook_urls))
    port = port or free_port()
    with (data_dir / "alertmanager.log").open("wb") as log:
        popen = subprocess.Popen(
            [str(binary), f"--config.file={data_dir / 'alertmanager.yml'}", f"--storage.path={data_dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=log)
    am = AlertmanagerProcess(port=port, data_dir=data_dir, popen=popen)
    deadline = time.monotonic() + timeout
    while not am.ready():
        if popen.poll() is not None or time.monotonic() > deadline:
            am.stop()
            raise StackError(f"Alertmanager ({binary}) did not become ready on 127.0.0.1:{port} within "
                             f"{timeout:.0f}s; its log ends:\n{am.log_tail()}")
        time.sleep(0.2)
    return am
