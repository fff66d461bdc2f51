"""Run mypy over every first-party package: the schemas, each library and each service.

The settings live in pyproject.toml ([tool.mypy]): strict for gpuaware.schemas, gpuaware.placement and
gpuaware.bus, the bodies of untyped functions checked everywhere else. The packages are discovered
from the tree (`schemas/src`, `libs/*/src`, `services/*/src`) so that a new library is checked
without editing a list. Those source folders go on MYPYPATH: the editable installs put them on
sys.path through .pth files, and mypy would otherwise treat them as installed packages without a
py.typed marker and refuse them. Results are cached in .mypy_cache, so a rerun reads only what changed.

Usage: python tests/lint/typecheck.py [PACKAGE ...]   (default: every package; e.g. gpuaware.bus)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_roots() -> list[Path]:
    """Every folder that holds a portion of the `gpuaware` namespace."""
    return sorted(path for pattern in ("schemas/src", "libs/*/src", "services/*/src")
                  for path in REPO.glob(pattern) if (path / "gpuaware").is_dir())


def packages() -> list[str]:
    """gpuaware.<lib> for each library and the schemas, gpuaware.services.<name> for each service."""
    found: set[str] = set()
    for root in source_roots():
        for package in (root / "gpuaware").iterdir():
            if package.name == "services":
                found.update(f"gpuaware.services.{p.name}" for p in package.iterdir()
                             if (p / "__init__.py").exists())
            elif (package / "__init__.py").exists():
                found.add(f"gpuaware.{package.name}")
    return sorted(found)


def run(selected: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """mypy over `selected` packages (default: all), from the repository root so its config applies."""
    env = dict(os.environ, MYPYPATH=os.pathsep.join(map(str, source_roots())))
    args = [arg for package in (selected or packages()) for arg in ("-p", package)]
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO, env=env,
                          capture_output=True, text=True)


def main(argv: list[str]) -> int:
    result = run(argv or None)
    sys.stdout.write(result.stdout + result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
