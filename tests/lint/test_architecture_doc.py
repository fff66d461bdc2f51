"""docs/ARCHITECTURE.md names only what exists, and names every stream, event subject and endpoint.

The map drifts when code moves and nobody rereads it. Every backticked name in it that has the shape
of a subject, a stream, a service or a repository path is checked against the code: subjects against
the contract's registry (`gpuaware.schemas.registry`) and its operational endpoints (the services'
`*.stats`, `gpuaware.schemas.permissions.OPERATIONAL_ENDPOINTS`), streams against `gpuaware.schemas.streams.STREAMS`, services against `services/*/`, paths
against the tree. The other way round, every stream and every subject of the registry must appear.
Each check is also run on a planted mistake, so a check that cannot fail fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuaware.schemas.deadletter import DEAD_LETTER_PREFIX
from gpuaware.schemas.permissions import OPERATIONAL_ENDPOINTS
from gpuaware.schemas.registry import MESSAGES, REQUESTS
from gpuaware.schemas.streams import STREAMS, subject_matches

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ARCHITECTURE.md"

TICKED = re.compile(r"`([^`\n]+)`")
SUBJECT_SHAPE = re.compile(r"^[a-z_]+(\.([a-z_]+|v[0-9]+|\*|>))+$")
PATH_ROOTS = ("libs/", "services/", "schemas/", "bench/", "tests/", "docs/", "helm/", "deploy/")


def known_subjects() -> set[str]:
    operational = {subject for subjects in OPERATIONAL_ENDPOINTS.values() for subject in subjects}
    return set(MESSAGES) | set(REQUESTS) | operational


def subject_roots() -> set[str]:
    return {s.split(".")[0] for s in known_subjects()} | {DEAD_LETTER_PREFIX}


def services() -> set[str]:
    return {p.name for p in (REPO / "services").iterdir() if (p / "src" / "gpuaware" / "services" / p.name).is_dir()}


def section(text: str, title: str) -> str:
    """The text of the `## title` section (up to the next `## `)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/ARCHITECTURE.md has no '## {title}' section"
    return match.group(1)


def first_column(table_text: str) -> list[str]:
    """The backticked names in the first cell of each table row."""
    names = []
    for line in table_text.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2 and not set(cells[1].strip()) <= {"-", ":"}:
            names += TICKED.findall(cells[1])
    return names


def unknown_subjects(text: str) -> list[str]:
    """Backticked subject-shaped names that are neither registered nor matched by a wildcard."""
    known, roots, bad = known_subjects(), subject_roots(), []
    for name in TICKED.findall(text):
        if not SUBJECT_SHAPE.match(name) or name.split(".")[0] not in roots:
            continue
        if "*" in name or ">" in name:
            ok = any(subject_matches(name, s) for s in known) or name == f"{DEAD_LETTER_PREFIX}.>"
        else:
            ok = name in known
        if not ok:
            bad.append(name)
    return bad


def missing_paths(text: str) -> list[str]:
    return [name for name in TICKED.findall(text)
            if name.startswith(PATH_ROOTS) and " " not in name and not (REPO / name.rstrip("/")).exists()]


def unknown_services(text: str) -> list[str]:
    return [name for name in first_column(section(text, "Services")) if name not in services()]


def unknown_streams(text: str) -> list[str]:
    return [name for name in first_column(section(text, "Streams")) if name not in {s.name for s in STREAMS}]


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text()


def test_every_subject_the_map_names_exists(doc: str) -> None:
    named = [n for n in TICKED.findall(doc) if SUBJECT_SHAPE.match(n) and n.split(".")[0] in subject_roots()]
    assert len(named) >= len(MESSAGES), "the map names fewer subjects than the contract has events"
    assert unknown_subjects(doc) == []


def test_every_stream_the_map_names_exists_and_every_stream_is_named(doc: str) -> None:
    assert unknown_streams(doc) == []
    assert {s.name for s in STREAMS} <= set(first_column(section(doc, "Streams")))


def test_every_service_the_map_names_exists_and_every_service_is_named(doc: str) -> None:
    assert unknown_services(doc) == []
    assert services() <= set(first_column(section(doc, "Services")))


def test_every_event_and_endpoint_of_the_contract_is_on_the_map(doc: str) -> None:
    ticked = set(TICKED.findall(doc))
    assert sorted(set(MESSAGES) - ticked) == [] and sorted(set(REQUESTS) - ticked) == []


def test_every_path_the_map_names_exists(doc: str) -> None:
    assert missing_paths(doc) == []


def test_the_checks_fail_on_a_planted_mistake(doc: str) -> None:
    planted = ("\n## Services\n| `scheduler` | x | y |\n## Streams\n| `EVENTS` | x |\n"
               "`binder.pod.evicted.v1` `placement.pod.>` `quota.pod.>` `health.stats` `libs/placement/nowhere.py`\n")
    assert unknown_subjects(planted) == ["binder.pod.evicted.v1", "quota.pod.>"]
    assert unknown_services(planted) == ["scheduler"] and unknown_streams(planted) == ["EVENTS"]
    assert missing_paths(planted) == ["libs/placement/nowhere.py"]


# --- README: the way in -------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def quick_start(readme: str) -> str:
    return section(readme, "Quick start")


def broken_links(path: Path) -> list[str]:
    """Relative links of a Markdown file that point at nothing in the tree."""
    return [target for target, _anchor in LINK.findall(path.read_text())
            if "://" not in target and not (path.parent / target).exists()]


def test_the_quick_start_is_two_commands_in_at_most_fifteen_lines() -> None:
    text = quick_start((REPO / "README.md").read_text())
    assert len(text.strip().splitlines()) <= 15
    commands = [line.split("#")[0].strip() for line in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)[0].splitlines()]
    assert commands == ["make demo", "make test"]


def test_the_readme_and_the_docs_link_only_to_what_exists(tmp_path: Path) -> None:
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "bench" / "results" / "README.md"]:
        assert broken_links(path) == [], path
    (tmp_path / "here.md").write_text("")
    planted = tmp_path / "planted.md"
    planted.write_text("[a](nowhere.md) [b](https://example.org/x) [c](here.md#a-section)")
    assert broken_links(planted) == ["nowhere.md"]
