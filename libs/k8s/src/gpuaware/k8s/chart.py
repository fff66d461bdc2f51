"""The chart's generated files: CRDs (``crds.py``) and the NATS permissions (``schemas.permissions``).

Why generated, not templated: Helm cannot run Python, and both are defined once in Python (the
Structs behind the CRDs, the per-service subject permissions). ``python -m gpuaware.k8s.chart``
writes ``helm/gpuaware/crds/*.yaml``, ``helm/gpuaware/files/nats-permissions.json`` and a copy of the
alert rules (``deploy/prometheus/rules.yaml`` -> ``files/prometheus-rules.yaml``) and of the Grafana
dashboards (``deploy/grafana/dashboards`` -> ``files/dashboards``); the chart's
template renders nats-server's ``authorization`` block from that file with each user's password taken
from the environment (``$NATS_PASSWORD_<IDENTITY>``, from a Secret); tests/helm checks the files are
what this module generates now. Cluster-specific subjects (durables named after the cluster) carry
the placeholder ``__CLUSTER__``, which the template replaces with ``.Values.cluster``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuaware.k8s import crds

__all__ = ["CLUSTER_PLACEHOLDER", "generate", "nats_permissions"]

CLUSTER_PLACEHOLDER = "__CLUSTER__"


def nats_permissions() -> dict[str, Any]:
    from gpuaware.schemas import IDENTITIES, permissions_for

    return {i: permissions_for(i, cluster=CLUSTER_PLACEHOLDER).as_nats() for i in IDENTITIES}


def render_permissions() -> str:
    return json.dumps(nats_permissions(), indent=1, sort_keys=True) + "\n"


def prometheus_rules(repo: Path) -> str:
    """The alert rules the chart ships as a PrometheusRule: ``deploy/prometheus/rules.yaml``, verbatim
    (Helm reads only files inside the chart)."""
    return (repo / "deploy" / "prometheus" / "rules.yaml").read_text()


def grafana_dashboards(repo: Path) -> dict[str, str]:
    """The Grafana dashboards the chart ships as ConfigMaps: ``deploy/grafana/dashboards/*.json``, verbatim."""
    return {p.name: p.read_text() for p in sorted((repo / "deploy" / "grafana" / "dashboards").glob("*.json"))}


def generate(chart: Path) -> list[Path]:
    out = crds.write(chart / "crds")
    f = chart / "files" / "nats-permissions.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(render_permissions())
    repo = chart.resolve().parents[1]
    rules = chart / "files" / "prometheus-rules.yaml"
    rules.write_text(prometheus_rules(repo))
    boards = chart / "files" / "dashboards"
    boards.mkdir(exist_ok=True)
    for stale in boards.glob("*.json"):
        stale.unlink()
    written = []
    for name, text in grafana_dashboards(repo).items():
        (boards / name).write_text(text)
        written.append(boards / name)
    return [*out, f, rules, *written]


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1] if len(sys.argv) > 1 else "helm/gpuaware")):
        print(p)
