"""Failure risk from trends: the probability of a hard failure within a horizon, before it happens.

Why a hazard and not a threshold per signal: the signals that precede an uncorrectable error differ
in kind (a corrected-error storm, an earlier uncorrectable burst on the same GPU, a run of hardware
XIDs, a GPU drifting hotter at the same work), and a hazard adds them in one unit, expected hard
failures per hour, which turns into a probability the operator can read ("5 % within a week").

The arithmetic (times in hours, ``H`` the horizon, ``RiskModel`` holds every constant):

1. Corrected errors (CE). Two exponentially weighted sums of corrected errors with time constants
   ``tau_f`` (6 h) and ``tau_s`` (168 h) give two rates, ``r_f = S_f / tau_f`` and
   ``r_s = max(S_s / tau_s, floor)`` in CE per hour. At a steady rate both equal it; when errors
   speed up, ``r_f`` runs ahead of ``r_s``. The acceleration is ``a = max(1, r_f / r_s)``, and

       lambda_ce = beta_ce * r_f * (1 + alpha * ln a)

   e.g. 20 CEs arriving at once on a quiet GPU: S_f = S_s = 20, r_f = 20/6 = 3.33, r_s = 20/168 =
   0.119, a = 28, ln a = 3.33; with beta_ce = 5e-5, alpha = 0.5: lambda_ce = 5e-5 * 3.33 * 2.67 =
   4.44e-4 per hour.

2. Aftershocks of hard errors. Uncorrectable errors recur on the same GPU (Calchas, ATC'24; Delta:
   a few GPUs cause most uncontained errors), in clusters that thin out with time like aftershocks
   (Omori's law). Each burst ``i`` of hard errors (uncorrectable ECC, a quarantining XID, a failed
   remap; errors closer than ``burst_gap`` form one burst) adds ``K / (dt_i + c)``, ``dt_i`` hours
   since the burst's last error. Over the horizon this integrates exactly to

       Lambda_aftershock = sum_i K * ln((dt_i + c + H) / (dt_i + c))

   e.g. one burst 100 h ago, K = 1.4, c = 1, H = 168: 1.4 * ln(269 / 101) = 1.37.

3. XID frequency: ``r_x = S_x / tau_x`` with ``S_x`` an exponentially weighted count of the system
   and hardware XIDs that do not quarantine by themselves (each 1; application and unknown XIDs 0;
   a quarantining XID starts a burst and is counted by the aftershock term of (2), once);
   ``lambda_xid = beta_xid * r_x``. E.g. two XID 32 an hour apart: S_x = 1.96, r_x = 0.082,
   168 * 5e-3 * 0.082 = 0.069 expected, risk 0.066: degraded; one alone: 0.034, risk 0.034: not.

4. Thermal drift: ``d`` = the short-term mean temperature minus the long-term one (time constants
   1 h and 24 h); ``lambda_thermal = beta_thermal * max(0, d - drift_c)``, counted only while the
   GPU is within ``ScoreRules.headroom_ok_c`` of its slowdown temperature: a GPU warming from idle to
   full load far below it is working, not drifting. E.g. 12 degC of drift near the limit:
   168 * 1e-4 * (12 - 5) = 0.118 expected, risk 0.11.

The rates of 1, 3 and 4 are taken as constant over the horizon, so

    Lambda = Lambda_aftershock + H * (lambda_ce + lambda_xid + lambda_thermal)
    risk   = 1 - exp(-Lambda)

e.g. the burst of (2) alone: risk = 1 - exp(-1.37) = 0.75; with nothing but the 20 CEs of (1):
Lambda = 168 * 4.44e-4 = 0.0746, risk = 0.072, above the 5 % at which a GPU is degraded: the risk
degrades a GPU before its first hard error.

The exponentially weighted sums are updated with the observation's elapsed time, and an increment
``x`` that arrived over ``dt`` hours is weighted ``x * tau/dt * (1 - exp(-dt/tau))`` (spread evenly
over the interval), so a rate does not depend on how often the GPU is sampled, and a counter that
jumps after a gap in the telemetry does not read as a storm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuaware.health.config import RiskModel

__all__ = ["DRIVERS", "RiskEstimate", "aftershock_expected", "ce_hazard", "decay", "estimate", "spread"]

DRIVERS = ("ue_recurrence", "ce_rate", "xid_frequency", "thermal_drift")
"""names of the risk's parts, as they appear in ``RiskEstimate.expected`` and in ``reasons``"""


def decay(value: float, dt_h: float, tau_h: float) -> float:
    """An exponentially weighted sum ``dt_h`` hours later."""
    return value * math.exp(-dt_h / tau_h) if dt_h > 0 else value


def spread(x: float, dt_h: float, tau_h: float) -> float:
    """Weight of an increment ``x`` that arrived evenly over the last ``dt_h`` hours."""
    if dt_h <= 0 or x == 0:
        return x
    q = dt_h / tau_h
    return x * (-math.expm1(-q)) / q if q > 1e-9 else x


def ce_hazard(ce_fast: float, ce_slow: float, m: RiskModel) -> tuple[float, float, float]:
    """(hazard per hour, short rate, acceleration) from the two weighted sums of corrected errors."""
    r_f = ce_fast / m.ce_fast_tau_h
    if r_f <= 0:
        return 0.0, 0.0, 1.0
    r_s = max(ce_slow / m.ce_slow_tau_h, m.ce_floor_per_h)
    accel = max(1.0, r_f / r_s)
    return m.ce_beta * r_f * (1.0 + m.ce_accel_alpha * math.log(accel)), r_f, accel


def aftershock_expected(hours_since: list[float], m: RiskModel) -> float:
    """Expected hard failures within the horizon from earlier bursts (``hours_since`` their last error)."""
    if m.aftershock_k == 0:
        return 0.0
    c, h = m.aftershock_c_h, m.horizon_h
    return sum(m.aftershock_k * math.log1p(h / (max(dt, 0.0) + c)) for dt in hours_since)


@dataclass(frozen=True, slots=True)
class RiskEstimate:
    risk: float
    """probability of a hard failure within the horizon, 0..1"""
    expected: dict[str, float]
    """expected hard failures within the horizon, by driver (``DRIVERS``)"""
    ce_rate_per_h: float = 0.0
    ce_acceleration: float = 1.0

    @property
    def drivers(self) -> tuple[str, ...]:
        """The parts that carry at least a tenth of the total, largest first (for ``reasons``)."""
        total = sum(self.expected.values())
        if total <= 0:
            return ()
        parts = sorted(((v, k) for k, v in self.expected.items() if v >= 0.1 * total and v > 0), reverse=True)
        return tuple(k for _, k in parts)


def estimate(*, bursts_hours_since: list[float], ce_fast: float, ce_slow: float, xid_sum: float,
             drift_c: float, m: RiskModel) -> RiskEstimate:
    """The risk now, from the tracker's weighted sums (see the module docstring)."""
    lam_ce, r_f, accel = ce_hazard(ce_fast, ce_slow, m)
    lam_xid = m.xid_beta * xid_sum / m.xid_tau_h
    lam_th = m.thermal_beta * max(0.0, drift_c - m.thermal_drift_c)
    expected = {
        "ue_recurrence": aftershock_expected(bursts_hours_since, m),
        "ce_rate": m.horizon_h * lam_ce,
        "xid_frequency": m.horizon_h * lam_xid,
        "thermal_drift": m.horizon_h * lam_th,
    }
    total = sum(expected.values())
    return RiskEstimate(risk=-math.expm1(-total), expected=expected, ce_rate_per_h=r_f, ce_acceleration=accel)
