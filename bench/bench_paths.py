"""Where the bench scripts find the repository and write their reports (imported by the scripts by name)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""the repository"""
RESULTS_DIR = ROOT / "bench" / "results"
"""each script's JSON report (and profile summaries) goes here"""
