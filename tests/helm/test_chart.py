"""The chart, rendered by the real Helm engine (helm-python-sdk's libhelm), for the default values and
each documented profile: every manifest and CRD validates with kubernetes-validate; the generated
files are current; the NATS authorization block is one nats-server accepts and grants exactly
schemas.permissions; each service's RBAC is exactly what its code calls; values.schema.json refuses
bad values; the KubeSchedulerConfiguration obeys kube-scheduler's own validation rules."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_helpers import CHART, K8S_VERSION, PROFILES, REPO, render
from helm_python import Chart
from helm_python.errors import HelmError

from gpuaware import k8s
from gpuaware.k8s import api as k8s_api
from gpuaware.k8s import chart as gen
from gpuaware.k8s.crds import all_crds
from gpuaware.k8s.extender import VERBS
from gpuaware.schemas import PROCESSES, PROVISION, permissions, process_named


@pytest.fixture(scope="module", params=PROFILES)
def manifests(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield request.param, render(profile=request.param)


def test_documented_profiles_exist() -> None:
    assert set(PROFILES) >= {"default", "extender", "bundled", "dcgm"}
    readme = (REPO / "README.md").read_text() + (REPO / "helm" / "README.md").read_text()
    for p in PROFILES[1:]:
        assert f"ci/{p}-values.yaml" in readme, f"profile {p} is not documented"


def test_every_manifest_validates(manifests: tuple[str, list[dict[str, Any]]]) -> None:
    profile, docs = manifests
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy"} <= kinds, profile
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert {f"gpuaware-{s}" for s in ("placement", "binder", "telemetry-collector", "health-scoring", "quota")} \
        <= deployments, profile
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    for d in docs:
        for c in (d.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or ()):
            sc = c.get("securityContext") or {}
            if d["metadata"]["name"].endswith(("-postgres",)):
                continue
            assert sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False, d["metadata"]


def test_crds_validate_and_are_current() -> None:
    assert len(Chart.load(CHART).crds) == 3  # Helm sees them as the chart's CRDs (installed first)
    files = {p.name: yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))}
    generated = json.loads(json.dumps({f"{c['metadata']['name']}.yaml": c for c in all_crds()}))  # tuples -> lists
    assert files == generated, "helm/gpuaware/crds is stale: run `python -m gpuaware.k8s.chart helm/gpuaware`"
    for crd in files.values():
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        _assert_structural(version["schema"]["openAPIV3Schema"], crd["metadata"]["name"])
    perms = json.loads((CHART / "files" / "nats-permissions.json").read_text())
    assert perms == json.loads(gen.render_permissions()), \
        "helm/gpuaware/files/nats-permissions.json is stale: run `python -m gpuaware.k8s.chart helm/gpuaware`"
    listed = json.loads((CHART / "files" / "processes.json").read_text())
    assert listed == json.loads(gen.render_processes()), \
        "helm/gpuaware/files/processes.json is stale: run `python -m gpuaware.k8s.chart helm/gpuaware`"


def _assert_structural(s: dict[str, Any], where: str) -> None:
    """Kubernetes' structural-schema rules we can break: a type everywhere (or preserve-unknown-fields),
    no $ref / anyOf at the top of a node, properties and additionalProperties never together."""
    assert "$ref" not in s and "anyOf" not in s and "$defs" not in s, where
    assert "type" in s or s.get("x-kubernetes-preserve-unknown-fields"), where
    assert not ("properties" in s and "additionalProperties" in s), where
    for k, v in (s.get("properties") or {}).items():
        _assert_structural(v, f"{where}.{k}")
    if isinstance(s.get("additionalProperties"), dict):
        _assert_structural(s["additionalProperties"], f"{where}.*")
    if "items" in s:
        _assert_structural(s["items"], f"{where}[]")


def _openapi_to_jsonschema(s: Any) -> Any:
    """OpenAPI v3.0 (nullable, boolean exclusiveMinimum) as draft-4 JSON Schema, to check sample objects."""
    if isinstance(s, list):
        return [_openapi_to_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _openapi_to_jsonschema(v) for k, v in s.items() if not k.startswith("x-kubernetes")}
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    return out


@pytest.mark.parametrize(("kind", "obj", "error"), [
    ("gpuqueues", {"name": "team-a", "parent": "root", "guaranteed": {"A100": {"gpus": 8}}, "weight": 2.0}, None),
    ("gpuqueues", {"name": "team-a", "guaranteed": {"A100": {"gpus": -1}}}, "-1 is less than the minimum of 0"),
    ("gpuqueues", {"name": "team-a", "weight": 0}, "less than or equal to the minimum of 0"),
    ("gpuqueues", {"parent": "root"}, "'name' is a required property"),
    ("gpupolicies", {"score": [{"name": "waste-gradient", "weight": 1000}], "gpu": "fgd"}, None),
    ("gpupolicies", {"gpu": "fgd"}, "'score' is a required property"),
    ("gpugangs", {"minMember": 4, "topology": "same-nvlink-island"}, None),
    ("gpugangs", {"minMember": 0}, "0 is less than the minimum of 1"),
    ("gpugangs", {"minMember": 2, "maxMember": 6}, None),
    ("gpugangs", {"minMember": 2, "maxMember": 0}, "0 is less than the minimum of 1"),
    ("gpugangs", {"minMember": 2, "maxMember": "six"}, "'six' is not of type 'integer'"),
])
def test_crd_schema_accepts_and_refuses_with_the_reason(kind: str, obj: dict[str, Any], error: str | None) -> None:
    crd = yaml.safe_load((CHART / "crds" / f"{kind}.gpuaware.io.yaml").read_text())
    schema = _openapi_to_jsonschema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    doc = {"apiVersion": "gpuaware.io/v1alpha1", "kind": crd["spec"]["names"]["kind"], "metadata": {"name": "x"},
           "spec": obj}
    errors = sorted(e.message for e in jsonschema.Draft4Validator(schema).iter_errors(doc))
    if error is None:
        assert errors == []
    else:
        assert any(error in e for e in errors), errors


def test_values_schema_refuses_bad_values_with_the_path() -> None:
    for bad, path in [({"telemetryAgent": {"enabled": True, "backend": "magic"}}, "/telemetryAgent/backend"),
                      ({"extender": {"enabled": True, "weight": 0}}, "/extender/weight"),
                      ({"cluster": "Not A DNS Name"}, "/cluster"),
                      ({"placement": {"enabled": True, "replicas": 2, "colour": "blue"}}, "colour")]:
        with pytest.raises(HelmError, match=re.escape(path)):
            render(bad)


def test_nats_authorization_is_accepted_by_nats_server_and_grants_exactly_the_contract() -> None:
    from gpuaware.devstack.nats import nats_server_binary

    docs = render({"cluster": "east-1"})
    conf = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("nats-authorization"))
    text = conf["data"]["auth.conf"]
    users = dict(re.findall(r'\{user: "([^"]+)", password: \$NATS_PASSWORD_\w+, permissions: (\{.*\})\}', text))
    assert set(users) == set(permissions.IDENTITIES)
    for identity, perms in users.items():
        assert json.loads(perms) == permissions.permissions_for(identity, cluster="east-1").as_nats(), identity
    assert "\\u003e" not in text  # Go's HTML escaping would not be read back by nats-server
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpuaware-auth-{os.getpid()}.conf"
    path.write_text(text)
    try:
        env = {**os.environ, **{"NATS_PASSWORD_" + i.upper().replace("-", "_"): "pw" for i in permissions.IDENTITIES}}
        ok = subprocess.run([str(nats_server_binary()), "-c", str(path), "-t"], capture_output=True, text=True, env=env)
        assert ok.returncode == 0, ok.stderr
        env.pop("NATS_PASSWORD_BINDER")
        missing = subprocess.run([str(nats_server_binary()), "-c", str(path), "-t"], capture_output=True, text=True,
                                 env=env)
        assert missing.returncode != 0  # the password really comes from the environment
    finally:
        path.unlink()
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("nats-credentials"))
    assert set(secret["data"]) == set(permissions.IDENTITIES)


# -- RBAC: exactly what each service's code calls ------------------------------------------------


def _defining_module(name: str) -> str:
    """The gpuaware.k8s module that defines a name the package exports (the module itself if it is one)."""
    obj = getattr(k8s, name)
    if inspect.ismodule(obj):
        return obj.__name__.removeprefix("gpuaware.k8s.")
    module = getattr(obj, "__module__", None)  # constants (names, strings) have none and call nothing
    return module.removeprefix("gpuaware.k8s.").split(".")[0] if isinstance(module, str) else ""


def _calls_in(files: list[Path]) -> tuple[set[str], set[str]]:
    """(gpuaware.k8s.api functions called, other gpuaware.k8s modules imported) in these sources."""
    used: set[str] = set()
    modules: set[str] = set()
    for f in files:
        tree = ast.parse(f.read_text())
        aliases = {"api"} if f.parent.name == "k8s" else set()
        direct: dict[str, str] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "gpuaware":  # `from gpuaware import k8s`
                aliases |= {a.asname or a.name for a in n.names if a.name == "k8s"}
            elif isinstance(n, ast.ImportFrom) and n.module == "gpuaware.k8s":
                for a in n.names:
                    if a.name == "api":
                        aliases.add(a.asname or a.name)
                    elif a.name in k8s_api.RULES:  # an API call exported by the package
                        direct[a.asname or a.name] = a.name
                    else:  # the module that defines the exported name (e.g. KubeLeaderLease: election)
                        modules.add(_defining_module(a.name))
            elif isinstance(n, ast.ImportFrom) and n.module == "gpuaware.k8s.api":
                direct |= {a.asname or a.name: a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("gpuaware.k8s."):
                modules.add(n.module.split(".")[2])
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases:
                used.add(n.attr)
            if isinstance(n, ast.Name) and n.id in direct:
                used.add(direct[n.id])
    return {u for u in used if u in k8s_api.RULES}, modules


def _api_calls(package: Path, skip: tuple[str, ...] = ()) -> set[str]:
    """The gpuaware.k8s.api functions a service's code calls, directly or through a gpuaware.k8s module
    it imports (e.g. election -> lease_get / lease_write); files named in `skip` are left out (code
    paths the profile turns off)."""
    files = [f for f in package.rglob("*.py") if f.name not in skip]
    used, modules = _calls_in(files)
    lib = REPO / "libs" / "k8s" / "src" / "gpuaware" / "k8s"
    for m in modules - {"api"}:
        if (lib / f"{m}.py").is_file():
            used |= _calls_in([lib / f"{m}.py"])[0]
    return used


def _expand(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


SERVICES = {"placement": "placement", "binder": "binder", "telemetry-collector": "telemetry",
            "telemetry-agent": "telemetry", "health-scoring": "health_scoring", "quota": "quota"}


def _granted(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """Rules each ServiceAccount is granted, through (Cluster)RoleBindings."""
    roles = {(d["kind"], d["metadata"]["name"]): _expand(d["rules"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out: dict[str, set[tuple[str, str, str]]] = {}
    for d in docs:
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            rules = roles.get((d["roleRef"]["kind"], d["roleRef"]["name"]))
            if rules is None:  # a built-in role (the kube-scheduler's)
                continue
            for sub in d["subjects"]:
                out.setdefault(sub["name"].removeprefix("gpuaware-"), set()).update(rules)
    return out


NO_CRDS = {"placement": {"policySource": "settings"}, "quota": {"treeSource": "file"}}
"""quota's tree and placement's profile from files / settings instead of GPUQueue / GPUPolicy objects"""


@pytest.mark.parametrize(("profile", "values"), [
    ("default", {}), ("extender", {}), ("default", {"placement": {"leaderElection": "nats"}}),
    ("default", {"placement": {"leaderElection": "nats", "policySource": "settings"}, "quota": {"treeSource": "file"}}),
    ("default", {"power": {"enabled": True}}),
])
def test_each_service_rbac_is_what_its_code_calls(profile: str, values: dict[str, Any]) -> None:
    docs = render(values, profile=profile)
    granted = _granted(docs)
    k8s_election = values.get("placement", {}).get("leaderElection", "kubernetes") == "kubernetes"
    policy_crd = values.get("placement", {}).get("policySource", "crd") == "crd"
    tree_crd = values.get("quota", {}).get("treeSource", "crd") == "crd"
    for account, pkg in SERVICES.items():
        skip: tuple[str, ...] = ()
        if account == "placement":  # config-dependent code paths of placement
            skip = (*(() if profile == "extender" else ("extender_http.py",)),
                    *(() if k8s_election else ("handlers.py",)), *(() if policy_crd else ("crd_policy.py",)))
        if account == "quota" and not tree_crd:
            skip = ("crd_tree.py",)
        if account == "binder" and not values.get("power", {}).get("enabled", False):
            skip = ("kube_power.py",)  # the binder's only node write: granted with node power only
        calls = _api_calls(REPO / "services" / pkg / "src", skip)
        if account in ("telemetry-collector", "telemetry-agent", "health-scoring") or skip == ("crd_tree.py",):
            assert calls == set(), account
        need = {r for c in calls for r in k8s_api.RULES[c]}
        assert granted.get(account, set()) == need, (account, profile, values, calls)
    assert _api_calls(REPO / "services" / "binder" / "src") >= {"bind", "evict", "pod_source", "node_source"}
    assert _api_calls(REPO / "services" / "placement" / "src") >= {"bind", "lease_get", "lease_write", "policy_source",
                                                                   "patch_policy_status"}
    assert _api_calls(REPO / "services" / "quota" / "src") == {"queue_source", "patch_queue_status"}


@pytest.mark.parametrize(("profile", "values", "callers"), [
    ("default", {}, {"binder", "placement", "quota"}),  # placement: its Lease and GPUPolicy; quota: GPUQueues
    ("extender", {}, {"binder", "placement", "quota"}),  # (and the extender's bind)
    ("default", {**NO_CRDS, "placement": {"leaderElection": "nats", "policySource": "settings"}}, {"binder"}),
])
def test_service_accounts_mount_tokens_only_where_the_api_is_called(profile: str, values: dict[str, Any],
                                                                   callers: set[str]) -> None:
    for d in render(values, profile=profile):
        if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"]["name"] != "gpuaware-kube-scheduler":
            pod = d["spec"]["template"]["spec"]
            name = d["metadata"]["name"].removeprefix("gpuaware-")
            assert pod.get("automountServiceAccountToken") is (name in callers), (profile, name)


def test_crd_sources_are_the_chart_default_and_reach_the_services() -> None:
    deployments = {d["metadata"]["name"]: d for d in render() if d["kind"] == "Deployment"}

    def env(name: str) -> dict[str, Any]:
        return {e["name"]: e.get("value") for e in deployments[name]["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert env("gpuaware-quota")["GPUAWARE_QUOTA_TREE_SOURCE"] == "crd"
    assert env("gpuaware-placement")["GPUAWARE_PLACEMENT_POLICY_SOURCE"] == "crd"
    with pytest.raises(HelmError, match=re.escape("quota.treeSource: file")):
        render({"quota": {"tree": {"queues": [{"name": "a"}]}}})  # a tree file with GPUQueues: one or the other
    with pytest.raises(HelmError, match=re.escape("/quota/treeSource")):
        render({"quota": {"treeSource": "configmap"}})


# -- the kube-scheduler configuration ----------------------------------------------------------------

_EXTENDED = re.compile(r"^(?!kubernetes\.io/|requests\.)[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _check_scheduler_config(cfg: dict[str, Any]) -> None:
    """kube-scheduler's validateExtenders (extender-protocol.md section 3) and our server's verbs."""
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    exts = cfg["extenders"]
    assert sum(1 for e in exts if e.get("bindVerb")) <= 1
    names: list[str] = []
    for e in exts:
        if e.get("prioritizeVerb"):
            assert e.get("weight", 0) > 0
        for verb in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"):
            if e.get(verb):
                assert e[verb] in VERBS
        assert e["nodeCacheCapable"] is True
        names += [m["name"] for m in e.get("managedResources") or ()]
    assert len(names) == len(set(names)) and all(_EXTENDED.match(n) for n in names), names
    assert "nvidia.com/gpu" in names


def test_kube_scheduler_configuration_in_chart_and_deploy() -> None:
    docs = render(profile="extender")
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuaware-kube-scheduler")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    _check_scheduler_config(cfg)
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gpuaware-extender")
    assert cfg["extenders"][0]["urlPrefix"] == f"http://gpuaware-extender.gpuaware-system.svc:{svc['spec']['ports'][0]['port']}"
    placement = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuaware-placement")
    env = {e["name"]: e.get("value") for e in placement["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUAWARE_PLACEMENT_EXTENDER_PORT"] == "8888" and env["GPUAWARE_PLACEMENT_EXTENDER_BIND"] == "true"
    deploy = yaml.safe_load((REPO / "deploy" / "kube-scheduler" / "gpuaware-extender.yaml").read_text())
    _check_scheduler_config(deploy)
    assert deploy["extenders"][0]["managedResources"] == cfg["extenders"][0]["managedResources"]


def test_bad_scheduler_config_is_caught() -> None:
    cfg = yaml.safe_load((REPO / "deploy" / "kube-scheduler" / "gpuaware-extender.yaml").read_text())
    cfg["extenders"][0]["weight"] = 0
    with pytest.raises(AssertionError):
        _check_scheduler_config(cfg)


def test_webhooks_are_served_by_the_binder_with_a_certificate_the_ca_bundle_trusts(tmp_path: Path) -> None:
    import base64
    import shutil

    docs = render()
    mutating = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    validating = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "gpuaware-webhook-tls")
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gpuaware-webhook")
    binder = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuaware-binder")
    c = binder["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert env["GPUAWARE_BINDER_WEBHOOK_PORT"] == str(ports["webhook"])
    assert svc["spec"]["selector"] == binder["spec"]["selector"]["matchLabels"]
    hooks = mutating["webhooks"] + validating["webhooks"]
    assert {h["clientConfig"]["service"]["path"] for h in hooks} == {"/mutate", "/validate"}
    assert all(h["clientConfig"]["caBundle"] == secret["data"]["ca.crt"] for h in hooks)
    assert mutating["webhooks"][0]["namespaceSelector"] == {"matchLabels": {"gpuaware.io/scheduling": "enabled"}}
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to check the certificate chain")
    for k in ("ca.crt", "tls.crt"):
        (tmp_path / k).write_bytes(base64.b64decode(secret["data"][k]))
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(tmp_path / "tls.crt")],
                          capture_output=True, text=True, check=True).stdout
    assert "DNS:gpuaware-webhook.gpuaware-system.svc" in text


def test_recorded_scheduler_configurations_pass_the_same_checks() -> None:
    """The checks above accept the recorded upstream examples (so they encode kube-scheduler's rules,
    not only our file's)."""
    shared = Path(os.environ.get("GPUAWARE_SHARED_K8S", REPO.parent / "shared" / "k8s"))
    found = [p for p in (shared / "extender" / "kube-scheduler-config.yaml",
                         shared / "hami" / "hami-kube-scheduler-config.yaml") if p.is_file()]
    if not found:
        pytest.skip(f"recorded scheduler configurations absent under {shared} (set GPUAWARE_SHARED_K8S)")
    for p in found:
        docs = [d for d in yaml.safe_load_all(p.read_text()) if d and d.get("kind") == "KubeSchedulerConfiguration"]
        assert docs, p
        _check_scheduler_config(docs[0])


def test_quota_tree_from_values_is_mounted_and_valid() -> None:
    from gpuaware.quota.tree import validate

    tree = {"default_queue": "team-a", "queues": [{"name": "org", "guaranteed": {"*": {"gpus": 16}}},
                                                 {"name": "team-a", "parent": "org"}]}
    docs = render({"quota": {"enabled": True, "replicas": 1, "treeSource": "file", "tree": tree}})
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpuaware-quota-tree")
    assert yaml.safe_load(cm["data"]["tree.yaml"]) == tree
    validate(cm["data"]["tree.yaml"].encode())  # what the quota service loads at start
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuaware-quota")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUAWARE_QUOTA_TREE"] == "/etc/gpuaware/quota/tree.yaml" and env["GPUAWARE_QUOTA_TREE_SOURCE"] == "file"


