"""Where the bench scripts find the repository and write their reports, and how a report stays portable
and strict (imported by the scripts by name)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
"""the repository"""
RESULTS_DIR = ROOT / "bench" / "results"
"""each script's JSON report (and profile summaries) goes here"""


def finite(value: Any) -> Any:
    """Strict JSON: a figure with nothing to measure (NaN, inf) is null, in any nesting."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def shown(path: Path) -> str:
    """A path as a report names it: relative to the repository (a path outside it: its name only)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name
