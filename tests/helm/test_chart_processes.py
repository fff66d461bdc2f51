"""The chart deploys exactly the list of processes (``gpuaware.schemas.PROCESSES``), each workload runs
its entry's module from its entry's image, and no workload holds a credential its entry does not name:
its own NATS identity only, its own database login only (none without a database role, the owner's DSN
for the provisioning alone), a ServiceAccount token only where it calls the Kubernetes API."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_helpers import CHART, PROFILES, render

from gpuaware.schemas import PROCESSES, PROVISION, process_named, processes_by_image

EVERYTHING = {"database": {"url": "postgresql://owner:secret@db.example:5432/gpuaware"},
              "alertBridge": {"alertmanagerUrl": "http://alertmanager.monitoring.svc:9093"}}
"""values that deploy every entry of the list"""
WORKLOADS = ("Deployment", "DaemonSet", "Job")


def _workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """name (without the release prefix) -> workload, for the list's workloads (not kube-scheduler's)."""
    return {d["metadata"]["name"].removeprefix("gpuaware-"): d for d in docs
            if d["kind"] in WORKLOADS and d["metadata"]["name"] != "gpuaware-kube-scheduler"}


def _secret_refs(workload: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret, key) of every secretKeyRef of its containers, and (Secret, "*") of secret volumes."""
    pod = workload["spec"]["template"]["spec"]
    refs = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for c in pod["containers"] for e in c.get("env") or () if "secretKeyRef" in (e.get("valueFrom") or {})}
    return refs | {(v["secret"]["secretName"], "*") for v in pod.get("volumes") or () if "secret" in v}


def test_the_chart_deploys_exactly_the_list() -> None:
    docs = render(EVERYTHING)
    workloads = _workloads(docs)
    assert set(workloads) == {p.name for p in PROCESSES}
    images = processes_by_image()
    for name, d in workloads.items():
        entry = process_named(name)
        assert d["kind"] == entry.kind, name
        (c,) = d["spec"]["template"]["spec"]["containers"]
        image = c["image"].rsplit("/", 1)[1].split(":")[0]
        assert image == entry.image and images[image] == entry.module, name  # a harness finds its module
        assert "command" not in c and tuple(c.get("args") or ()) == entry.args, name  # the image's entrypoint
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env[f"{entry.env_prefix}CLUSTER"] == "default", name  # its settings' prefix


@pytest.mark.parametrize("profile", PROFILES)
def test_no_workload_holds_a_credential_it_does_not_need(profile: str) -> None:
    docs = render(EVERYTHING, profile=profile)
    workloads = _workloads(docs)
    values = {} if profile == "default" else yaml.safe_load((CHART / "ci" / f"{profile}-values.yaml").read_text())
    owner = (values.get("database") or {}).get("existingSecret") or "gpuaware-database"
    deployed_roles = {p.name for p in PROCESSES if p.database_role and p.name in workloads}
    for name, d in workloads.items():
        entry = process_named(name)
        pod = d["spec"]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        allowed = {("gpuaware-nats-credentials", entry.identity)}
        if entry.database_role:
            allowed.add((f"gpuaware-db-{name}", "url"))
        if entry.database_owner:
            allowed |= {(owner, "url"), *((f"gpuaware-db-{r}", "password") for r in deployed_roles)}
        if name == "binder":
            allowed.add(("gpuaware-webhook-tls", "*"))
        refs = _secret_refs(d)
        assert refs <= allowed, (profile, name, refs - allowed)
        assert env["NATS_USER"]["value"] == entry.identity, (profile, name)
        has_db = "DATABASE_URL" in env
        assert has_db == bool(entry.database_role or entry.database_owner), (profile, name)
        assert pod.get("automountServiceAccountToken") is not None, (profile, name)
        if not entry.kubernetes_api:
            assert pod["automountServiceAccountToken"] is False, (profile, name)
    for name in ("telemetry-agent", "alert-bridge"):
        assert not any(s.startswith("gpuaware-db") or s == owner for s, _ in _secret_refs(workloads[name])), name


def test_a_twin_binder_needs_no_kubernetes_api() -> None:
    docs = render({"binder": {"enabled": True, "replicas": 1, "world": "twin"},
                   "placement": {"enabled": True, "replicas": 1, "leaderElection": "nats", "policySource": "settings"},
                   "quota": {"enabled": True, "replicas": 1, "treeSource": "file"}})
    workloads = _workloads(docs)
    for name in ("binder", "placement", "quota"):
        assert workloads[name]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, name
    env = {e["name"]: e.get("value") for e in workloads["binder"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUAWARE_BINDER_WORLD"] == "twin" and "GPUAWARE_BINDER_LEADER_ELECTION" not in env
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                        "ValidatingWebhookConfiguration"}, kinds


def test_the_alert_bridge_is_deployed_only_with_an_alertmanager() -> None:
    assert "alert-bridge" not in _workloads(render())
    docs = render({"alertBridge": {"alertmanagerUrl": "http://am:9093", "replicas": 1,
                                   "webhook": {"enabled": True, "port": 8080}}})
    bridge = _workloads(docs)["alert-bridge"]
    c = bridge["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GPUAWARE_ALERT_BRIDGE_ALERTMANAGER_URL"] == "http://am:9093"
    assert env["GPUAWARE_ALERT_BRIDGE_LISTEN_PORT"] == "8080" and env["GPUAWARE_ALERT_BRIDGE_WEBHOOK"] == "true"
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gpuaware-alert-bridge")
    assert svc["spec"]["selector"] == bridge["spec"]["selector"]["matchLabels"]


def test_the_provisioning_is_the_lists_job() -> None:
    (job,) = [d for d in render(EVERYTHING) if d["kind"] == "Job"]
    assert job["metadata"]["name"] == f"gpuaware-{PROVISION}"


def test_leader_elected_processes_run_two_replicas_behind_a_disruption_budget() -> None:
    """Each process whose replicas elect a leader runs two by default (one leads, one stands by) and a
    PodDisruptionBudget keeps one of them up through a voluntary disruption (a node drain)."""
    leased = {p.name for p in PROCESSES if p.leader_lease}
    assert {"placement", "health-scoring", "forecasting", "quota"} <= leased
    docs = render(EVERYTHING)
    workloads = _workloads(docs)
    budgets = {d["metadata"]["name"].removeprefix("gpuaware-"): d["spec"] for d in docs
               if d["kind"] == "PodDisruptionBudget"}
    for name in sorted(leased):
        assert workloads[name]["spec"]["replicas"] == 2, name
        assert budgets[name].get("minAvailable") == 1 and "maxUnavailable" not in budgets[name], name
    # one replica asked for: the budget lets the single pod go (it would block every drain otherwise)
    one = render({"healthScoring": {"enabled": True, "replicas": 1}})
    budget = next(d["spec"] for d in one if d["kind"] == "PodDisruptionBudget"
                  and d["metadata"]["name"] == "gpuaware-health-scoring")
    assert budget == {**budget, "maxUnavailable": 1} and "minAvailable" not in budget
