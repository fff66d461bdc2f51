"""The health-scoring service's one frozen settings object, read once from ``GPUAWARE_HEALTH_SCORING_*``.

``NATS_URL`` / ``DATABASE_URL`` are honoured as fallbacks, as for every service. The health rules
themselves are ``gpuaware.health.HealthConfig``; the knobs an operator (or the demo) turns are
fields here, and ``health_config()`` builds the configuration from them.

Why ``time_scale``: every duration of the health rules (clean periods, how long an XID counts, the
risk model's horizon and time constants, the smoothing of throttle time and PCIe replays) is the
GPUs' own time, and so are its rates. Real GPUs are observed in their own time (``time_scale`` 1).
The digital twin runs its GPUs ``speed`` times faster than the wall clock the telemetry agent stamps
samples with; with ``time_scale = speed`` every duration is divided and every rate multiplied by it,
so a GPU of the twin is judged exactly as the same history would be judged on real hardware (a
clean day is a clean virtual day). Only ``stale_after_s`` is not scaled: staleness is about the
telemetry's arrival, which happens on the wall clock either way. ``SCALING`` says how each field of
the configuration scales; a test fails when a new field is not classified.

Sample (a twin at 576x, clean periods of two virtual hours)::

    GPUAWARE_HEALTH_SCORING_TIME_SCALE=576
    GPUAWARE_HEALTH_SCORING_QUARANTINE_CLEAN_S=7200
    GPUAWARE_HEALTH_SCORING_DEGRADED_CLEAN_S=7200
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from gpuaware.health import HealthConfig, RiskModel, ScoreRules, StateRules
from gpuaware.runtime import DatabaseSettings, SettingsError
from gpuaware.schemas import HEALTH_LEASE_BUCKET, HEALTH_SCORING, health_durable

__all__ = ["SCALING", "HealthScoringSettings", "scaled"]

# how each field of the configuration scales with the GPUs' time: "duration" (divided), "rate" (per
# unit of time: multiplied), "fixed" (a count, a threshold, a ratio, a temperature: unchanged)
SCALING: dict[type, dict[str, str]] = {
    StateRules: {
        "confirm_observations": "fixed", "quarantine_clean_s": "duration", "degraded_clean_s": "duration",
        "risk_degrade": "fixed", "risk_quarantine": "fixed", "xid_hold_s": "duration",
        "stale_after_s": "fixed",  # the telemetry's arrival: wall clock (see the module docstring)
        "gap_factor": "fixed", "audit_keep": "fixed", "issues_keep": "fixed",
    },
    RiskModel: {
        "horizon_h": "duration", "aftershock_k": "fixed", "aftershock_c_h": "duration", "burst_gap_s": "duration",
        "max_bursts": "fixed", "ce_fast_tau_h": "duration", "ce_slow_tau_h": "duration",
        # hazard per hour per (CE per hour): both scale, the ratio does not
        "ce_beta": "fixed", "ce_accel_alpha": "fixed", "ce_floor_per_h": "rate", "xid_tau_h": "duration",
        "xid_beta": "fixed",  # hazard per hour per (XID per hour), as ce_beta
        "thermal_fast_tau_h": "duration", "thermal_slow_tau_h": "duration", "thermal_drift_c": "fixed",
        "thermal_beta": "rate",  # hazard per hour per degree
    },
    ScoreRules: {
        "headroom_ok_c": "fixed", "hw_slowdown_margin_c": "fixed", "default_slowdown_c": "fixed",
        "throttle_tau_s": "duration", "throttle_degrade": "fixed", "power_over_limit": "fixed",
        "pcie_tau_s": "duration", "pcie_warn_per_min": "rate", "pcie_degrade_per_min": "rate",
        "nvlink_crc_degrade_per_s": "rate", "retired_pages_degrade": "fixed", "retired_pages_quarantine": "fixed",
        "ce_rate_warn_per_h": "rate", "stale_component": "fixed",
    },
}


def _scale_group(group: object, factor: float) -> object:
    kinds = SCALING[type(group)]
    changes = {}
    for f in dataclasses.fields(group):  # type: ignore[arg-type]  # every SCALING key is a dataclass of the config
        kind = kinds[f.name]
        value = getattr(group, f.name)
        if kind == "duration":
            changes[f.name] = value / factor
        elif kind == "rate":
            changes[f.name] = value * factor
    return dataclasses.replace(group, **changes)  # type: ignore[type-var]  # every SCALING key is a dataclass of the config


def scaled(config: HealthConfig, time_scale: float) -> HealthConfig:
    """The configuration judged on a clock ``time_scale`` times slower than the GPUs' own."""
    if time_scale == 1.0:
        return config
    return dataclasses.replace(config, states=_scale_group(config.states, time_scale),  # type: ignore[arg-type]  # every SCALING key is a dataclass of the config
                               risk=_scale_group(config.risk, time_scale),  # type: ignore[arg-type]  # every SCALING key is a dataclass of the config
                               score=_scale_group(config.score, time_scale))  # type: ignore[arg-type]  # every SCALING key is a dataclass of the config


_STATES = StateRules()
_RISK = RiskModel()


class HealthScoringSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_HEALTH_SCORING_"

    service_name: str = HEALTH_SCORING

    # --- input ---------------------------------------------------------------------------------------
    input: Literal["sampled", "rolledup"] = "sampled"
    """``sampled``: the agents' raw samples (``telemetry.gpu.sampled.v1``): cumulative ECC counters
    (corrected ones too), pending and failed row remaps, NVLink links, power limits, throttle reasons,
    within seconds. ``rolledup``: the collector's one-minute rollups (``telemetry.gpu.rolledup.v1``):
    a tenth of the messages on a large fleet, but no corrected errors, remap flags or NVLink, and a
    window arrives only after the collector's grace period (90 s): too late to keep the next pods off
    a GPU that fell off the bus. Never both: the same GPU seen twice would read as late input."""
    durable: str = ""
    """the durable consumer every replica shares; empty = ``health-scoring-<cluster>``"""
    fetch_batch: int = 128
    poll_s: float = 1.0
    ack_wait_s: float = 30.0
    max_deliver: int = 20
    """deliveries before a message is dead-lettered (a database outage costs one per ``hold_s``)"""
    max_ack_pending: int = 4096
    inventory_wait_s: float = 10.0
    """at start, wait this long for the inventories (the GPUs' models) before consuming telemetry"""
    agent_heartbeat_s: float = 30.0
    """the agents' slowest heartbeat (``GPUAWARE_TELEMETRY_AGENT_SLOW_S``): with adaptive sampling a
    stable GPU's row comes only this often, so a sample stands for at least this long and only a longer
    silence counts as missing samples (lost batches are counted from the nodes' ``seq`` instead)"""

    # --- leadership (two replicas: one leads, the other stands by) ------------------------------------
    lease_bucket: str = HEALTH_LEASE_BUCKET
    """NATS KV bucket of the leader lease; the key is the cluster name"""
    lease_ttl_s: float = 3.0
    """a leader that died is replaced within about this long (plus ``lease_poll_s`` and the takeover:
    the last checkpoint read back and the durable consumer created)"""
    lease_poll_s: float = 0.25
    """how often a standby tries to take the lease"""
    leader_wait_s: float = 5.0
    """how long a standby holds a ``health.cordon`` it relays while no leader answers (a takeover under way)"""

    # --- output --------------------------------------------------------------------------------------
    score_window_s: float = 60.0
    """each GPU's ``GpuScored`` at most once per window of the telemetry's time ... """
    score_delta: float = 10.0
    """... unless its score moved by this much since the last one published, or its state changed"""
    alert_resend_s: float = 0.0
    """re-send ``AlertRaised`` while a condition holds, this often (telemetry time); 0 = once"""
    tick_s: float = 5.0
    """how often GPUs whose telemetry went stale are looked for (and scored, and alerted on)"""

    # --- persistence ---------------------------------------------------------------------------------
    checkpoint_s: float = 1.0
    """the GPUs' state is written this often (at once after a state change, an alert or an override);
    a message is acknowledged only once a checkpoint holding its effect is committed"""
    hold_s: float = 20.0
    """while the database is unreachable a message waits this long for a checkpoint, then it is handed
    back for redelivery (its effect is kept in memory and written as soon as the database returns)"""
    retention_days: float = 90.0
    maintenance_interval_s: float = 3600.0

    # --- the health rules (gpuaware.health.HealthConfig), in the GPUs' own time ---------------------
    time_scale: float = 1.0
    """the GPUs' seconds per second of the telemetry's clock: 1 for real GPUs, the twin's speed for the
    digital twin (see the module docstring)"""
    confirm_observations: int = _STATES.confirm_observations
    quarantine_clean_s: float = _STATES.quarantine_clean_s
    degraded_clean_s: float = _STATES.degraded_clean_s
    xid_hold_s: float = _STATES.xid_hold_s
    stale_after_s: float = _STATES.stale_after_s
    """no telemetry for this long (wall clock, never scaled): stale"""
    risk_degrade: float = _STATES.risk_degrade
    risk_quarantine: float = _STATES.risk_quarantine
    risk_horizon_h: float = _RISK.horizon_h
    aftershock_k: float = _RISK.aftershock_k

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise SettingsError(f"GPUAWARE_HEALTH_SCORING_TIME_SCALE must be positive, got {self.time_scale}")
        self.require_positive("score_window_s", "tick_s", "checkpoint_s", "hold_s", "lease_ttl_s", "lease_poll_s",
                              "leader_wait_s")
        try:
            self.health_config()
        except ValueError as exc:
            raise SettingsError(f"invalid health rules (GPUAWARE_HEALTH_SCORING_*): {exc}") from None

    def durable_name(self) -> str:
        return self.durable or health_durable(self.cluster)

    def health_config(self) -> HealthConfig:
        """The health rules these settings describe, on the telemetry's clock (``time_scale`` applied)."""
        base = HealthConfig().replace(
            states={"confirm_observations": self.confirm_observations, "quarantine_clean_s": self.quarantine_clean_s,
                    "degraded_clean_s": self.degraded_clean_s, "xid_hold_s": self.xid_hold_s,
                    "stale_after_s": self.stale_after_s, "risk_degrade": self.risk_degrade,
                    "risk_quarantine": self.risk_quarantine},
            risk={"horizon_h": self.risk_horizon_h, "aftershock_k": self.aftershock_k})
        return scaled(base, self.time_scale)
