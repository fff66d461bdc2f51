"""The images to build, from the one list of processes (``helm/gpuaware/files/processes.json``, generated
from ``gpuaware.schemas.processes``): each image's name, the module its entrypoint runs and the package
folder it is built from. The Dockerfile asks it (build arg ``IMAGE``), so an image's module is never
typed by hand.

Usage:
  python deploy/docker/images.py                   # every image's `docker build` command
  python deploy/docker/images.py module binder     # -> gpuaware.services.binder
  python deploy/docker/images.py package binder    # -> services/binder
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = ROOT / "helm" / "gpuaware" / "files" / "processes.json"


def images(path: Path = LIST) -> dict[str, str]:
    """image -> module (the list's own table: one module per image)."""
    return dict(json.loads(path.read_text())["images"])


def package(module: str) -> str:
    """The folder a service module is built from: ``gpuaware.services.<name>`` -> ``services/<name>``."""
    parts = module.split(".")
    if parts[:2] != ["gpuaware", "services"] or len(parts) != 3:
        raise SystemExit(f"{module} is not a service module (gpuaware.services.<name>)")
    return f"services/{parts[2]}"


def main(argv: list[str]) -> int:
    table = images()
    if not argv:
        for image, module in table.items():
            print(f"docker build -f deploy/docker/Dockerfile --build-arg IMAGE={image} "
                  f"-t ghcr.io/gpuaware/{image}:0.1.0 .   # {module}")
        return 0
    what, image = argv
    if image not in table:
        print(f"no image {image!r} in the list of processes; known: {', '.join(table)}", file=sys.stderr)
        return 1
    print(table[image] if what == "module" else package(table[image]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
