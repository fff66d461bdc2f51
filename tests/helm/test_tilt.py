"""Every image, path and resource the Tiltfile names exists: the Dockerfile, each service package and
the module its image runs, the chart and its values, and each k8s_resource among the chart's rendered
workloads; every image the chart deploys is one the Tiltfile builds. The Dockerfile is slim, non-root
and installs through constraints.txt only what local_deps.py says each service needs."""

from __future__ import annotations

import ast
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from chart_helpers import REPO, _merge
from helm_python import Chart


def _calls(name: str) -> list[ast.Call]:
    tree = ast.parse((REPO / "Tiltfile").read_text())  # Starlark here is a subset of Python's syntax
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]


def _literal(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return env[node.id]
    return ast.literal_eval(node)


def _tilt_env() -> dict[str, Any]:
    tree = ast.parse((REPO / "Tiltfile").read_text())
    env: dict[str, Any] = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                env[n.targets[0].id] = ast.literal_eval(n.value)
    return env


def _images() -> dict[str, tuple[str, str]]:
    """image -> (its package folder, the module it runs), as the Tiltfile and the Dockerfile read them
    from the list of processes (deploy/docker/images.py)."""
    sys.path.insert(0, str(REPO / "deploy" / "docker"))
    try:
        import images
    finally:
        sys.path.pop(0)
    return {image: (images.package(module), module) for image, module in images.images().items()}


def test_tiltfile_names_only_things_that_exist() -> None:
    env = _tilt_env()
    services = _images()
    assert "read_json('helm/gpuaware/files/processes.json')" in (REPO / "Tiltfile").read_text()
    (build,) = _calls("docker_build")
    kw = {k.arg: k.value for k in build.keywords}
    dockerfile = REPO / _literal(kw["dockerfile"], env)
    assert dockerfile.is_file()
    for image, (pkg, module) in services.items():
        assert (REPO / pkg / "pyproject.toml").is_file(), pkg
        main = REPO / pkg / "src" / Path(*module.split(".")) / "__main__.py"
        assert main.is_file(), f"image {image}: {module} has no __main__"
    only = ast.literal_eval(kw["only"])
    assert all((REPO / p).exists() for p in only), only
    (hcall,) = _calls("helm")
    chart_dir = REPO / ast.literal_eval(hcall.args[0])
    hkw = {k.arg: ast.literal_eval(k.value) for k in hcall.keywords}
    values: dict[str, Any] = {}
    for f in hkw["values"]:
        assert (REPO / f).is_file(), f
        _merge(values, yaml.safe_load((REPO / f).read_text()))
    out = Chart.load(chart_dir).render(values, name=hkw["name"], namespace=hkw["namespace"], is_install=True)
    docs = [d for t in out.values() for d in yaml.safe_load_all(t) if d]
    workloads = {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet")}
    for call in _calls("k8s_resource"):
        assert ast.literal_eval(call.args[0]) in workloads, ast.literal_eval(call.args[0])
    built = {env["REGISTRY"] + "/" + image for image in services}
    ours = {c["image"].rsplit(":", 1)[0] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"] if c["image"].startswith(env["REGISTRY"])}
    assert ours and ours <= built, ours - built


def test_dockerfile_is_slim_non_root_and_pinned() -> None:
    text = (REPO / "deploy" / "docker" / "Dockerfile").read_text()
    assert "-slim" in text and "USER 10001:10001" in text
    assert "-c constraints.txt" in text and "--no-cache-dir" in text
    assert "images.py module" in text and "MODULE" not in text.replace("gpuaware-module", "")  # from the list
    final = text.rsplit("FROM ", 1)[1]
    assert "pip install" not in final and "gcc" not in final  # nothing is built in the final stage


def test_local_deps_cover_every_service_import() -> None:
    """Each image installs the service and every local package it needs (its pyproject's closure),
    and no package a service does not need (the telemetry image carries no placement engine)."""
    for _image, (pkg, _module) in _images().items():
        got = subprocess.run([sys.executable, str(REPO / "deploy" / "docker" / "local_deps.py"), pkg],
                             capture_output=True, text=True, check=True).stdout.split()
        assert got[0] == "schemas" and got[-1] == pkg
        for d in got:
            assert (REPO / d / "pyproject.toml").is_file()
        imported: set[str] = set()
        for f in (REPO / pkg / "src").rglob("*.py"):
            for n in ast.walk(ast.parse(f.read_text())):
                names = [n.module] if isinstance(n, ast.ImportFrom) and n.module else \
                    [a.name for a in n.names] if isinstance(n, ast.Import) else []
                imported |= {m.split(".")[1] for m in names if m.startswith("gpuaware.") and m.count(".") >= 1}
        libs = {d.split("/")[1] for d in got if d.startswith("libs/")}
        needed = {m for m in imported if (REPO / "libs" / m).is_dir()}
        assert needed <= libs, (pkg, needed - libs)
    telemetry = subprocess.run([sys.executable, str(REPO / "deploy" / "docker" / "local_deps.py"), "services/telemetry"],
                               capture_output=True, text=True, check=True).stdout.split()
    assert "libs/placement" not in telemetry
