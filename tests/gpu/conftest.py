"""Fixtures for the GPU layer tests: where the shared k8s facts (real exporter samples, real
`nvidia-smi topo -m` matrices) live, and a fixed start time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _facts_dir() -> Path:
    data = os.environ.get("GPUAWARE_SHARED_DATA")
    shared = Path(data).parent if data else REPO_ROOT.parent / "shared"
    return shared / "k8s"


@pytest.fixture(scope="session")
def k8s_facts() -> Path:
    """`../shared/k8s` (next to GPUAWARE_SHARED_DATA's parent when set); skips when absent."""
    path = _facts_dir()
    if not (path / "telemetry").is_dir():
        pytest.skip(f"shared k8s facts not found at {path}")
    return path


@pytest.fixture(scope="session")
def dcgm_sample(k8s_facts: Path) -> str:
    return (k8s_facts / "telemetry" / "dcgm-exporter-metrics.txt").read_text()


@pytest.fixture(scope="session")
def dcgm_mig_sample(k8s_facts: Path) -> str:
    return (k8s_facts / "telemetry" / "dcgm-exporter-metrics-mig.txt").read_text()
