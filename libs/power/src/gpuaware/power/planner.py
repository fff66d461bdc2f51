"""gpuaware's node-power planner: how many idle nodes to switch off or on at each step, ahead of demand.

CES (``ces``) decides from trends: it lowers the nodes on to ``active + buffer`` when the last steps and
the forecast both fall, and raises them only once demand has outrun them. Two things it leaves out
matter once nodes take time to boot: a node switched off now cannot serve again until ``boot_delay_s``
has passed, and a node switched on after a shortfall serves only after that delay too. The planner
decides from the forecast's upper band over exactly that stretch instead:

* **cover what cannot be undone**: keep powered (ready or booting) the larger of the nodes busy in the
  last ``idle_steps`` steps and the highest p90 forecast of busy nodes over the next
  ``boot_steps + 1 + lead_steps`` steps -- every step a node switched off now could not be back for,
  and ``lead_steps`` more -- plus ``buffer``.
  The p90 band is ``gpuaware.forecast``'s, calibrated on the forecast's own recent errors, so the
  head-room follows the error the forecast is making now rather than a fixed margin alone.
* **power up ahead**: the same rule raises the target as soon as the band, ``boot_steps + 1`` steps
  out, rises above what is powered -- the nodes are switched on one boot delay before the demand the
  forecast expects, not after it arrives (CES's only way up).
* **buffer and hold after a shortfall** (CES's rules 2 and 5, ``ces``): when demand outran the ready
  nodes, switch on at least ``demand + buffer`` and switch nothing off for ``hold`` steps: a forecast
  that just missed is not trusted to take nodes away at once.
* **idle before off**: a node is let go only once it has not been needed for ``idle_steps`` steps
  (Slurm's ``SuspendTime``, an idle time before power saving, is the same idea). Philly's 10-minute
  maxima dip for a single step and come back (an outage-like minute, a burst of jobs ending together);
  a forecast follows such a dip down, and switching off into it costs a shortfall one step later.
* **no flapping**: a power-down of fewer than ``min_change`` nodes is not worth a switch.

The defaults (30 minutes idle, one step of lead, 5 nodes of buffer -- about one p90 band's width over
the point forecast at 10-20 minutes on Philly) were checked on November with the forecast of the same
recipe run a month earlier (``outlook.MONTH_BEFORE``): there they switch off more node-hours than CES
with a persistence forecast with fewer shortfall events at boot delays of 0, 10 and 20 minutes
(``bench/energy.py`` reports that check beside December's figures). December was looked at too while
these rules were written, so its figures are not a blind test of these settings; November's are the
check that they were not fitted to December.

``plan_step`` is one decision, pure; ``Planner`` keeps the hold between steps for ``replay`` and
collects the recommendations (``power-down`` / ``power-up``, count, at).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpuaware.power.replay import Recommendation, Step, boot_steps

__all__ = ["PlanStep", "Planner", "PlannerParams", "plan_step"]


@dataclasses.dataclass(frozen=True, slots=True)
class PlannerParams:
    boot_delay_s: float = 600.0
    """how long a node switched on takes to serve (power-on, boot, rejoin the cluster)"""
    step_s: float = 600.0
    lead_steps: int = 1
    """steps beyond the boot delay the band must cover before a node is let go"""
    buffer: int = 5
    """nodes kept above the band (and above demand after a shortfall)"""
    hold: int = 10
    """steps with no power-down after a shortfall (CES's ``keep``)"""
    min_change: int = 1
    """the smallest power-down worth making"""
    idle_steps: int = 3
    """a node is switched off only after this many steps without being needed (the busiest of the last
    ``idle_steps`` steps stays powered)"""

    @property
    def reach(self) -> int:
        """steps ahead the band is read over: the boot delay's steps, the step it serves from, the lead"""
        return boot_steps(self.boot_delay_s, self.step_s) + 1 + self.lead_steps


@dataclasses.dataclass(frozen=True, slots=True)
class PlanStep:
    """Nodes to keep powered in the next step, the hold after this step, and the switch it takes."""

    target: int
    hold_until: int
    recommendation: Recommendation | None


def plan_step(step: Step, recent: np.ndarray, upper: np.ndarray, hold_until: int,
              params: PlannerParams = PlannerParams()) -> PlanStep:
    """One decision at the end of ``step``: ``recent`` is the demand of the last steps (the one just
    observed last), ``upper`` the p90 forecast of busy nodes issued now for the steps after it (NaN where
    none). The rules are the module docstring's, in its order."""
    p = params
    band = np.asarray(upper, dtype=np.float64)[: p.reach]
    band = band[np.isfinite(band)]
    idle = np.asarray(recent)[-max(1, p.idle_steps):]
    floor = max(step.demand, int(idle.max()) if len(idle) else step.demand)
    need = max(floor, math.ceil(float(band.max())) if len(band) else floor)
    target = need + p.buffer
    if step.short:
        target = max(target, step.demand + p.buffer)
        hold_until = step.index + p.hold
    target = min(target, step.total)
    if target < step.powered and (step.index < hold_until or step.powered - target < p.min_change):
        target = step.powered
    rec = None
    if target > step.powered:
        rec = Recommendation("power-up", target - step.powered, step.at)
    elif target < step.powered:
        # the replay switches off only idle ready nodes; the recommendation names no more than those
        down = min(step.powered - target, max(0, step.ready - step.demand))
        rec = Recommendation("power-down", down, step.at) if down > 0 else None
    return PlanStep(target, hold_until, rec)


class Planner:
    """``plan_step`` over an outlook's p90 rows (``Outlook.upper``), for ``replay``."""

    def __init__(self, upper: np.ndarray, params: PlannerParams = PlannerParams()) -> None:
        self.upper = np.asarray(upper, dtype=np.float64)
        self.params = params
        self.hold_until = 0
        self.recommendations: list[Recommendation] = []

    def decide(self, step: Step, history: np.ndarray) -> int:
        d = plan_step(step, history[-max(1, self.params.idle_steps):], self.upper[step.index], self.hold_until,
                      self.params)
        self.hold_until = d.hold_until
        if d.recommendation is not None:
            self.recommendations.append(d.recommendation)
        return d.target