def test_provisioning_job_runs_the_lists_module_as_admin_and_the_database_owner() -> None:
    docs = render({"database": {"url": "postgresql://owner:secret@db.example:5432/gpuaware?sslmode=require"}})
    job = next(d for d in docs if d["kind"] == "Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    entry = process_named(PROVISION)
    assert c["image"].rsplit("/", 1)[1].split(":")[0] == entry.image and "command" not in c
    env = {e["name"]: e for e in c["env"]}
    assert env["NATS_USER"]["value"] == "admin" and job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "gpuaware-database", "key": "url"}
    # a password per deployed service with a database role, from that service's own Secret
    with_db = [p for p in PROCESSES if p.database_role]
    assert {k for k in env if k.startswith("GPUAWARE_DB_PASSWORD_")} == {p.secret_variable for p in with_db}
    for p in with_db:
        assert env[p.secret_variable]["valueFrom"]["secretKeyRef"] == {"name": f"gpuaware-db-{p.name}",
                                                                       "key": "password"}
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("nats-credentials"))
    assert "admin" in secret["data"]


def test_each_database_role_has_a_kept_secret_with_its_own_login_on_the_owners_server() -> None:
    docs = render({"database": {"url": "postgresql://owner:secret@db.example:5432/gpuaware?sslmode=require"}})
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    for p in PROCESSES:
        name = f"gpuaware-db-{p.name}"
        if p.database_role is None:
            assert name not in secrets, p.name
            continue
        s = secrets[name]
        assert s["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        data = s["stringData"]
        assert data["username"] == p.database_login and len(data["password"]) == 32
        assert data["url"] == f"postgresql://{p.database_login}:{data['password']}@db.example:5432/gpuaware?sslmode=require"
        assert "secret" not in data["url"]  # never the owner's password
    bundled = render({"database": {"bundled": {"enabled": True}}})
    url = next(d for d in bundled if d["metadata"]["name"] == "gpuaware-db-quota")["stringData"]["url"]
    assert url.startswith("postgresql://gpuaware_quota_login:") and url.endswith("@gpuaware-postgres:5432/gpuaware")
    with pytest.raises(HelmError, match=re.escape("database.server")):
        render({"database": {"existingSecret": "owner-dsn"}})
    served = render({"database": {"existingSecret": "owner-dsn", "server": "pg.example:5432/gpuaware"}})
    url = next(d for d in served if d["metadata"]["name"] == "gpuaware-db-quota")["stringData"]["url"]
    assert url.endswith("@pg.example:5432/gpuaware")


def test_nats_tls_ca_reaches_every_nats_client() -> None:
    docs = render({"nats": {"url": "tls://nats.nats.svc:4222", "tls": {"caSecret": "nats-ca"}}})
    clients = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Job")
               and d["metadata"]["name"] != "gpuaware-kube-scheduler"]
    assert len(clients) >= 6
    for d in clients:
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["NATS_TLS_CA"] == "/etc/gpuaware/nats-ca/ca.crt", d["metadata"]["name"]
        assert {"name": "nats-ca", "mountPath": "/etc/gpuaware/nats-ca", "readOnly": True} in c["volumeMounts"]
        assert any(v["name"] == "nats-ca" and v["secret"]["secretName"] == "nats-ca" for v in pod["volumes"])
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
