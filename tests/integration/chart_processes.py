"""The chart's workloads as processes on one machine: what each rendered pod would run, resolved.

The chart is rendered by the real Helm engine (``tests/helm/chart_helpers.render``). Every pod of
every Job, Deployment and DaemonSet becomes one ``PodProcess``: the container's command and args (or,
without a command, what its image's entrypoint runs: ``python -m $GPUAWARE_MODULE``, the module looked
up by image in the one list of processes, ``gpuaware.schemas.processes``), and its environment
resolved as the kubelet resolves it:

* ``value`` as written, ``$(VAR)`` expanded against the variables defined before it (``$$`` escapes);
* ``secretKeyRef`` / ``configMapKeyRef`` and ``envFrom`` read from the rendered Secrets and ConfigMaps;
* ``fieldRef``: ``spec.nodeName`` (the node a DaemonSet pod runs on), ``metadata.name``/``namespace``.

Only what a pod's own network namespace and filesystem would make different on one machine is then
mapped, never anything else of the rendered environment:

* network: each port a pod listens on (its declared ``containerPort``s, and the ``*_PORT`` settings
  that name them) gets a free port of this machine; a URL naming a rendered Service (any of its DNS
  forms) points at the pod it selects, one naming an external server the chart is configured with
  (NATS, PostgreSQL, Alertmanager) at the embedded one, and ``localhost`` at the pod itself or else
  at the one pod listening on that port (the node's dcgm-exporter, played by the binder's twin);
* files: Secret, ConfigMap and emptyDir volumes are written under a folder of the run, and any
  environment value or argument under a ``mountPath`` names that folder instead.

A host name or reference this cannot resolve is an error naming it, not a guess.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuaware.devstack import free_port
from gpuaware.schemas import processes_by_image

__all__ = ["ChartRunError", "External", "PodProcess", "Rendered", "expand", "module_for_image", "plan_pods"]

WORKLOAD_KINDS = ("Job", "Deployment", "DaemonSet")
DEFAULT_PORTS = {"nats": 4222, "tls": 4222, "postgresql": 5432, "postgres": 5432, "http": 80, "https": 443}
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s,?#]+)")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0")


class ChartRunError(RuntimeError):
    """The chart renders something the harness cannot run as it is written (the message says what)."""


@dataclass(frozen=True)
class External:
    """A server the chart is configured to reach outside itself, played by a local process: any URL of
    one of ``schemes`` (and ``host``, when given) that names no rendered Service."""

    name: str
    schemes: tuple[str, ...]
    local_port: int
    """where the local process listens"""
    host: str = ""


@dataclass
class PodProcess:
    """One pod of a workload: what to run, with which environment, in which order."""

    kind: str
    workload: str
    pod: str
    container: str
    image: str
    argv: list[str]
    env: dict[str, str]
    ports: dict[int, int] = field(default_factory=dict)
    """container port -> this machine's port"""
    named_ports: dict[str, int] = field(default_factory=dict)
    """port name -> container port"""
    readiness: dict[str, Any] | None = None
    """the container's readinessProbe, its port resolved to this machine's (``httpGet`` only)"""
    node: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Rendered:
    """The rendered manifests, indexed for resolving references."""

    docs: list[dict[str, Any]]
    namespace: str

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def data(self, kind: str, name: str) -> dict[str, str]:
        """A Secret's or ConfigMap's keys, decoded."""
        for d in self.objects(kind):
            if d["metadata"]["name"] == name:
                out = {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()} \
                    if kind == "Secret" else dict(d.get("data") or {})
                out.update(d.get("stringData") or {})
                return out
        raise ChartRunError(f"the chart references {kind} {name!r}, which it does not render")

    def workloads(self) -> list[dict[str, Any]]:
        """Jobs first (the provisioning hook), then Deployments and DaemonSets in rendered order."""
        found = [d for d in self.docs if d.get("kind") in WORKLOAD_KINDS]
        others = sorted({d["kind"] for d in self.docs if d.get("kind") in ("StatefulSet", "ReplicaSet", "CronJob")})
        if others:
            raise ChartRunError(f"the chart renders {', '.join(others)}, which this harness does not run as "
                                "processes (use external NATS and PostgreSQL in the profile)")
        return sorted(found, key=lambda d: WORKLOAD_KINDS.index(d["kind"]))


