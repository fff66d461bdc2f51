"""How a rendered pod becomes a process (``chart_processes``), on small hand-written manifests: the
kubelet's ``$(VAR)`` expansion, Secret / ConfigMap / fieldRef references, the entrypoint's module from
the one list of processes, and the only things mapped — ports, host names, mounted files."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest
from chart_processes import ChartRunError, External, Rendered, expand, plan_pods

from gpuaware.schemas import processes_by_image

NS = "ns1"


@pytest.mark.parametrize("text, expected", [
    ("$(A)-x", "1-x"),            # defined: replaced
    ("$(MISSING)", "$(MISSING)"),  # undefined: kept as written
    ("$$(A)", "$(A)"),             # escaped
    ("$$$(A)", "$1"),              # an escaped dollar, then a reference
    ("a$b", "a$b"),                # not a reference
])
def test_expand_as_the_kubelet_does(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def _deployment(name: str, env: list[dict[str, Any]], **container: Any) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {"kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": name, "image": "ghcr.io/gpuaware/quota:1", "env": env, **container}]}}}}


def _rendered() -> Rendered:
    secret = {"kind": "Secret", "metadata": {"name": "creds"},
              "data": {"password": base64.b64encode(b"s3cret").decode()},
              "stringData": {"url": "postgresql://u:p@db.example.svc:5432/gpu"}}
    config = {"kind": "ConfigMap", "metadata": {"name": "tree"}, "data": {"tree.yaml": "queues: []\n"}}
    server = _deployment("server", [
        {"name": "X_METRICS_PORT", "value": "9464"},
        {"name": "X_TREE", "value": "/etc/tree/tree.yaml"},
        {"name": "X_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "url"}}},
        {"name": "X_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "X_WHO", "value": "$(X_POD)@$(X_NOPE)"},
    ], ports=[{"name": "metrics", "containerPort": 9464}],
        volumeMounts=[{"name": "tree", "mountPath": "/etc/tree"}])
    server["spec"]["template"]["spec"]["volumes"] = [{"name": "tree", "configMap": {"name": "tree"}}]
    service = {"kind": "Service", "metadata": {"name": "server-metrics", "namespace": NS},
               "spec": {"selector": {"app.kubernetes.io/name": "server"},
                        "ports": [{"port": 80, "targetPort": "metrics"}]}}
    client = _deployment("client", [{"name": "NATS_URL", "value": "nats://nats.nats.svc:4222"},
                                    {"name": "X_SCRAPE", "value": "http://server-metrics.ns1.svc/metrics"}],
                         args=["agent"])
    agent = {"kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"template": {"spec": {"containers": [
        {"name": "agent", "image": "ghcr.io/gpuaware/telemetry:1", "env": [
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "URL", "value": "http://localhost:9464/metrics/$(NODE)"}]}]}}}}
    job = {"kind": "Job", "metadata": {"name": "setup"}, "spec": {"template": {"spec": {"containers": [
        {"name": "setup", "image": "ghcr.io/gpuaware/provision:1", "command": ["python", "-c"],
         "args": ["print('$(A)')"], "env": [{"name": "A", "value": "1"}]}]}}}}
    return Rendered([secret, config, server, service, client, agent, job], NS)


EXTERNALS = [External("nats", ("nats", "tls"), 14222), External("postgresql", ("postgresql",), 15432)]


def test_each_pod_runs_its_image_entrypoint_with_the_resolved_environment(tmp_path: Path) -> None:
    ports: dict[tuple[str, int], int] = {}
    pods = {p.pod: p for p in plan_pods(_rendered(), externals=EXTERNALS, nodes=["n1", "n2"], root=tmp_path,
                                        ports=ports)}
    # the Job first, its own command (python is this interpreter), its args expanded
    assert next(iter(pods)) == "setup-0"
    assert pods["setup-0"].argv == [sys.executable, "-c", "print('1')"]
    server, client = pods["server-0"], pods["client-0"]
    assert server.argv == [sys.executable, "-m", processes_by_image()["quota"]]
    assert client.argv[-1] == "agent"
    # Secret (data and stringData), fieldRef, $(VAR) against the variables before it
    assert server.env["X_PASSWORD"] == "s3cret" and server.env["X_WHO"] == "server-0@$(X_NOPE)"
    # the listening port moved, the setting names the new one; the database URL points at the local server
    local = server.ports[9464]
    assert local != 9464 and server.env["X_METRICS_PORT"] == str(local)
    assert server.env["DATABASE_URL"] == "postgresql://u:p@127.0.0.1:15432/gpu"
    # the mounted ConfigMap is a file, and the path in the environment names it
    assert Path(server.env["X_TREE"]).read_text() == "queues: []\n"
    # a Service's DNS name reaches the pod it selects; an external NATS the local one
    assert client.env["X_SCRAPE"] == f"http://127.0.0.1:{local}/metrics"
    assert client.env["NATS_URL"] == "nats://127.0.0.1:14222"
    # one DaemonSet pod per node, its node name from spec.nodeName; localhost:9464, which it does not
    # listen on, is the one pod that does (as a node-local exporter would be)
    assert [pods[f"agent-{n}"].env["NODE"] for n in ("n1", "n2")] == ["n1", "n2"]
    assert pods["agent-n1"].env["URL"] == f"http://127.0.0.1:{local}/metrics/n1"
    # planning again (nodes known later) maps the running pods the same way
    again = {p.pod: p for p in plan_pods(_rendered(), externals=EXTERNALS, nodes=["n1"], root=tmp_path,
                                         ports=ports)}
    assert again["server-0"].ports == server.ports


def test_a_host_nothing_plays_is_an_error_naming_it(tmp_path: Path) -> None:
    rendered = Rendered([_deployment("lost", [{"name": "U", "value": "http://elsewhere.example:8080/x"}])], NS)
    with pytest.raises(ChartRunError, match=r"elsewhere\.example:8080"):
        plan_pods(rendered, externals=EXTERNALS, nodes=[], root=tmp_path, ports={})


def test_a_missing_secret_key_or_image_is_an_error(tmp_path: Path) -> None:
    rendered = Rendered([{"kind": "Secret", "metadata": {"name": "s"}, "data": {}},
                         _deployment("x", [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])], NS)
    with pytest.raises(ChartRunError, match="key 'k' of Secret s"):
        plan_pods(rendered, externals=EXTERNALS, nodes=[], root=tmp_path, ports={})
    unknown = _deployment("y", [])
    unknown["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/gpuaware/nothing:1"
    with pytest.raises(ChartRunError, match="'nothing' is not an image"):
        plan_pods(Rendered([unknown], NS), externals=EXTERNALS, nodes=[], root=tmp_path, ports={})
