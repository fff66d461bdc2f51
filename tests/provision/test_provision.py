"""The provisioning job fails as a Job should: one line on stderr saying what failed, exit 1, no
traceback, no password; and does nothing it was not asked to."""

from __future__ import annotations

import os
import subprocess
import sys

from gpuaware.devstack import free_port


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUAWARE_", "NATS_", "DATABASE_URL"))}
    return subprocess.run([sys.executable, "-m", "gpuaware.services.provision"], env={**base, **env},
                          capture_output=True, text=True, timeout=60)


def test_nothing_asked_nothing_done() -> None:
    done = _run({"GPUAWARE_PROVISION_STREAMS": "false"})
    assert done.returncode == 0, done.stderr
    assert "streams: not provisioned; database: not provisioned" in done.stdout


def test_an_unreachable_database_is_one_clear_line_without_the_password() -> None:
    url = f"postgresql://owner:hunter2-secret@127.0.0.1:{free_port()}/gpuaware?connect_timeout=2"
    done = _run({"GPUAWARE_PROVISION_STREAMS": "false", "DATABASE_URL": url,
                 "GPUAWARE_DB_PASSWORD_QUOTA": "also-secret"})
    assert done.returncode == 1
    assert done.stderr.startswith("provisioning failed:") and "Traceback" not in done.stderr
    assert "hunter2" not in done.stderr + done.stdout and "also-secret" not in done.stderr + done.stdout


def test_login_passwords_without_a_database_are_refused() -> None:
    done = _run({"GPUAWARE_PROVISION_STREAMS": "false", "GPUAWARE_DB_PASSWORD_QUOTA": "pw"})
    assert done.returncode == 1 and "no database" in done.stderr and "quota" in done.stderr
