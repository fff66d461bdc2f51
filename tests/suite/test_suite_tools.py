"""The suite's own tools: the machine-speed factor its ceilings scale by, and the under-load runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import machine_speed
import psutil
import pytest
from worker_scopes import shares_fixtures

TESTS = Path(__file__).resolve().parent.parent


def test_the_factor_is_at_least_one_and_capped() -> None:
    factor = machine_speed.measure(rounds=1)
    assert 1.0 <= factor <= machine_speed.MAX_SLOWDOWN
    assert machine_speed.ceiling(10.0) == pytest.approx(10.0 * machine_speed.SLOWDOWN)


@pytest.mark.parametrize(("given", "error"), [("fast", "not a number"), ("0.5", "between 1 and 100")])
def test_a_bad_override_is_refused_with_the_reason(given: str, error: str) -> None:
    done = subprocess.run([sys.executable, "-c", "import machine_speed"], cwd=TESTS, capture_output=True, text=True,
                          env={**os.environ, "GPUAWARE_TEST_SLOWDOWN": given}, timeout=60)
    assert done.returncode != 0 and error in done.stderr and "Traceback" not in done.stderr


def test_an_override_is_taken_as_given() -> None:
    done = subprocess.run([sys.executable, "-c", "import machine_speed; print(machine_speed.ceiling(3))"], cwd=TESTS,
                          capture_output=True, text=True, env={**os.environ, "GPUAWARE_TEST_SLOWDOWN": "2.5"},
                          timeout=60)
    assert done.stdout.strip() == "7.5"


def test_the_runner_keeps_hogs_beside_the_command_and_returns_its_status(tmp_path: Path) -> None:
    """The command sees the hogs running (its own parent's children spinning) and its exit status comes
    back; afterwards no hog is left."""
    probe = ("import os, psutil, sys; hogs = [c for c in psutil.Process(os.getppid()).children() "
             "if c.pid != os.getpid()]; print(len(hogs)); sys.exit(7)")
    runner = subprocess.Popen([sys.executable, str(TESTS / "under_load.py"), "--hogs", "2", "--",
                               sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True)
    out, _ = runner.communicate(timeout=120)
    assert runner.returncode == 7
    assert out.strip() == "2"
    assert not [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == runner.pid]


def test_the_runner_refuses_a_missing_command() -> None:
    done = subprocess.run([sys.executable, str(TESTS / "under_load.py"), "--hogs", "1"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "no command given" in done.stderr


@pytest.mark.parametrize(("test_file", "together"), [
    ("tests/cli/test_demo_e2e.py", True),  # its module-scoped demo run
    ("tests/permissions/test_permissions_server.py", True),  # its folder's conftest: a server per module
    ("tests/faults/test_fault_drill.py", False),  # each scenario its own stack: spread over the workers
    ("tests/suite/test_suite_tools.py", False),
])
def test_modules_sharing_a_fixture_run_on_one_worker(test_file: str, together: bool) -> None:
    assert shares_fixtures(test_file) is together
