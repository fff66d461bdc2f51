"""Every deployable process, named once: what the chart deploys, what the demo and ``gpuaware up`` start.

Why one list: the chart's templates, the image build, the NATS permissions, the RBAC, the database
roles and the launchers each used to keep their own list of services, and they drifted (a workload the
chart deployed that the demo never ran, a credential handed to a process that never uses it). Each
entry says how the process is run (``python -m <module> <args>`` from ``<image>``, as a Deployment,
DaemonSet or Job), who it is on the bus (its NATS ``identity``: what it consumes and publishes follows
from ``schemas.permissions``, never restated here), which database group role its own login belongs
to (``None``: it gets no database credentials at all), which ports it serves, its settings prefix,
and whether it calls the Kubernetes API in its default configuration.

``python -m gpuaware.k8s.chart`` writes this list to ``helm/gpuaware/files/processes.json`` (the
chart ranges over it); tests check that the file is current, that the chart deploys exactly these
workloads, that the demo starts exactly these processes, and that no workload holds a credential its
entry does not name.

Sample::

    from gpuaware.schemas import PROCESSES, process_named
    recorder = process_named("recorder")
    argv = ["python", "-m", recorder.module, *recorder.args]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from gpuaware.schemas.permissions import (
    ADMIN,
    ALERT_BRIDGE,
    BINDER_ID,
    FORECASTING,
    FORECASTING_LEASE_BUCKET,
    HEALTH_LEASE_BUCKET,
    HEALTH_SCORING,
    LEASE_BUCKET,
    PLACEMENT_ID,
    QUOTA_ID,
    RECORDER_ID,
    TELEMETRY_AGENT,
    TELEMETRY_COLLECTOR,
    permissions_for,
)

__all__ = [
    "PROCESSES",
    "PROVISION",
    "Consumer",
    "Process",
    "WorkloadKind",
    "login_roles",
    "process_named",
    "processes_by_image",
]

PROVISION = "provision"

WorkloadKind = Literal["Deployment", "DaemonSet", "Job"]
PortName = Literal["metrics", "extender", "webhook"]

_JS_DURABLE = "$JS.API.CONSUMER.DURABLE.CREATE."
_JS_FOLLOW = "$JS.API.CONSUMER.CREATE."


class Consumer(msgspec.Struct, frozen=True, kw_only=True):
    """A stream a process reads: through a durable consumer (``durable``; ``*``: named at run time),
    or followed by an ordered, server-named consumer (``durable`` empty)."""

    stream: str
    durable: str = ""


class Process(msgspec.Struct, frozen=True, kw_only=True):
    """One deployable process (see the module docstring)."""

    name: str
    """the workload's name (``<release>-<name>``), its ServiceAccount and its ``app.kubernetes.io/name``"""
    module: str
    """what the image runs: ``python -m <module> <args>``"""
    args: tuple[str, ...] = ()
    image: str
    """the image's name (``<repository>/<image>:<tag>``); one image runs one module"""
    kind: WorkloadKind = "Deployment"
    values_key: str = ""
    """the chart's values section of this workload (empty: none of its own)"""
    identity: str
    """its NATS user (``schemas.permissions``)"""
    env_prefix: str
    """its settings' prefix (``GPUAWARE_<X>_``)"""
    database_role: str | None = None
    """the NOLOGIN group role its own login role is a member of; None: no database credentials"""
    database_owner: bool = False
    """logs in as the database's owner (the provisioning Job only: it migrates and creates the logins)"""
    ports: tuple[PortName, ...] = ()
    """the ports it may serve (their numbers are the chart's values)"""
    kubernetes_api: bool = False
    """calls the Kubernetes API in its default configuration (gets a ServiceAccount token)"""
    leader_lease: str = ""
    """the NATS KV bucket of its leader lease (key: the cluster) when its replicas elect a leader: one
    leads, the others stand by, so the chart runs two by default behind a PodDisruptionBudget of
    ``minAvailable: 1``; empty: not leader-elected"""

    @property
    def database_login(self) -> str | None:
        """The LOGIN role it connects as (a member of ``database_role``)."""
        return f"{self.database_role}_login" if self.database_role else None

    @property
    def secret_variable(self) -> str | None:
        """The variable that hands its login's password to the provisioning (``GPUAWARE_DB_PASSWORD_<NAME>``),
        which creates or updates the login with it."""
        return "GPUAWARE_DB_PASSWORD_" + self.name.upper().replace("-", "_") if self.database_role else None

    def consumes(self, cluster: str = "default") -> tuple[Consumer, ...]:
        """The streams it reads, from its NATS permissions (admin: none listed, it may read any)."""
        if self.identity == ADMIN:
            return ()
        out: list[Consumer] = []
        for subject in permissions_for(self.identity, cluster=cluster).publish:
            if subject.startswith(_JS_DURABLE):
                stream, durable = subject.removeprefix(_JS_DURABLE).split(".", 1)
                out.append(Consumer(stream=stream, durable=durable))
            elif subject.startswith(_JS_FOLLOW):
                out.append(Consumer(stream=subject.removeprefix(_JS_FOLLOW)))
        return tuple(dict.fromkeys(out))

    def publishes(self, cluster: str = "default") -> tuple[str, ...]:
        """The subjects it may publish to (events and requests), from its NATS permissions: the
        JetStream API, acknowledgements, dead letters and inboxes left out."""
        if self.identity == ADMIN:
            return (">",)
        return tuple(s for s in permissions_for(self.identity, cluster=cluster).publish
                     if not s.startswith(("$", "_INBOX", "deadletter.")))


