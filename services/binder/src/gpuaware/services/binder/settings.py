"""The binder's one frozen settings object, read once from ``GPUAWARE_BINDER_*``.

``NATS_URL`` is honoured as a fallback, as for every service. The twin's settings choose the
world's nodes, its workload and how fast its time runs; the consumer settings how decisions are
received; the exporter settings whether the twin's GPUs are served as dcgm-exporter text (for
telemetry agents in other processes). Each field says what its default means.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import msgspec

from gpuaware.runtime import ServiceSettings, SettingsError
from gpuaware.sim import RESIZE_RESTART_DELAY_S, decode_faults


class BinderSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_BINDER_"

    service_name: str = "binder"
    world: Literal["twin", "kubernetes"] = "twin"
    """which world the decisions are applied to: the digital twin, or a real cluster (``kube_world``:
    in-cluster config in a pod, else ``KUBECONFIG``)"""
    leader_election: Literal["none", "kubernetes"] = "none"
    """kubernetes world with several replicas: a coordination.k8s.io Lease picks the one that reports
    the watches' events (``kube_world``); none = this replica reports"""
    lease_namespace: str = ""
    """the Lease's namespace; empty = the pod's own (service-account file), else ``default``"""
    webhook_port: int = 0
    """serve the admission webhooks (``webhook.py``) on this port; 0 = off"""
    webhook_cert_dir: str = ""
    """``tls.crt`` and ``tls.key`` for the webhooks (the apiserver calls them over HTTPS only)"""
    webhook_default_queue: str = "default"
    """the queue the mutating webhook writes on a GPU pod that names none"""
    durable: str = "binder"
    """durable consumer of placement decisions (its checkpoint-answer consumer is ``<durable>-checkpoints``,
    its node-power recommendations' ``<durable>-power``)"""
    node_power: bool = False
    """Kubernetes: carry out node-power recommendations (cordon the node and annotate it
    ``gpuaware.io/power: off`` for the autoscaler or BMC tool that switches it; uncordon on power-up a node
    gpuaware cordoned). Off: each is answered with a refusal and the node stays as it is. The twin always
    switches its nodes."""

    # --- the twin: nodes -------------------------------------------------------------------------
    twin_nodes: str = "auto"
    """``auto`` (openb's 1,213 nodes when shared data is present, else ``default``), ``default``
    (the built-in mixed cluster), ``openb``, or a path to a node list in openb's format"""
    twin_default_nodes: int = 16
    """size of the built-in mixed cluster"""
    shared_data: str = ""
    """where ``../shared/data`` is; empty = GPUAWARE_SHARED_DATA or ../shared/data next to the repo"""

    # --- the twin: workload ----------------------------------------------------------------------
    workload: Literal["generator", "openb", "philly", "none"] = "generator"
    """where pods come from: the tenant/class generator, the openb pod list, the Philly trace
    (Pollux artifact), or nowhere (tests submit their own)"""
    workload_file: str = ""
    """openb: a pod list path or a name (``gpushare40`` -> openb_pod_list_gpushare40.csv; empty =
    default); philly: a path (empty = pollux/traces/philly.csv)"""
    window_start_s: float = -1.0
    """trace window start, seconds after the trace's first pod; -1 = the trace's start"""
    window_s: float = 86400.0
    """length of the replayed window (traces) or of the generated arrivals (generator)"""
    load: float = 0.8
    """generator: offered GPU load as a fraction of the cluster's GPUs"""
    elastic: bool = True
    """generator: make the class profiles' elastic training jobs (false: every job keeps the fixed
    shape it asks for; the other pods are the same either way)"""
    max_pods: int = 0
    """cap on the workload's pods (0 = none)"""
    seed: int = 0

    # --- the twin: time --------------------------------------------------------------------------
    speed: float = 288.0
    """virtual seconds per wall second (288 = one day in five minutes)"""
    start: float = 0.0
    """Unix time at which the virtual day starts; 0 = the wall clock when the binder starts"""
    skip_idle: bool = True
    """jump to the next event when nothing is pending and no checkpoint is in flight"""
    tick_s: float = 0.25
    """longest wall sleep of the world loop between two looks at the clock"""
    checkpoint_delay_min_s: float = 2.0
    """virtual seconds a simulated workload takes to checkpoint, at least"""
    checkpoint_delay_max_s: float = 20.0
    resize_restart_delay_s: float = RESIZE_RESTART_DELAY_S
    """virtual seconds an elastic job stands still after each resize (its workers restart at the new
    world size from the checkpoint taken before it)"""
    fleet: bool = True
    """keep a simulated GPU fleet mirroring the bindings (for the telemetry agent)"""
    fleet_traces: Literal["auto", "synthetic"] = "synthetic"
    """utilisation traces of the fleet: ``auto`` reads GenTD26/Helios from shared data"""
    faults: str = ""
    """faults the fleet's GPUs develop, a JSON list (``gpuaware.sim.twin.faults``: ecc, xid, thermal,
    power_cap; each names node, GPU index and ``at_s``, virtual seconds after the start); empty = none"""

    # --- the twin's GPUs as dcgm-exporter ---------------------------------------------------------
    exporter_port: int = 0
    """serve the fleet's GPUs as dcgm-exporter text on this port, ``GET /metrics/<node>`` (telemetry
    agents scrape it with ``backend=dcgm``); 0 = off. Needs ``fleet``"""
    exporter_host: str = "127.0.0.1"
    """address the exporter listens on; ``0.0.0.0`` to be scraped from other machines"""

    # --- decisions -------------------------------------------------------------------------------
    checkpoint_deadline_s: float = 60.0
    """world seconds to wait for a checkpoint when a planned preemption gives no grace period"""
    checkpoint_min_wait_s: float = 1.0
    """wall seconds a checkpoint wait lasts at least, whatever the speed (NATS round trips)"""
    requeue_on_bind_failure: bool = True
    """after a transient bind failure publish the pod as pending again (attempt + 1)"""
    dedupe_capacity: int = 100_000
    """decision ids remembered in memory; beyond it the world's truth still catches duplicates"""
    ack_wait_s: float = 30.0
    max_deliver: int = 10
    poll_s: float = 0.5
    publish_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        try:
            decode_faults(self.faults)
        except msgspec.ValidationError as exc:
            raise SettingsError(f"GPUAWARE_BINDER_FAULTS is not a list of faults: {exc}") from None
        if self.faults.strip() and not self.fleet:
            raise SettingsError("GPUAWARE_BINDER_FAULTS needs the simulated fleet (GPUAWARE_BINDER_FLEET=true)")
        if not 0 <= self.resize_restart_delay_s < float("inf"):
            raise SettingsError("GPUAWARE_BINDER_RESIZE_RESTART_DELAY_S must be a finite number of seconds >= 0, "
                                f"got {self.resize_restart_delay_s}")
        if not 0 <= self.exporter_port <= 65535:
            raise SettingsError("GPUAWARE_BINDER_EXPORTER_PORT must be 0 (off) or a TCP port, "
                                f"got {self.exporter_port}")

    def lease_k8s_namespace(self) -> str:
        if self.lease_namespace:
            return self.lease_namespace
        sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return sa.read_text().strip() if sa.is_file() else "default"