def module_for_image(image: str) -> str:
    """The module ``image``'s entrypoint runs (``python -m $GPUAWARE_MODULE``), from the one list of
    processes: the image's name (``<repository>/<name>:<tag>``) is looked up there, never guessed."""
    name = image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    modules = processes_by_image()
    if name not in modules:
        raise ChartRunError(f"image {image!r}: {name!r} is not an image of gpuaware.schemas.PROCESSES "
                            f"({', '.join(sorted(modules))}): its entrypoint's module is not known")
    return modules[name]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables replaced, ``$$`` -> ``$``, others kept."""
    return _VAR_REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def plan_pods(rendered: Rendered, *, externals: Iterable[External], nodes: Iterable[str], root: Path,
              ports: dict[tuple[str, int], int], python: str = sys.executable) -> list[PodProcess]:
    """Every pod of every workload, resolved and mapped (see the module docstring). ``nodes``: the
    GPU nodes a DaemonSet runs on; ``root``: where mounted volumes are written; ``ports``: (pod,
    container port) -> this machine's port, kept so that planning again (once the nodes are known)
    maps the pods already running the same way."""
    nodes = list(nodes)
    pods: list[PodProcess] = []
    volumes: dict[str, dict[str, Path]] = {}
    for w in rendered.workloads():
        spec = w["spec"]["template"]["spec"]
        labels = dict((w["spec"]["template"].get("metadata") or {}).get("labels") or {})
        name = w["metadata"]["name"]
        if w["kind"] == "Job":
            names = [(f"{name}-0", "")]
        elif w["kind"] == "DaemonSet":
            names = [(f"{name}-{n}", n) for n in nodes]
        else:
            names = [(f"{name}-{i}", "") for i in range(int(w["spec"].get("replicas", 1)))]
        for pod, node in names:
            if len(spec["containers"]) != 1:
                raise ChartRunError(f"{w['kind']} {name} has {len(spec['containers'])} containers; one expected")
            c = spec["containers"][0]
            mounts = _write_volumes(rendered, spec.get("volumes") or [], c.get("volumeMounts") or [],
                                    root / "pods" / pod)
            volumes[pod] = mounts
            env = _container_env(rendered, c, pod=pod, node=node)
            command = [expand(x, env) for x in c.get("command") or []]
            args = [expand(x, env) for x in c.get("args") or []]
            if command:
                argv = [python if command[0] in ("python", "python3") else command[0], *command[1:], *args]
            else:
                argv = [python, "-m", module_for_image(c["image"]), *args]
            declared = {p["containerPort"]: p.get("name", "") for p in c.get("ports") or []}
            pods.append(PodProcess(kind=w["kind"], workload=name, pod=pod, container=c["name"], image=c["image"],
                                   argv=argv, env=env, named_ports={n: p for p, n in declared.items() if n},
                                   readiness=c.get("readinessProbe"), node=node, labels=labels,
                                   ports={p: 0 for p in declared}))
    _map_ports(pods, ports)
    _map_hosts(pods, rendered, list(externals))
    for p in pods:
        _map_paths(p, volumes[p.pod])
        if p.readiness and "httpGet" in p.readiness:
            get = dict(p.readiness["httpGet"])
            port = get["port"]
            get["port"] = p.ports[p.named_ports[port] if isinstance(port, str) else int(port)]
            p.readiness = {**p.readiness, "httpGet": get}
    return pods


def _container_env(rendered: Rendered, c: dict[str, Any], *, pod: str, node: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in c.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "secretRef" in src:
            env.update({prefix + k: v for k, v in rendered.data("Secret", src["secretRef"]["name"]).items()})
        elif "configMapRef" in src:
            env.update({prefix + k: v for k, v in rendered.data("ConfigMap", src["configMapRef"]["name"]).items()})
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
            continue
        ref = e.get("valueFrom") or {}
        if "secretKeyRef" in ref or "configMapKeyRef" in ref:
            kind, key_ref = ("Secret", ref["secretKeyRef"]) if "secretKeyRef" in ref else \
                ("ConfigMap", ref["configMapKeyRef"])
            data = rendered.data(kind, key_ref["name"])
            if key_ref["key"] not in data:
                if key_ref.get("optional"):
                    continue
                raise ChartRunError(f"{e['name']} reads key {key_ref['key']!r} of {kind} {key_ref['name']}, "
                                    "which has no such key")
            env[e["name"]] = data[key_ref["key"]]
        elif "fieldRef" in ref:
            path = ref["fieldRef"]["fieldPath"]
            fields = {"spec.nodeName": node, "metadata.name": pod, "metadata.namespace": rendered.namespace,
                      "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
            if path not in fields:
                raise ChartRunError(f"{e['name']}: fieldRef {path} is not resolved by this harness")
            env[e["name"]] = fields[path]
        else:
            raise ChartRunError(f"{e['name']}: valueFrom {sorted(ref)} is not resolved by this harness")
    return env


def _write_volumes(rendered: Rendered, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]],
                   pod_dir: Path) -> dict[str, Path]:
    """mountPath -> the folder holding that volume's files for this pod."""
    by_name = {v["name"]: v for v in volumes}
    out: dict[str, Path] = {}
    for m in mounts:
        v = by_name[m["name"]]
        where = pod_dir / v["name"]
        where.mkdir(parents=True, exist_ok=True)
        if "secret" in v or "configMap" in v:
            kind, ref = ("Secret", v["secret"]) if "secret" in v else ("ConfigMap", v["configMap"])
            data = rendered.data(kind, ref.get("secretName") or ref.get("name"))
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = where / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])
                target.chmod(0o600 if kind == "Secret" else 0o644)
        elif "emptyDir" not in v:
            raise ChartRunError(f"volume {v['name']}: only Secret, ConfigMap and emptyDir volumes are mapped")
        out[m["mountPath"].rstrip("/")] = where / m["subPath"] if m.get("subPath") else where
    return out


