"""The benchmarks use each library through its public API (`from gpuaware.sim import run_one`), as the
packages do (tests/lint/import_layers.py checks those with import-linter, which sees only `gpuaware`).
They may drive a service's own modules in-process (a service has no API but its subjects)."""

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from import_layers import REPO


def internal_imports(source: str) -> list[str]:
    """`gpuaware.<library>.<module>` imported by `source` (a service's modules are allowed)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpuaware" and len(parts) > 2 and parts[1] != "services":
                found.append(f"{node.lineno}: {name}")
    return found


def test_the_rule_tells_a_module_from_a_package() -> None:
    assert internal_imports("from gpuaware.sim.evaluator import run_one\n") == ["1: gpuaware.sim.evaluator"]
    assert internal_imports("import gpuaware.sim.evaluator\n") == ["1: gpuaware.sim.evaluator"]
    assert internal_imports("from gpuaware.sim import run_one\nfrom gpuaware import bus\n") == []
    assert internal_imports("from gpuaware.services.telemetry.agent import Agent\n") == []


def test_benchmarks_import_libraries_through_their_public_api() -> None:
    offenders = [f"{path.relative_to(REPO)}:{hit}" for path in sorted((REPO / "bench").rglob("*.py"))
                 for hit in internal_imports(path.read_text())]
    assert not offenders, "\n".join(offenders)
