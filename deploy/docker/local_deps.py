"""Print the repository's own packages a service needs (itself last), for the image build.

Why: the packages depend on each other by name (``gpuaware-runtime``), which no index serves; pip
must be given every local directory at once. Reading the pyproject files keeps the images to what
each service imports (a service never drags in torch because another one needs it).
Usage: python deploy/docker/local_deps.py services/binder  ->  schemas libs/bus ... services/binder
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def packages() -> dict[str, tuple[str, list[str]]]:
    out = {}
    for p in [ROOT / "schemas" / "pyproject.toml", *ROOT.glob("libs/*/pyproject.toml"),
              *ROOT.glob("services/*/pyproject.toml")]:
        proj = tomllib.loads(p.read_text())["project"]
        deps = [re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0] for d in proj.get("dependencies", [])]
        out[proj["name"]] = (str(p.parent.relative_to(ROOT)), deps)
    return out


def local_deps(service_dir: str) -> list[str]:
    pkgs = packages()
    by_dir = {d: name for name, (d, _) in pkgs.items()}
    if service_dir not in by_dir:
        raise SystemExit(f"{service_dir} has no pyproject.toml")
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in pkgs or pkgs[name][0] in order:
            return
        for dep in pkgs[name][1]:
            visit(dep)
        order.append(pkgs[name][0])

    visit(by_dir[service_dir])
    return order


if __name__ == "__main__":
    print(" ".join(local_deps(sys.argv[1].rstrip("/"))))
