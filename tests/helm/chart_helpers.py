"""Rendering the chart with the real Helm engine (helm-python-sdk's libhelm), for tests/helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "gpuaware"
K8S_VERSION = "1.35.0"
PROFILES = ["default", *sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))]


def render(values: dict[str, Any] | None = None, profile: str = "default") -> list[dict[str, Any]]:
    v = {} if profile == "default" else yaml.safe_load((CHART / "ci" / f"{profile}-values.yaml").read_text())
    _merge(v, values or {})
    chart = Chart.load(CHART)
    out = chart.render(v, name="gpuaware", namespace="gpuaware-system", is_install=True)
    return [d for text in out.values() for d in yaml.safe_load_all(text) if d]


def _merge(a: dict[str, Any], b: dict[str, Any]) -> None:
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v
