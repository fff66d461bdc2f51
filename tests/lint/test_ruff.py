"""`make test` runs ruff over the whole repository (the brief: the suite runs ruff and the import-layer
test), so a lint error fails CI instead of waiting for someone to run `make lint`."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing_in_the_repository() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    binary = str(ruff) if ruff.exists() else shutil.which("ruff")
    assert binary, "ruff is not installed (it is pinned in requirements-dev.txt)"
    result = subprocess.run([binary, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
