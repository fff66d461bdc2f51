"""The install docs name only files that exist, and build every image the chart deploys.

What counts as a repository path (precise, so that prose never trips it and a wrong path always does):

* in Markdown (README.md, helm/README.md): every whitespace-separated word of an inline code span or of
  a fenced code block, and every relative link target; in values.yaml: every word of the file;
* a word is a path when it has a ``/`` and either its first part is an entry of the folder it is read
  against (``libs/...``, ``deploy/...``; in the chart's docs also ``ci/...``, ``files/...``) or it ends
  in a file extension (``.yaml``, ``.py``, ...); URLs, absolute paths, ``<placeholders>/...`` and
  Kubernetes names (``nvidia.com/gpu``) are not;
* the word after ``-f`` / ``--values`` / ``--file`` is always a path (``-`` is standard input);
* ``<name>`` and ``*`` inside a path are wildcards: at least one file must match.

Paths are read against the repository root; in helm/README.md and values.yaml also against the chart
(``helm/gpuaware``), which those files describe. Files that a command writes (``make demo``'s report,
``make gpu-check``'s result) are allowed when the command's source names them.

Install steps: every image of the list of processes (``helm/gpuaware/files/processes.json``, what the
chart's templates range over) is built by the docs' ``for image in ...`` loop around
``docker build -f deploy/docker/Dockerfile --build-arg IMAGE=...``, and nothing else is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gpuaware"
DOCS = {"README.md": (ROOT,), "helm/README.md": (ROOT, CHART), "helm/gpuaware/values.yaml": (ROOT, CHART)}
EXTENSIONS = (".py", ".yaml", ".yml", ".json", ".md", ".txt", ".toml", ".html", ".csv", ".sh", ".cfg", ".sql",
              ".onnx", ".ini", ".conf", ".tpl")
WRITTEN_BY = {
    "demo-out/report.html": "libs/cli/src/gpuaware/cli",
    "demo-out/report.json": "libs/cli/src/gpuaware/cli",
    "bench/results/gpu-check.json": "bench/gpu_check.py",
}
"""outputs the docs may name before they exist -> the source that writes them (it must name the file)"""
FILE_FLAGS = ("-f", "--values", "--file")
_TRIM = "`'\"()[]{},;:.!?"
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def words_of_markdown(text: str) -> list[str]:
    """The words of code blocks and inline code spans, and link targets."""
    blocks = _FENCE.findall(text)
    prose = _FENCE.sub("", text)
    words = [w for block in blocks for w in block.split()]
    words += [w for span in _INLINE.findall(prose) for w in span.split()]
    words += _LINK.findall(prose)
    return words


def words_of_yaml(text: str) -> list[str]:
    return text.split()


def _clean(word: str) -> str:
    word = word.strip(_TRIM)
    word = re.sub(r"'s$", "", word)
    return word.split("#", 1)[0].strip(_TRIM) if "://" not in word else word


def is_path(word: str, bases: tuple[Path, ...]) -> bool:
    if "/" not in word or "://" in word or word.startswith(("/", "<", "$", "~", "=")) or "=" in word:
        return False
    first = word.split("/", 1)[0]
    if not first or "<" in first or "*" in first:
        return False
    return any((base / first).exists() for base in bases) or word.rstrip("/").endswith(EXTENSIONS)


def paths_named(words: list[str], bases: tuple[Path, ...]) -> list[str]:
    out: list[str] = []
    for i, raw in enumerate(words):
        word = _clean(raw)
        after_flag = i > 0 and words[i - 1] in FILE_FLAGS
        if (after_flag and word and word != "-") or is_path(word, bases):
            out.append(word)
    return list(dict.fromkeys(out))


def resolves(path: str, bases: tuple[Path, ...]) -> bool:
    if path in WRITTEN_BY:
        return True
    pattern = re.sub(r"<[^>/]+>", "*", path.rstrip("/"))
    for base in bases:
        if "*" in pattern:
            if any(base.glob(pattern)):
                return True
        elif (base / pattern).exists():
            return True
    return False


def test_the_rule_tells_paths_from_prose() -> None:
    words = words_of_markdown("see `libs/quota` and `nvidia.com/gpu: N`, `gpuaware.io/checkpoint-*`,\n"
                              "[map](docs/ARCHITECTURE.md#x) `--set nats.url=nats://n:4222` `<registry>/x:1`\n"
                              "```sh\nkubectl apply -f ci/nope-values.yaml\nkubectl apply -f -\n```\n")
    assert paths_named(words, (ROOT,)) == ["ci/nope-values.yaml", "libs/quota", "docs/ARCHITECTURE.md"]
    assert not resolves("ci/nope-values.yaml", (ROOT,))
    assert resolves("ci/bundled-values.yaml", (ROOT, CHART))
    assert not resolves("services/*/Dockerfile", (ROOT,))
    assert resolves("services/<name>/src/gpuaware/services/<name>/handlers.py", (ROOT,))
    assert paths_named(["not/a/path", "bench/nope.json"], (ROOT,)) == ["bench/nope.json"]


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_path_a_doc_names_exists(doc: str) -> None:
    bases = DOCS[doc]
    text = (ROOT / doc).read_text()
    words = words_of_yaml(text) if doc.endswith(".yaml") else words_of_markdown(text)
    named = paths_named(words, bases)
    assert named, f"{doc}: no paths found (the extraction broke)"
    missing = [p for p in named if not resolves(p, bases)]
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_outputs_named_before_they_exist_are_written_by_their_source() -> None:
    for output, source in WRITTEN_BY.items():
        src = ROOT / source
        files = [src] if src.is_file() else sorted(src.rglob("*.py"))
        assert files, f"{source} (said to write {output}) does not exist"
        name = Path(output).name
        assert any(name in f.read_text() for f in files), f"nothing in {source} names {name}"


_LOOP = re.compile(r"for image in ([^;\n]+?)\s*;\s*do\b(.*?)\bdone\b", re.S)


def images_built(doc: str) -> set[str]:
    """The images the doc's `for image in ...; do docker build ... IMAGE=$image ...; done` loops build."""
    out: set[str] = set()
    for names, body in _LOOP.findall((ROOT / doc).read_text()):
        if re.search(r'docker build -f deploy/docker/Dockerfile --build-arg IMAGE="?\$\{?image\}?"?', body):
            out |= set(names.replace("\\", " ").split())
    return out


def images_deployed() -> set[str]:
    listed = json.loads((CHART / "files" / "processes.json").read_text())
    images = set(listed["images"])
    assert images == {p["image"] for p in listed["processes"]}
    return images


@pytest.mark.parametrize("doc", ["README.md", "helm/README.md"])
def test_the_install_steps_build_every_image_the_chart_deploys(doc: str) -> None:
    built = images_built(doc)
    deployed = images_deployed()
    assert {"quota", "forecasting"} <= deployed
    assert built == deployed, (f"{doc}: images the chart deploys but the steps do not build: "
                               f"{sorted(deployed - built)}; built but not deployed: {sorted(built - deployed)}")
