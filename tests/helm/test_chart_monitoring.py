"""The chart's Prometheus wiring: every workload serves /metrics on the metrics port (container port +
the service's METRICS_PORT/ADDR), a headless Service per workload for the scrape, a NetworkPolicy that
lets only the scraping namespaces in, and, for the Prometheus Operator, a ServiceMonitor selecting those
Services and a PrometheusRule with exactly deploy/prometheus/rules.yaml's groups."""

from __future__ import annotations

import json

import kubernetes_validate
import yaml
from chart_helpers import CHART, K8S_VERSION, REPO, render

from gpuaware.k8s import chart as gen

PREFIX = {"placement": "GPUAWARE_PLACEMENT_", "binder": "GPUAWARE_BINDER_",
          "telemetry-collector": "GPUAWARE_TELEMETRY_COLLECTOR_", "health-scoring": "GPUAWARE_HEALTH_SCORING_",
          "quota": "GPUAWARE_QUOTA_", "forecasting": "GPUAWARE_FORECASTING_",
          "telemetry-agent": "GPUAWARE_TELEMETRY_AGENT_"}


def test_the_rules_file_is_current() -> None:
    assert (CHART / "files" / "prometheus-rules.yaml").read_text() == gen.prometheus_rules(REPO), (
        "helm/gpuaware/files/prometheus-rules.yaml is stale: run `python -m gpuaware.k8s.chart helm/gpuaware`")


def test_every_workload_serves_metrics_and_is_scraped() -> None:
    docs = render({"metrics": {"scrapeFromNamespaces": ["monitoring"], "serviceMonitor": {"enabled": True},
                               "prometheusRule": {"enabled": True}}})
    workloads = {d["metadata"]["name"].removeprefix("gpuaware-"): d for d in docs
                 if d["kind"] in ("Deployment", "DaemonSet")}
    assert set(PREFIX) <= set(workloads), sorted(workloads)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for name, prefix in PREFIX.items():
        c = workloads[name]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        assert ports["metrics"] == 9464 and env[f"{prefix}METRICS_PORT"] == "9464", name
        assert env[f"{prefix}METRICS_ADDR"] == "0.0.0.0", name
        svc = services[f"gpuaware-{name}-metrics"]
        assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["labels"]["gpuaware.io/metrics"] == "true"
        pod_labels = workloads[name]["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items(), name
        kubernetes_validate.validate(svc, K8S_VERSION, strict=True)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "gpuaware-metrics")
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    rule = policy["spec"]["ingress"][0]
    assert rule["ports"] == [{"port": 9464, "protocol": "TCP"}]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"]["gpuaware.io/metrics"] == "true"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    prom_rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert prom_rule["spec"] == yaml.safe_load((REPO / "deploy" / "prometheus" / "rules.yaml").read_text())


def test_metrics_off_means_no_port_no_service_no_operator_objects() -> None:
    docs = render({"metrics": {"enabled": False}})
    assert not [d for d in docs if d["kind"] in ("Service", "ServiceMonitor", "PrometheusRule")
                and "metrics" in d["metadata"]["name"]]
    for d in docs:
        for c in (d.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or ()):
            assert not any(e["name"].endswith("METRICS_PORT") for e in c.get("env", [])), d["metadata"]["name"]
            assert "metrics" not in {p["name"] for p in c.get("ports", [])}


def test_grafana_dashboards_ship_as_sidecar_configmaps() -> None:
    files = {p.name: p.read_text() for p in sorted((CHART / "files" / "dashboards").glob("*.json"))}
    assert files == gen.grafana_dashboards(REPO), (
        "helm/gpuaware/files/dashboards is stale: run `python -m gpuaware.k8s.chart helm/gpuaware`")
    assert not [d for d in render() if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
    docs = [d for d in render({"grafanaDashboards": {"enabled": True}})
            if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
    assert len(docs) == len(files) == 5
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        assert d["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = d["data"].items()
        assert json.loads(text) == json.loads(files[name])  # the dashboard, intact