PROCESSES: tuple[Process, ...] = (
    Process(name=PROVISION, module="gpuaware.services.provision", image="provision", kind="Job",
            identity=ADMIN, env_prefix="GPUAWARE_PROVISION_", database_owner=True),
    Process(name="placement", module="gpuaware.services.placement", image="placement", values_key="placement",
            identity=PLACEMENT_ID, env_prefix="GPUAWARE_PLACEMENT_", ports=("metrics", "extender"),
            kubernetes_api=True, leader_lease=LEASE_BUCKET),
    Process(name="binder", module="gpuaware.services.binder", image="binder", values_key="binder",
            identity=BINDER_ID, env_prefix="GPUAWARE_BINDER_", ports=("metrics", "webhook"), kubernetes_api=True),
    Process(name="telemetry-collector", module="gpuaware.services.telemetry", args=("collector",),
            image="telemetry", values_key="telemetryCollector", identity=TELEMETRY_COLLECTOR,
            env_prefix="GPUAWARE_TELEMETRY_COLLECTOR_", database_role="gpuaware_collector", ports=("metrics",)),
    Process(name="telemetry-agent", module="gpuaware.services.telemetry", args=("agent",), image="telemetry",
            kind="DaemonSet", values_key="telemetryAgent", identity=TELEMETRY_AGENT,
            env_prefix="GPUAWARE_TELEMETRY_AGENT_", ports=("metrics",)),
    Process(name="health-scoring", module="gpuaware.services.health_scoring", image="health_scoring",
            values_key="healthScoring", identity=HEALTH_SCORING, env_prefix="GPUAWARE_HEALTH_SCORING_",
            database_role="gpuaware_health", ports=("metrics",), leader_lease=HEALTH_LEASE_BUCKET),
    Process(name="quota", module="gpuaware.services.quota", image="quota", values_key="quota", identity=QUOTA_ID,
            env_prefix="GPUAWARE_QUOTA_", database_role="gpuaware_quota", ports=("metrics",),
            kubernetes_api=True, leader_lease="quota-leader"),
    Process(name="forecasting", module="gpuaware.services.forecasting", image="forecasting",
            values_key="forecasting", identity=FORECASTING, env_prefix="GPUAWARE_FORECASTING_",
            database_role="gpuaware_forecasting", ports=("metrics",), leader_lease=FORECASTING_LEASE_BUCKET),
    Process(name="recorder", module="gpuaware.services.recorder", image="recorder", values_key="recorder",
            identity=RECORDER_ID, env_prefix="GPUAWARE_RECORDER_", database_role="gpuaware_recorder",
            ports=("metrics",)),
    Process(name="alert-bridge", module="gpuaware.services.alert_bridge", image="alert_bridge",
            values_key="alertBridge", identity=ALERT_BRIDGE, env_prefix="GPUAWARE_ALERT_BRIDGE_",
            ports=("metrics", "webhook")),
)


def process_named(name: str) -> Process:
    """The list's entry called ``name`` (KeyError naming the known ones otherwise)."""
    for p in PROCESSES:
        if p.name == name:
            return p
    raise KeyError(f"no process {name!r}; known: {', '.join(p.name for p in PROCESSES)}")


def processes_by_image() -> dict[str, str]:
    """image -> the module it runs (each image runs exactly one module; its processes differ by args)."""
    out: dict[str, str] = {}
    for p in PROCESSES:
        if out.setdefault(p.image, p.module) != p.module:
            raise ValueError(f"image {p.image!r} would run both {out[p.image]} and {p.module}")
    return out


def login_roles(passwords: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The LOGIN roles to create for the processes given a password (process name -> password):
    login -> (its group role, its password), what ``gpuaware.tsdb.ensure_login_roles`` takes. A process
    without a database role has no login (KeyError naming it: it must get no credentials)."""
    out: dict[str, tuple[str, str]] = {}
    for name, password in passwords.items():
        p = process_named(name)
        if p.database_role is None or p.database_login is None:
            raise KeyError(f"process {name!r} has no database role: it gets no database credentials")
        out[p.database_login] = (p.database_role, password)
    return out
