"""One migration source for both backends: shared SQL with native-only and TimescaleDB-only sections.

A migration file holds the statements both backends run once, and marks what differs:

    CREATE TABLE gpu_samples (
        ...
    --@ native
    ) PARTITION BY RANGE (ts);
    --@ timescale
    );
    SELECT create_hypertable('gpu_samples', 'ts', ...);
    --@ end

Lines after `--@ native` (or `--@ timescale`) run only on that backend, up to `--@ end` or the
other backend's marker; every other line runs on both. `--@ include NAME` stands for the file `fragments/NAME.sql`, indented like the
marker: a column list or an aggregate that several statements (or both dialects) repeat is written
once. Rendering is plain text substitution, so what runs is exactly what a reviewer reads, and the
checksum the migrator records is that of the rendered SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpuaware.tsdb.capabilities import BACKENDS, Backend
from gpuaware.tsdb.errors import MigrationError

_SECTION = re.compile(r"^\s*--@ (?P<word>native|timescale|end)\s*$")
_INCLUDE = re.compile(r"^(?P<indent>\s*)--@ include (?P<name>[a-z0-9_]+)\s*$")


def has_dialects(source: str) -> bool:
    """True when the file has a backend-specific section (its rendering depends on the backend)."""
    return any((m := _SECTION.match(line)) and m["word"] in BACKENDS for line in source.splitlines())


def render(source: str, backend: Backend, fragments: Mapping[str, str], *, filename: str) -> str:
    """The SQL `backend` runs: shared lines, that backend's sections, includes expanded."""
    out: list[str] = []
    section: str | None = None
    for number, line in enumerate(source.splitlines(keepends=True), 1):
        where = f"{filename}:{number}"
        if marker := _SECTION.match(line):
            word = marker["word"]
            if word == section or (word == "end" and section is None):
                raise MigrationError(f"{where}: '--@ {word}' where it opens or closes nothing", filename=filename)
            section = None if word == "end" else word
        elif section is None or section == backend:
            out.extend(_expand(line, fragments, where, filename))
    if section is not None:
        raise MigrationError(f"{filename}: the '--@ {section}' section has no '--@ end'", filename=filename)
    return "".join(out)


def _expand(line: str, fragments: Mapping[str, str], where: str, filename: str) -> list[str]:
    include = _INCLUDE.match(line)
    if include is None:
        return [line]
    text = fragments.get(include["name"])
    if text is None:
        raise MigrationError(f"{where}: no fragment {include['name']!r} (fragments/{include['name']}.sql)",
                             filename=filename)
    return [include["indent"] + part if part.strip() else part for part in text.splitlines(keepends=True)]