def _map_paths(p: PodProcess, mounts: Mapping[str, Path]) -> None:
    """Values and arguments under a mountPath name the folder written for it (the interpreter, this
    machine's, is not the container's: a checkout under /tmp must not be taken for the pod's /tmp)."""
    def mapped(value: str) -> str:
        for mount in sorted(mounts, key=len, reverse=True):
            if value == mount or value.startswith(mount + "/"):
                return str(mounts[mount]) + value[len(mount):]
        return value

    p.env = {k: mapped(v) for k, v in p.env.items()}
    p.argv = [p.argv[0], *(mapped(a) for a in p.argv[1:])]


def _map_ports(pods: list[PodProcess], memo: dict[tuple[str, int], int]) -> None:
    """A free port of this machine for each port a pod listens on: its containerPorts and the ``*_PORT``
    settings in its environment (the values rewritten to the new port)."""
    for p in pods:
        for name, value in p.env.items():
            if name.endswith("_PORT") and value.isdigit() and int(value) > 0:
                p.ports.setdefault(int(value), 0)
        for port in p.ports:
            if (p.pod, port) not in memo:
                memo[(p.pod, port)] = free_port()
            p.ports[port] = memo[(p.pod, port)]
        p.env = {k: str(p.ports[int(v)]) if k.endswith("_PORT") and v.isdigit() and int(v) in p.ports else v
                 for k, v in p.env.items()}


def _service_targets(rendered: Rendered, pods: list[PodProcess]) -> dict[str, dict[int, int]]:
    """Every DNS form of every rendered Service -> {service port: this machine's port of the first pod
    it selects}."""
    out: dict[str, dict[int, int]] = {}
    for svc in rendered.objects("Service"):
        selector = svc["spec"].get("selector") or {}
        chosen = [p for p in pods if selector and all(p.labels.get(k) == v for k, v in selector.items())]
        if not chosen:
            continue
        target = chosen[0]
        ports: dict[int, int] = {}
        for sp in svc["spec"].get("ports") or []:
            tp = sp.get("targetPort", sp["port"])
            container_port = target.named_ports.get(tp) if isinstance(tp, str) else int(tp)
            if container_port in target.ports:
                ports[int(sp["port"])] = target.ports[container_port]
        name, ns = svc["metadata"]["name"], svc["metadata"].get("namespace", rendered.namespace)
        for host in (name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"):
            out[host] = ports
    return out


def _map_hosts(pods: list[PodProcess], rendered: Rendered, externals: list[External]) -> None:
    services = _service_targets(rendered, pods)
    listeners: dict[int, list[int]] = {}
    for p in pods:
        for port, local in p.ports.items():
            listeners.setdefault(port, []).append(local)

    def endpoint(p: PodProcess, scheme: str, host: str, port: int) -> int:
        if host in services and port in services[host]:
            return services[host][port]
        for ext in externals:
            if scheme in ext.schemes and host not in LOCAL_HOSTS and (not ext.host or host == ext.host):
                return ext.local_port
        if host in LOCAL_HOSTS:
            if port in p.ports:
                return p.ports[port]
            if len(listeners.get(port, [])) == 1:
                return listeners[port][0]
        raise ChartRunError(f"{p.pod}: {scheme}://{host}:{port} names no rendered Service, no configured "
                            "external server and no single local listener")

    def rewrite(p: PodProcess, value: str) -> str:
        def one(m: re.Match[str]) -> str:
            scheme, authority = m.group(1), m.group(2)
            userinfo, _, hostport = authority.rpartition("@")
            parts = urlsplit(f"{scheme}://{hostport}")
            host = parts.hostname or ""
            try:
                port = parts.port or DEFAULT_PORTS.get(scheme, 0)
            except ValueError:
                return m.group(0)
            local = endpoint(p, scheme, host, port)
            return f"{scheme}://{userinfo + '@' if userinfo else ''}127.0.0.1:{local}"

        return _URL.sub(one, value)

    for p in pods:
        p.env = {k: rewrite(p, v) for k, v in p.env.items()}
        p.argv = [rewrite(p, a) if "://" in a and "\n" not in a else a for a in p.argv]
