"""The placement service's one frozen settings object, read once from `GPUAWARE_PLACEMENT_*`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from gpuaware.placement import DEFAULT_PROFILE, REGISTRY, Kind, ProfileError
from gpuaware.runtime import ServiceSettings, SettingsError
from gpuaware.schemas import placement_durable


class PlacementSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_PLACEMENT_"

    service_name: str = "placement"

    policy: str = DEFAULT_PROFILE
    """A registered policy (`gpuaware.placement.POLICIES`, case-insensitive). The default, GpuAware, is
    the engine's best packing policy (WasteGradient: FGD's gradient on expected wasted GPU) plus the
    health, forecast-headroom, topology and thermal/power scores, which only steer when their
    signals arrive (health-scoring, forecasting, the collector's rollups)."""
    profile: str = ""
    """A custom profile as JSON (`{"score": [{"name": "fgd", "weight": 1000}], "gpu": "fgd"}`);
    overrides `policy` when set. Checked completely when the settings load (every plugin name known,
    every argument of the right type, no unknown keys: `gpuaware.placement.registry`), so a bad
    profile stops the service at start-up with the field named, not at its first decision."""
    policy_source: Literal["settings", "crd"] = "settings"
    """``settings``: the profile is `profile`, else `policy`; ``crd`` (Kubernetes mode, the chart's
    default): the GPUPolicy object named `policy_object`, watched and hot-reloaded, `profile` / `policy`
    applying while it does not exist or none of its generations validated (`crd_policy.py`)"""
    policy_object: str = "default"
    """crd: the name of the GPUPolicy this cluster's placement follows"""
    typical_pods_file: str = ""
    """An openb-format pod list (`cpu_milli,num_gpu,gpu_milli[,gpu_spec]`) whose request mix the
    fragmentation-aware scores assume. Empty: learned from the pending pods seen (a small built-in
    prior until `typical_min_pods` have arrived)."""
    typical_min_pods: int = 200
    """pods seen before the learned request mix replaces the prior"""
    typical_window: int = 5000
    """the learned mix covers this many recent pods; it is re-derived every `typical_window` pods
    and adopted when it moved by more than `typical_drift`"""
    typical_drift: float = 0.15
    """L1 distance between request mixes that makes the scores be rebuilt (their caches restart)"""
    seed: int = 0
    """seeds the node tie-break order (as the FGD simulator's random node names do)"""

    quota_enabled: bool = True
    """Ask `quota.admit` before committing a decision, when a quota service answers. With nobody
    listening every pod is admitted (logged once) and asking again waits `quota_recheck_s`."""
    quota_timeout_s: float = 0.5
    quota_recheck_s: float = 10.0
    quota_tree: str = ""
    """the quota service's queue tree file (its ``TREE``): its strict partitions become a Filter, so
    nodes reserved to some queues are never used by others' pods (partitions.py); empty = none"""

    leader_election: Literal["nats", "kubernetes"] = "nats"
    """who elects the leader: the NATS KV lease (embedded setup) or a coordination.k8s.io Lease
    `gpuaware-placement-<cluster>` (cluster mode, the chart's default; `gpuaware.k8s.election`)"""
    lease_namespace: str = ""
    """kubernetes election: the Lease's namespace; empty = the pod's own (service-account file), else `default`"""
    lease_k8s_duration_s: int = 15
    """kubernetes election: leaseDurationSeconds (client-go's default)"""
    lease_bucket: str = "placement-leader"
    """NATS KV bucket of the leader lease; the key is the cluster name"""
    lease_ttl_s: float = 3.0
    """a crashed leader is replaced within about this long (plus `lease_poll_s`)"""
    lease_poll_s: float = 0.25
    """how often a standby tries to take the lease"""
    takeover_attempts: int = 5
    """Tries of each takeover step (the view catching up with the streams, creating the pending-pods
    consumer) before the instance that won the lease gives it up so a standby takes over (and stays
    out of the election for `takeover_cooldown_s`). A replay still making progress is not a failure."""
    takeover_backoff_s: float = 0.25
    """delay before a takeover step's second try, doubling with each further try (bus.RetryPolicy)"""
    takeover_backoff_cap_s: float = 2.0
    """longest delay between two tries of a takeover step: bounds how long after a NATS blip clears
    a new leader waits before trying again"""
    takeover_sync_timeout_s: float = 2.0
    """how long one try waits for the followers to hold everything stored (what a previous leader
    decided just before it stopped), and how long a replay may show no progress"""
    takeover_cooldown_s: float = 5.0
    """after giving the lease up, how long this instance stays out of the election: a standby
    (polling every `lease_poll_s`) wins first; a lone instance tries to take over again afterwards"""

    world_snapshot: bool = True
    """Seed the view from the world's truth (`world.snapshot`, answered by the binder) on start: the
    nodes as the world names them and every bound pod. Without an answer the view comes from the
    streams (agents' inventories, the binder's events) and the world is asked again every
    `world_retry_s`."""
    world_retry_s: float = 2.0

    pending_durable: str = ""
    """durable consumer of pending pods; empty = `placement-<cluster>`"""
    pending_ack_wait_s: float = 2.0
    """a pending pod handed to a leader that died is redelivered after this long"""
    pending_batch: int = 128
    """pending pods pulled per fetch (decided one after another, their decisions pipelined)"""
    pending_max_ack_pending: int = 4096
    pending_max_deliver: int = 10

    retry_interval_s: float = 0.02
    """least time between two passes over the parked pods after capacity was freed"""
    retry_batch: int = 256
    """most decisions one retry pass makes before yielding to new pending pods"""
    preemption: bool = True
    """Let a pod that fits nowhere evict pods of lower priority (checkpointing those that can first);
    the plan rides in the decision and the binder executes it. False: a pod waits for capacity."""
    preemption_cooldown_s: float = 30.0
    """least time between two preemption plans for the same pod"""
    max_victims: int = 16
    """most pods one plan may evict"""
    victim_min_run_s: float = 0.0
    """a pod runs at least this long after its bind before a preemption or reclaim stops it (a lease; an
    elastic job's workers beyond its minimum are exempt: a shrink stops nothing)"""
    victim_max_requeues: int = 2
    """a pod already re-queued this many times (preempted, or refused by the binder) is stopped no more:
    a cap on how often one job pays a stop (0: no cap; spares exempt)"""
    resize_hold_s: float = 300.0
    """an elastic job shrunk less than this long ago does not grow back, and one grown less than this
    long ago gives no worker to another tenant's swap (either reversal costs two restarts and undoes the
    move before it; 0: no hold)"""
    queue_order: str = "priority"
    """The order parked pods get freed capacity in: ``priority`` (then arrival; kube-scheduler's
    PrioritySort) or ``fair-share`` (starved tenants first and they may reclaim from tenants above
    their share; then shortest predicted runtime: `gpuaware.placement.queue_order`). It and the
    fair-share settings below become the profile's ``queue_sort`` entry unless the profile names one."""
    starved_below: float = 1.0
    """fair-share: a tenant running less than this fraction of its fair share is starved"""
    reclaim_min_runtime_s: float = 600.0
    """fair-share: a pod runs at least this long (world seconds since its bind) before it is reclaimed"""
    duration_default_s: float = 3600.0
    """fair-share: the runtime assumed for a pod until the duration predictor (`forecasting.duration`) answers"""
    turn_due: float = 0.1
    """fair-share: turn-taking (`gpuaware.quota.turns`; 0: off). A tenant below its share and owed this
    fraction of it lately (decayed mean shortfall, half-life 1 h) is starved, and may also reclaim pods
    of tenants at or above their shares that are not owed a turn, even if that leaves them below."""
    turn_lease_s: float = 900.0
    """fair-share: a pod runs at least this long (world seconds since its bind) before a turn takes it"""
    reservations: int = 0
    """fair-share: nodes held at once for starved tenants' pods wider than one GPU, others backfilling
    them only with pods predicted to end first (EASY). Off by default."""
    forecasts: bool = True
    """follow the forecasting service (per-GPU utilisation for the forecast-headroom score, demand for the
    head-room and the power planner's band); off: placement decides as if no forecast ever came (the
    demo's A/B runs the forecasting service in both arms and switches only this)"""
    forecast_headroom: bool = True
    """keep free the latency-sensitive classes' forecast demand (the p90's peak over ``headroom_horizon_s``
    less what they hold), holding back deferrable or checkpointable pods only (``ForecastHeadroom``)"""
    headroom_horizon_s: float = 1800.0
    """how far ahead (the pod events' own time) the head-room looks"""
    power_planner: bool = False
    """the leader recommends switching idle GPU nodes off ahead of falling demand and on ahead of rising
    demand (``gpuaware.power.FleetPlanner`` on the cluster's demand forecast; the binder carries them out:
    the twin switches its nodes, Kubernetes nodes are cordoned and annotated for the autoscaler or BMC tool
    that switches them). Off by default: switching real nodes off is an operator's choice."""
    power_step_s: float = 600.0
    """one power decision per this much of the world's time (the demand forecast's step)"""
    power_boot_delay_s: float = 600.0
    """how long a node switched on takes to take pods: the planner keeps the forecast covered that far"""
    power_buffer_nodes: int = 2
    """GPU nodes kept powered above the forecast's p90 (and above demand after a shortfall)"""
    power_idle_steps: int = 3
    """a node goes off only after this many steps without a pod (and the busiest of these steps stays powered)"""
    power_hold_steps: int = 10
    """steps with no power-down after a shortfall"""
    latency_classes: str = "inference-critical,interactive"
    """comma-separated priority classes never held back, whose demand the head-room is kept for (the
    forecasting service's setting of the same name must match)"""
    duration_timeout_s: float = 1.0
    checkpoint_grace_s: float = 60.0
    """how long (world time) a victim that can checkpoint is given to do so before it is evicted"""
    extender_port: int = 0
    """serve the kube-scheduler extender (filter, prioritize, preempt, bind) on this port; 0 = off
    (`extender_http.py`)"""
    extender_host: str = "0.0.0.0"
    extender_bind: bool = False
    """the extender's bind verb creates the Binding (needs `create` on `pods/binding` in the cluster)"""
    explain_publish: bool = True
    """publish each answered explanation on `placement.pod.explained.v1` (audit)"""
    max_tombstones: int = 200_000
    """finished pods remembered to ignore their late events"""

    def __post_init__(self) -> None:
        try:
            REGISTRY.canonical_policy(self.policy)
        except ProfileError as exc:
            raise SettingsError(f"GPUAWARE_PLACEMENT_POLICY: {exc}") from None
        if self.profile:
            try:
                value = json.loads(self.profile)
            except ValueError as exc:
                raise SettingsError(f"GPUAWARE_PLACEMENT_PROFILE is not JSON: {exc}") from None
            if not isinstance(value, dict):
                raise SettingsError("GPUAWARE_PLACEMENT_PROFILE must be a JSON object")
            try:
                REGISTRY.validate(value)
            except ProfileError as exc:
                raise SettingsError(f"GPUAWARE_PLACEMENT_PROFILE: {exc}") from None
        if self.lease_ttl_s <= 0 or self.lease_poll_s <= 0:
            raise SettingsError("GPUAWARE_PLACEMENT_LEASE_TTL_S and _LEASE_POLL_S must be > 0")
        if self.takeover_attempts < 1:
            raise SettingsError("GPUAWARE_PLACEMENT_TAKEOVER_ATTEMPTS must be >= 1")
        if min(self.takeover_backoff_s, self.takeover_backoff_cap_s, self.takeover_sync_timeout_s) <= 0 \
                or self.takeover_cooldown_s < 0:
            raise SettingsError("GPUAWARE_PLACEMENT_TAKEOVER_BACKOFF_S, _BACKOFF_CAP_S and _SYNC_TIMEOUT_S must be > 0, "
                                "_COOLDOWN_S >= 0")
        orders = REGISTRY.names(Kind.QUEUE_SORT)
        if self.queue_order not in orders:
            raise SettingsError(f"GPUAWARE_PLACEMENT_QUEUE_ORDER must be one of {', '.join(orders)}, "
                                f"not {self.queue_order!r}")
        if self.headroom_horizon_s <= 0:
            raise SettingsError("GPUAWARE_PLACEMENT_HEADROOM_HORIZON_S must be > 0")
        if self.power_step_s <= 0 or self.power_boot_delay_s < 0:
            raise SettingsError("GPUAWARE_PLACEMENT_POWER_STEP_S must be > 0 and _POWER_BOOT_DELAY_S >= 0")
        if min(self.power_buffer_nodes, self.power_idle_steps, self.power_hold_steps) < 0:
            raise SettingsError("GPUAWARE_PLACEMENT_POWER_BUFFER_NODES, _POWER_IDLE_STEPS and _POWER_HOLD_STEPS "
                                "must be >= 0")
        if self.victim_min_run_s < 0 or self.victim_max_requeues < 0 or self.resize_hold_s < 0:
            raise SettingsError("GPUAWARE_PLACEMENT_VICTIM_MIN_RUN_S, _VICTIM_MAX_REQUEUES and _RESIZE_HOLD_S "
                                "must be >= 0")
        if not 0 < self.starved_below <= 1 or self.reclaim_min_runtime_s < 0 or self.duration_default_s <= 0 \
                or self.duration_timeout_s <= 0 or self.reservations < 0 or self.turn_due < 0 or self.turn_lease_s < 0:
            raise SettingsError("GPUAWARE_PLACEMENT_STARVED_BELOW must be in (0, 1], _RECLAIM_MIN_RUNTIME_S >= 0, "
                                "_DURATION_DEFAULT_S and _DURATION_TIMEOUT_S > 0, _RESERVATIONS, _TURN_DUE and "
                                "_TURN_LEASE_S >= 0")
        if self.pending_batch < 1 or self.retry_batch < 1:
            raise SettingsError("GPUAWARE_PLACEMENT_PENDING_BATCH and _RETRY_BATCH must be >= 1")

    @property
    def policy_name(self) -> str:
        return "custom" if self.profile else REGISTRY.canonical_policy(self.policy)

    @property
    def queue_sort(self) -> dict[str, Any] | None:
        """`queue_order` and the fair-share settings as a profile's ``queue_sort`` entry (None:
        priority, what a profile naming no order gets)."""
        if self.queue_order == "priority":
            return None
        if self.queue_order != "fair-share":
            return {"name": self.queue_order}
        return {"name": "fair-share", "args": {
            "starved_below": self.starved_below, "default_s": self.duration_default_s,
            "min_runtime_s": self.reclaim_min_runtime_s, "turn_due": self.turn_due, "turn_lease_s": self.turn_lease_s}}

    @property
    def policy_config(self) -> dict[str, Any]:
        """The profile (`profile`, else the policy's), with `queue_sort` from the settings unless it names one."""
        config: dict[str, Any] = json.loads(self.profile) if self.profile else REGISTRY.policy_config(self.policy)
        if self.queue_sort is not None:
            config.setdefault("queue_sort", self.queue_sort)
        return config

    @property
    def latency_class_set(self) -> frozenset[str]:
        return frozenset(c.strip() for c in self.latency_classes.split(",") if c.strip())

    @property
    def durable(self) -> str:
        return self.pending_durable or placement_durable(self.cluster)

    def lease_k8s_namespace(self) -> str:
        if self.lease_namespace:
            return self.lease_namespace
        sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return sa.read_text().strip() if sa.is_file() else "default"
