"""Every knob of health scoring, grouped, each with the reason for its default.

One frozen ``HealthConfig`` serves the service, the evaluator and the benchmarks, so a figure in
``bench/results/health.json`` is a decision the service would make with the same configuration.
``HealthConfig.replace(...)`` and the groups' ``dataclasses.replace`` give variants; ``validate()``
runs in ``__post_init__`` so a bad configuration fails at start-up (a permanent error), not in a
handler.

Sample (what the service's settings would hold, as keyword arguments)::

    HealthConfig(
        states=StateRules(confirm_observations=2, quarantine_clean_s=86400, degraded_clean_s=86400),
        risk=RiskModel(horizon_h=168, aftershock_k=1.4),
    )
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HealthConfig", "RiskModel", "ScoreRules", "StateRules"]

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class StateRules:
    """Hysteresis: how evidence becomes a state, and how a state is left."""

    confirm_observations: int = 2
    """soft evidence (thermal, power, PCIe, NVLink, the failure risk) must hold on this many consecutive
    observations before it raises the state: one noisy sample never flips a GPU. Hard evidence (an
    uncorrectable ECC error, a fatal or hardware XID, a pending or failed row remap) acts at once: it
    is a driver's statement, not a noisy gauge."""
    quarantine_clean_s: float = 1 * DAY
    """quarantined -> degraded once no quarantine-level evidence (and no risk above
    ``risk_quarantine``) was seen for this long. A day covers a reset and a burn-in."""
    degraded_clean_s: float = 1 * DAY
    """degraded -> healthy once no degrade-level evidence (and no risk above ``risk_degrade``) was seen
    for this long, counted from entering degraded at the earliest. The risk model already keeps a GPU
    with an error history degraded for as long as its hazard is high; this is the minimum."""
    risk_degrade: float = 0.05
    """failure risk (probability of a hard failure within ``RiskModel.horizon_h``) at which a GPU is
    kept from critical work: a 5 % chance of an uncorrectable error within a week."""
    risk_quarantine: float = 0.5
    """failure risk at which a GPU takes no work: a hard failure within the horizon is more likely than not."""
    xid_hold_s: float = 1 * HOUR
    """how long one XID counts as current evidence (its score and its state effect)"""
    stale_after_s: float = 300.0
    """no observation for this long: the telemetry is stale (scored, never a state change)"""
    gap_factor: float = 3.0
    """an observation arriving more than this many intervals after the previous one marks a gap"""
    audit_keep: int = 32
    """cordon/uncordon records kept per GPU (the service persists them)"""
    issues_keep: int = 16
    """recent bad-input explanations kept per GPU"""

    def validate(self) -> None:
        if self.confirm_observations < 1:
            raise ValueError("confirm_observations must be at least 1")
        for name in ("quarantine_clean_s", "degraded_clean_s", "xid_hold_s", "stale_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 0 < self.risk_degrade <= self.risk_quarantine <= 1:
            raise ValueError("need 0 < risk_degrade <= risk_quarantine <= 1")
        if self.gap_factor < 1:
            raise ValueError("gap_factor must be at least 1")


@dataclass(frozen=True, slots=True)
class RiskModel:
    """The failure-risk estimate (see ``gpuaware.health.risk`` for the arithmetic)."""

    horizon_h: float = 168.0
    """the risk is the probability of a hard failure within this many hours (a week: the window the
    evaluation's precision uses)"""
    aftershock_k: float = 1.4
    """aftershock amplitude K: each burst of hard errors adds a hazard K / (hours since it + c).
    Tuned on the Calchas public file (bench/health.py keeps the sweep): the smallest value of the grid
    0.4 .. 2.0 whose recall is at least the never-recover rule's at 1, 6 and 24 h lead, on the whole
    file and on each half of it. With ``risk_degrade`` 0.05 and ``risk_quarantine`` 0.5 one burst keeps
    a GPU quarantined for ~11 days (1.4 * ln(1 + 168 / (dt + 1)) >= ln 2 until dt = 261 h) and
    degraded for ~6 months (>= -ln 0.95 until dt = 4,500 h): the public file has a GPU whose second
    uncorrectable burst came 3,938 h after its first."""
    aftershock_c_h: float = 1.0
    """aftershock offset c in hours (keeps the hazard finite right after a burst)"""
    burst_gap_s: float = 6 * HOUR
    """hard errors closer than this to the previous one belong to the same burst (one aftershock term):
    the hazard must not depend on how often the telemetry is sampled"""
    max_bursts: int = 64
    """bursts remembered per GPU (the oldest contribute least)"""
    ce_fast_tau_h: float = 6.0
    """time constant of the short corrected-error rate"""
    ce_slow_tau_h: float = 168.0
    """time constant of the long corrected-error rate (the GPU's own baseline)"""
    ce_beta: float = 5e-5
    """hazard per hour for each corrected error per hour (short rate). Not tunable on the public data
    (2 of its 27 servers with uncorrectable errors show corrected ones first); set so that about 150
    CE a day sustained, or a sudden burst of ~15 within an hour on a quiet GPU, reaches
    ``risk_degrade`` (NVIDIA's XID 92 flags a high single-bit error rate the same way)."""
    ce_accel_alpha: float = 0.5
    """weight of the acceleration ln(short rate / long rate) on the corrected-error hazard"""
    ce_floor_per_h: float = 0.01
    """the long rate never counts as below this (a GPU without history is not infinitely accelerating)"""
    xid_tau_h: float = 24.0
    """time constant of the XID frequency"""
    xid_beta: float = 5e-3
    """hazard per hour for each non-quarantining system or hardware XID per hour"""
    thermal_fast_tau_h: float = 1.0
    thermal_slow_tau_h: float = 24.0
    thermal_drift_c: float = 5.0
    """a short-term mean temperature this far above the long-term one is drift"""
    thermal_beta: float = 1e-4
    """hazard per hour per degree of drift beyond ``thermal_drift_c``: drift alone degrades (from about
    8 degC beyond it) and cannot quarantine below about 46 degC beyond it, where the hardware slowdown
    rule has long taken the GPU out anyway; 2e-4 quarantined 6 % of the simulated fleet's GPUs whose
    fans failed (bench/results/health.json, ``fleet.tuning``), with no failure caught earlier"""

    def validate(self) -> None:
        for name in ("horizon_h", "aftershock_c_h", "ce_fast_tau_h", "ce_slow_tau_h", "xid_tau_h",
                     "thermal_fast_tau_h", "thermal_slow_tau_h", "ce_floor_per_h"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        for name in ("aftershock_k", "ce_beta", "ce_accel_alpha", "xid_beta", "thermal_beta", "burst_gap_s"):
            if getattr(self, name) < 0 or not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a non-negative number")
        if self.ce_fast_tau_h >= self.ce_slow_tau_h:
            raise ValueError("ce_fast_tau_h must be shorter than ce_slow_tau_h")
        if self.thermal_fast_tau_h >= self.thermal_slow_tau_h:
            raise ValueError("thermal_fast_tau_h must be shorter than thermal_slow_tau_h")
        if self.max_bursts < 1:
            raise ValueError("max_bursts must be at least 1")


@dataclass(frozen=True, slots=True)
class ScoreRules:
    """Thresholds of the score components (0..100 each) and of the soft evidence they raise."""

    headroom_ok_c: float = 10.0
    """thermal headroom (model's slowdown temperature minus the reading) at or above which the thermal
    component is 100; it falls linearly to 50 at zero headroom"""
    hw_slowdown_margin_c: float = 5.0
    """hardware slowdown starts this far above the software slowdown temperature (the catalog's
    convention); at or beyond it the thermal component is 0 and the GPU degrades"""
    default_slowdown_c: float = 87.0
    """slowdown temperature for a GPU whose model is unknown"""
    throttle_tau_s: float = 600.0
    """time constant of the thermal-throttle share"""
    throttle_degrade: float = 0.5
    """thermal-throttled half of the time (exponentially weighted over ~10 min): degrade"""
    power_over_limit: float = 1.1
    """drawing more than this multiple of the enforced limit is a power anomaly (sensor or VRM fault)"""
    pcie_tau_s: float = 300.0
    pcie_warn_per_min: float = 1.0
    pcie_degrade_per_min: float = 8.0
    """DCGM's health limit: more than 8 PCIe replays a minute"""
    nvlink_crc_degrade_per_s: float = 100.0
    """DCGM's NVLink CRC error limit"""
    retired_pages_degrade: int = 15
    """DCGM's soft limit of retired pages"""
    retired_pages_quarantine: int = 63
    """DCGM's limit of retired pages"""
    ce_rate_warn_per_h: float = 1.0
    """a short-term corrected-error rate above this is named (``ecc_corrected_rate``)"""
    stale_component: float = 50.0
    """the telemetry component while stale: placement prefers GPUs it can see"""

    def validate(self) -> None:
        if self.headroom_ok_c <= 0 or self.hw_slowdown_margin_c <= 0:
            raise ValueError("headroom_ok_c and hw_slowdown_margin_c must be positive")
        if not 0 < self.throttle_degrade <= 1:
            raise ValueError("throttle_degrade must be in (0, 1]")
        if self.pcie_warn_per_min > self.pcie_degrade_per_min:
            raise ValueError("pcie_warn_per_min must not exceed pcie_degrade_per_min")
        if self.retired_pages_degrade > self.retired_pages_quarantine:
            raise ValueError("retired_pages_degrade must not exceed retired_pages_quarantine")
        if not 0 <= self.stale_component <= 100:
            raise ValueError("stale_component must be in 0..100")


@dataclass(frozen=True, slots=True)
class HealthConfig:
    states: StateRules = field(default_factory=StateRules)
    risk: RiskModel = field(default_factory=RiskModel)
    score: ScoreRules = field(default_factory=ScoreRules)
    model_version: str = "rules-v1"
    """carried into ``GpuScored.model_version``"""

    def __post_init__(self) -> None:
        self.states.validate()
        self.risk.validate()
        self.score.validate()

    def replace(self, **changes: Any) -> HealthConfig:
        """A variant: ``cfg.replace(risk={"aftershock_k": 2.0})`` merges into a group, objects replace it."""
        out: dict[str, Any] = {}
        for name, value in changes.items():
            current = getattr(self, name)
            out[name] = dataclasses.replace(current, **value) if isinstance(value, dict) else value
        return dataclasses.replace(self, **out)
