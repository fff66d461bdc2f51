"""The two frozen settings objects of the telemetry service, read once from a prefixed environment.

``GPUAWARE_TELEMETRY_AGENT_*`` configures the node agent (one per GPU node, a DaemonSet),
``GPUAWARE_TELEMETRY_COLLECTOR_*`` the collector (scaled by running more replicas on the same
durable consumer). ``NATS_URL`` / ``DATABASE_URL`` are honoured as fallbacks, as for every service.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from gpuaware.runtime import DatabaseSettings, ServiceSettings, SettingsError
from gpuaware.telemetry import AdaptivePolicy, Deadbands, Limits


class AgentSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_TELEMETRY_AGENT_"

    service_name: str = "telemetry-agent"
    backend: Literal["nvml", "dcgm", "simulated"] = "nvml"
    """where GPUs are read: NVML on a GPU node, a dcgm-exporter scrape, or a simulated fleet"""
    node_name: str = ""
    """this node's name (the Downward API's spec.nodeName); empty = the host name (nvml, dcgm)"""
    dcgm_url: str = "http://127.0.0.1:9400/metrics"
    """the dcgm-exporter to scrape; with ``dcgm_nodes``, ``{node}`` in it is replaced by each node's name
    (``http://binder:9400/metrics/{node}``: the digital twin's nodes served by the binder)"""
    dcgm_nodes: str = ""
    """dcgm backend: comma-separated node names this agent scrapes, one ``dcgm_url`` each; empty = one
    node, this one (``node_name``)"""
    sim_nodes: int = 1
    """simulated backend: how many nodes this agent process simulates (demo, benchmarks)"""
    sim_gpus_per_node: int = 8
    sim_model: str = "A100-80GB"
    sim_seed: int = 0
    sim_occupancy: float = 0.75
    sim_prefix: str = "sim-node"
    sim_traces: Literal["auto", "synthetic"] = "auto"
    allocations: Literal["auto", "binder", "fleet", "none"] = "auto"
    """where pod allocations come from: the binder's events, the simulated fleet, or nowhere;
    auto = the fleet for the simulated backend, the binder otherwise"""
    fast_s: float = 1.0
    """read period, and the send rate while a GPU's metrics move"""
    slow_s: float = 30.0
    """longest heartbeat of a stable GPU"""
    backoff: float = 2.0
    fixed_rate: bool = False
    """send every GPU at every read (the baseline; disables adaptive sampling)"""
    util_deadband_pct: float = 10.0
    temperature_deadband_c: float = 5.0
    mem_deadband_frac: float = 0.05
    power_deadband_frac: float = 0.10
    clock_deadband_frac: float = 0.10
    usage_window_s: float = 60.0
    """per-pod usage is reported per window of this length"""
    inventory_check_s: float = 30.0
    """how often the inventory is read again and announced if it changed"""
    inventory_interval_s: float = 600.0
    """announce the inventory at least this often (well within the TELEMETRY stream's max age)"""
    publish_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        nodes = self.dcgm_node_names()
        placeholder = "{node}" in self.dcgm_url
        if nodes and self.backend != "dcgm":
            raise SettingsError("GPUAWARE_TELEMETRY_AGENT_DCGM_NODES applies to BACKEND=dcgm only, "
                                f"the backend is {self.backend}")
        if self.backend != "dcgm":
            return
        if placeholder and not nodes:
            raise SettingsError(f"GPUAWARE_TELEMETRY_AGENT_DCGM_URL ({self.dcgm_url}) has a {{node}} placeholder but "
                                "GPUAWARE_TELEMETRY_AGENT_DCGM_NODES is empty: name the nodes to scrape")
        if len(nodes) > 1 and not placeholder:
            raise SettingsError(f"GPUAWARE_TELEMETRY_AGENT_DCGM_NODES names {len(nodes)} nodes but "
                                f"GPUAWARE_TELEMETRY_AGENT_DCGM_URL ({self.dcgm_url}) has no {{node}} placeholder: "
                                "every node would scrape the same exporter")
        if len(set(nodes)) != len(nodes):
            raise SettingsError(f"GPUAWARE_TELEMETRY_AGENT_DCGM_NODES repeats a node: {self.dcgm_nodes}")
        if nodes and self.node_name:
            raise SettingsError("GPUAWARE_TELEMETRY_AGENT_NODE_NAME and _DCGM_NODES both name this agent's "
                                "node(s); set one")

    def dcgm_node_names(self) -> list[str]:
        """``dcgm_nodes`` as a list (blanks dropped)."""
        return [n.strip() for n in self.dcgm_nodes.split(",") if n.strip()]

    def policy(self) -> AdaptivePolicy:
        if self.fixed_rate:
            return AdaptivePolicy.fixed(self.fast_s)
        return AdaptivePolicy(fast_s=self.fast_s, slow_s=self.slow_s, backoff=self.backoff, deadbands=Deadbands(
            util_pct=self.util_deadband_pct, temperature_c=self.temperature_deadband_c,
            mem_used_frac=self.mem_deadband_frac, power_frac=self.power_deadband_frac,
            clock_frac=self.clock_deadband_frac))

    def allocation_source(self) -> str:
        if self.allocations != "auto":
            return self.allocations
        return "fleet" if self.backend == "simulated" else "binder"


class CollectorSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_TELEMETRY_COLLECTOR_"

    service_name: str = "telemetry-collector"
    durable: str = "telemetry-collector"
    """the durable consumer every replica shares (replicas split the work)"""
    consumers: int = 4
    """pull loops per process on the durable: some fetch and decode while others' batches are written"""
    fetch_batch: int = 512
    """messages pulled at once by each loop"""
    max_ack_pending: int = 8192
    """messages delivered but not yet written, across all replicas (the back-pressure bound)"""
    ack_wait_s: float = 30.0
    max_deliver: int = 100
    """deliveries before a message is dead-lettered; a database outage costs one per retry, so this
    with ``retry_cap_s`` bounds how long an outage may last before messages leave for the dead letters"""
    retry_cap_s: float = 30.0
    flush_rows: int = 20_000
    """rows per COPY at most"""
    linger_s: float = 0.01
    """how long a batch waits for more rows before it is written"""
    writers: int = 2
    """COPYs in flight at once (database connections used for samples)"""
    hold_s: float = 20.0
    """while the database is unreachable, a batch is retried in place for this long (messages stay
    delivered, kept alive with in-progress acks) before they are handed back for redelivery"""
    pool_size: int = 4
    """database connections: ``writers`` for the COPYs, the rest for inventory and usage writes"""
    db_timeout_s: float = 2.0
    """how long a write waits for a database connection before it counts as a failed attempt"""
    require_inventory: bool = True
    """refuse samples of GPUs their node never announced"""
    inventory_attempts: int = 6
    """deliveries a sample waits for its node's inventory before it is dead-lettered; the waits double
    (1, 2, 4, 8, 16 s: about half a minute, longer than an ack wait of a replica that died holding
    the inventory message)"""
    max_gpus: int = 64
    max_future_s: float = 300.0
    publish_rollups: bool = True
    """publish telemetry.gpu.rolledup.v1 for closed windows (every replica may: the msg id dedupes)"""
    rollup_grace_s: float = 90.0
    """a window is closed this long (event time) after its end: the slowest heartbeat plus lag"""
    rollup_max_hold_s: float = 60.0
    """a reading holds at most this long in the time-weighted statistics"""
    tick_s: float = 1.0
    """how often the maintenance loop looks for closed windows"""
    refresh_interval_s: float = 60.0
    """refresh the 1m/1h rollup tables at most this often"""
    maintenance_interval_s: float = 300.0
    """partition upkeep and retention"""
    raw_retention_days: float = 30.0
    pod_usage_retention_days: float = 400.0

    def limits(self) -> Limits:
        return Limits(max_gpus=self.max_gpus, max_future_s=self.max_future_s)
