"""Run the import-layer contract with import-linter, over the packages that exist today.

The static contracts live in pyproject.toml ([tool.importlinter]). The ones that depend on what
exists are derived here, so they grow with the repo instead of being edited by hand:
- libs never import services; every service is independent of every other service;
- each library (and the schemas) is used through its public API: another package imports
  `from gpuaware.X import name`, never `gpuaware.X.module` (kopf's rule: what `__init__` exports is
  the contract, the modules behind it can move). Tests may import internals, to unit-test them; the
  benchmarks may not (tests/lint/test_public_api.py checks bench/, which import-linter does not see);
- each third-party boundary has one owner: only gpuaware.bus imports nats, only gpuaware.tsdb
  imports psycopg, only gpuaware.k8s imports kubernetes, only gpuaware.gpu imports pynvml (and the
  Prometheus parser), only gpuaware.forecast imports torch and onnxruntime.
import-linter refuses contracts naming modules that do not exist, hence the discovery.

Usage: python tests/lint/import_layers.py [--extra-path DIR ...]
(`--extra-path` puts more `gpuaware` namespace portions on the path: the tests use it to prove a
service importing another service breaks the build.)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pkgutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOUNDARIES = {"nats": "gpuaware.bus", "psycopg": "gpuaware.tsdb", "psycopg_pool": "gpuaware.tsdb",
              "kubernetes": "gpuaware.k8s", "pynvml": "gpuaware.gpu",
              # the dcgm-exporter text parser, and the services' own /metrics endpoint
              "prometheus_client": ("gpuaware.gpu", "gpuaware.runtime"),
              "torch": "gpuaware.forecast", "onnxruntime": "gpuaware.forecast"}


def _subpackages(package: str) -> list[str]:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        return []
    return sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                  if m.ispkg)


def _submodules(package: str) -> list[str]:
    """The modules and subpackages directly inside `package` (its internals)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        return []
    return sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                  if m.name != "__main__")


def build_contracts() -> list[dict]:
    libs = [p for p in _subpackages("gpuaware") if p not in ("gpuaware.services",)]
    services = _subpackages("gpuaware.services")
    contracts: list[dict] = []
    if services:
        contracts.append({"name": "libs never import services", "type": "forbidden",
                          "source_modules": libs, "forbidden_modules": ["gpuaware.services"]})
    if len(services) > 1:
        contracts.append({"name": "services are independent of each other", "type": "independence",
                          "modules": services})
    for package in libs:
        internals = _submodules(package)
        sources = [p for p in [*libs, *services] if p != package]
        if internals and sources:
            contracts.append({"name": f"others import {package}, not its modules", "type": "forbidden",
                              "source_modules": sources, "forbidden_modules": internals,
                              # the package's __init__ imports its modules: only direct imports count
                              "allow_indirect_imports": "True"})
    for external, owner in BOUNDARIES.items():
        owners = (owner,) if isinstance(owner, str) else owner
        sources = [p for p in [*libs, *services] if p not in owners]
        if importlib.util.find_spec(external) is not None and sources:
            verb = "imports" if len(owners) == 1 else "import"
            contracts.append({"name": f"only {' and '.join(owners)} {verb} {external}", "type": "forbidden",
                              "source_modules": sources, "forbidden_modules": [external],
                              # through the owner is the point: only direct imports are forbidden
                              "allow_indirect_imports": "True"})
    return contracts


def _ini(contracts: list[dict]) -> str:
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[importlinter]", "root_packages =" + "".join(f"\n    {p}" for p in base["root_packages"]),
             f"include_external_packages = {base.get('include_external_packages', False)}"]
    every = [*base.get("contracts", []), *contracts]
    for i, contract in enumerate(every):
        lines += ["", f"[importlinter:contract:{i}]"]
        for key, value in contract.items():
            if isinstance(value, list):
                lines.append(f"{key} =" + "".join(f"\n    {item}" for item in value))
            else:
                lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra-path", action="append", default=[], type=Path)
    args = parser.parse_args(argv)
    for path in args.extra_path:
        sys.path.insert(0, str(path))
    config = _ini(build_contracts())
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as handle:
        handle.write(config)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, args.extra_path), env.get("PYTHONPATH", "")])
    lint = Path(sys.executable).parent / "lint-imports"
    try:
        return subprocess.run([str(lint), "--config", handle.name, "--no-cache"], env=env).returncode
    finally:
        os.unlink(handle.name)


if __name__ == "__main__":
    sys.exit(main())
