"""The chart's generated files: CRDs (``crds.py``), the processes (``schemas.processes``) and the NATS
permissions (``schemas.permissions``).

Why generated, not templated: Helm cannot run Python, and both are defined once in Python (the
Structs behind the CRDs, the per-service subject permissions). ``python -m gpuaware.k8s.chart``
writes ``helm/gpuaware/crds/*.yaml``, ``helm/gpuaware/files/processes.json`` (every workload the
chart deploys, which its templates range over), ``helm/gpuaware/files/nats-permissions.json`` (one user
per process's identity) and a copy of the
alert rules (``deploy/prometheus/rules.yaml`` -> ``files/prometheus-rules.yaml``) and of the Grafana
dashboards (``deploy/grafana/dashboards`` -> ``files/dashboards``); the chart's
template renders nats-server's ``authorization`` block from that file with each user's password taken
from the environment (``$NATS_PASSWORD_<IDENTITY>``, from a Secret); tests/helm checks the files are
what this module generates now. Cluster-specific subjects (durables named after the cluster) carry
the placeholder ``gpuaware-chart-cluster``, which the templates replace with ``.Values.cluster``: a name
the subject-token rule leaves as it is (so does it a cluster name the values schema accepts, a DNS
label), hence the same text in every durable built from it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuaware.k8s import crds

__all__ = ["CLUSTER_PLACEHOLDER", "generate", "nats_permissions", "processes", "render_processes"]

CLUSTER_PLACEHOLDER = "gpuaware-chart-cluster"


def nats_permissions() -> dict[str, Any]:
    """One NATS user per identity of the list of processes (admin included: the provisioning's)."""
    from gpuaware.schemas import ADMIN, PROCESSES, permissions_for

    identities = dict.fromkeys([ADMIN, *(p.identity for p in PROCESSES)])
    return {i: permissions_for(i, cluster=CLUSTER_PLACEHOLDER).as_nats() for i in identities}


def processes() -> dict[str, Any]:
    """The list of processes as the chart reads it: ``processes`` (each entry's fields, its database
    login, the streams it consumes and the subjects it may publish) and ``images`` (image -> module,
    what a harness starting the rendered containers looks a module up in)."""
    import msgspec

    from gpuaware.schemas import PROCESSES, processes_by_image

    out = []
    for p in PROCESSES:
        entry = msgspec.to_builtins(p)
        entry["database_login"] = p.database_login
        entry["secret_variable"] = p.secret_variable
        entry["consumes"] = msgspec.to_builtins(p.consumes(CLUSTER_PLACEHOLDER))
        entry["publishes"] = list(p.publishes(CLUSTER_PLACEHOLDER))
        out.append(entry)
    return {"processes": out, "images": processes_by_image()}


def render_processes() -> str:
    return json.dumps(processes(), indent=1) + "\n"


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
    listed = chart / "files" / "processes.json"
    listed.write_text(render_processes())
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
    return [*out, f, listed, rules, *written]


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1] if len(sys.argv) > 1 else "helm/gpuaware")):
        print(p)
