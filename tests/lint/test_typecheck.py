"""`make test` runs mypy over every package (tests/lint/typecheck.py; settings in pyproject.toml), so a
type error fails the suite; and every `# type: ignore` names its error code and says why."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import typecheck

CHECKED = ("schemas", "libs", "services", "bench", "tests")
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[^\]]+\])?(?P<rest>.*)$")


def test_mypy_finds_nothing_in_any_package() -> None:
    result = typecheck.run()
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_is_checked() -> None:
    """Discovery finds the schemas, the libraries and the services, so a new one is not skipped."""
    found = set(typecheck.packages())
    assert {"gpuaware.schemas", "gpuaware.bus", "gpuaware.placement", "gpuaware.services.placement"} <= found
    libs = {f"gpuaware.{p.name}" for p in (typecheck.REPO / "libs").iterdir() if (p / "src").is_dir()}
    assert libs <= found


def _unexplained(text: str) -> list[str]:
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        match = IGNORE.search(line)
        if match and (match["code"] is None or not match["rest"].strip().startswith("#")):
            bad.append(f"{number}: {line.strip()}")
    return bad


def test_the_ignore_rule_catches_a_bare_or_unexplained_ignore() -> None:
    assert _unexplained("x = f()  # type: ignore\n")
    assert _unexplained("x = f()  # type: ignore[arg-type]\n")
    assert not _unexplained("x = f()  # type: ignore[arg-type]  # f's stubs say int; a float works\n")


def test_every_type_ignore_names_its_code_and_a_reason() -> None:
    offenders = [f"{path.relative_to(typecheck.REPO)}:{hit}"
                 for root in CHECKED for path in sorted((typecheck.REPO / root).rglob("*.py"))
                 if path != Path(__file__) for hit in _unexplained(path.read_text())]
    assert not offenders, "\n".join(offenders)
