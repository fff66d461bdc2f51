"""``gpuaware alerts bridge`` is the alert-bridge service started from options: it serves the service's
probes, stops cleanly on SIGTERM, and a setting the service refuses ends it with the reason and no
traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuaware.cli.alerts import bridge_env
from gpuaware.cli.main import app
from gpuaware.devstack import free_port

GPUAWARE = str(Path(sys.executable).parent / "gpuaware")


def test_options_become_the_service_settings() -> None:
    env = bridge_env(alertmanager="http://am:9093", listen_port=9095, listen_addr="0.0.0.0", cluster="prod.eu-west-1",
                     resend_s=30.0, base={"NATS_URL": "nats://n:4222"})
    assert env == {"NATS_URL": "nats://n:4222", "GPUAWARE_ALERT_BRIDGE_ALERTMANAGER_URL": "http://am:9093",
                   "GPUAWARE_ALERT_BRIDGE_LISTEN_PORT": "9095", "GPUAWARE_ALERT_BRIDGE_LISTEN_ADDR": "0.0.0.0",
                   "GPUAWARE_ALERT_BRIDGE_CLUSTER": "prod.eu-west-1", "GPUAWARE_ALERT_BRIDGE_RESEND_S": "30",
                   "GPUAWARE_ALERT_BRIDGE_LOG_FORMAT": "console"}


def test_nothing_to_do_is_refused() -> None:
    result = CliRunner().invoke(app, ["alerts", "bridge"])
    assert result.exit_code == 2 and "give --alertmanager, --listen-port or both" in result.output


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def test_the_command_runs_the_service(nats_proc: Any, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "NATS_URL": nats_proc.url}
    with (tmp_path / "bridge.log").open("wb") as log:
        proc = subprocess.Popen([GPUAWARE, "alerts", "bridge", "--listen-port", str(port)], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _ready(f"http://127.0.0.1:{port}/readyz"):
            assert proc.poll() is None, (tmp_path / "bridge.log").read_text()
            assert time.monotonic() < deadline, "the bridge did not become ready within 60 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "bridge.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "alert-bridge stopped" in (tmp_path / "bridge.log").read_text()


def test_a_refused_setting_ends_it_with_the_reason() -> None:
    done = subprocess.run([GPUAWARE, "alerts", "bridge", "--alertmanager", "alertmanager:9093"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "ALERTMANAGER_URL must be an http:// or https:// URL" in done.stderr and "Traceback" not in done.stderr
