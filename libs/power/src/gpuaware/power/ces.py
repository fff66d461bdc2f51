"""The Helios CES policy (Cluster Energy Saving) as published, one decision per step.

Source: Hu et al., SC'21 ("Characterization and Prediction of Deep Learning Workloads in Large-Scale GPU
Datacenters"), artifact HeliosArtifact ``framework/CES Service/CES_Philly.py``: its ``hyperparameters()``
(history 2, future 30, thresholds 0.1 / 0 / 1, buffer 20, keep 10) and its simulation loop over the
December steps. The rules, in the order that loop applies them at step ``i`` (``active``: busy nodes,
``Active``: nodes the policy keeps on):

1. warm-up: in the first ``warmup`` (6) steps, keep ``active[i] + buffer`` on (``if i < 6``);
2. shortfall: when the nodes on lack for ``active[i]``, switch on to ``active[i] + buffer`` and hold
   for ``keep`` steps -- no decrease before step ``i + keep`` (``stable_pred = i + keep``);
3. never more than the cluster's total;
4. decrease only when both trends fall: the history trend ``mean(active[i-history:i]) - active[i]`` is
   at least ``his_threshold`` (0.1) and the future trend ``active[i] - mean(Prediction[i:i+future])``
   at least ``fut_threshold`` (0);
5. not while holding (rule 2); a decrease that passes resets the hold to ``i`` (``stable_pred = i``);
6. not when the forecast rises further out: ``mean(Prediction[i:i+future]) <
   mean(Prediction[i:i+2*future])`` skips the step;
7. decrease to ``min(Active, active[i] + buffer)`` if that removes at least ``de_threshold`` (1) node.

The published loop floors every value to an integer (``sim.apply(np.floor)``), forecasts included;
so does this. Two adaptations, both needed to replay it causally, neither changing a rule:

* the forecast: published, ``Prediction[i]`` is LightGBM's estimate for step ``i`` itself, and the
  window ``i .. i+2*future-1`` is one batch predicted over the whole test range (its rolling features
  are shifted by ``period // 24`` = 6 steps, its "3 h ago" ones by 17 to 19, so the estimates for the
  later steps of the window use activity after step ``i``). Here a forecast is issued at step ``i``
  for the steps after it; the window's first value is the step just observed (what a forecast of the
  present is), followed by the forecasts for ``i+1 .. i+2*future-1``. A persistence forecast then gives a future trend of exactly 0, so rule 4
  reduces to the history trend, and rule 6 never blocks.
* "the nodes on lack" (rule 2) is the replay's shortfall, ready nodes below demand; with no boot delay,
  as in the published simulation, that is ``Active[i-1] < active[i]`` exactly.

One difference of accounting, not of policy: the published ``Poweroff[i]`` counts the nodes a decision
at step ``i`` switches off as off during step ``i`` already; the replay (``replay``) counts them from
step ``i + 1``, the decision being made once step ``i``'s demand is known. Shortfalls (``Lack``) are
counted alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuaware.power.replay import Step

__all__ = ["CesDecision", "CesParams", "CesPolicy", "ces_step"]


@dataclasses.dataclass(frozen=True, slots=True)
class CesParams:
    """The published hyperparameters (``CES_Philly.py`` ``hyperparameters()``), overridable."""

    history: int = 2
    future: int = 30
    his_threshold: float = 0.1
    fut_threshold: float = 0.0
    de_threshold: int = 1
    buffer: int = 20
    keep: int = 10
    """steps with no decrease after a shortfall (the artifact's ``keep``; "hold")"""
    warmup: int = 6
    """first steps that only keep ``active + buffer`` on (the artifact's ``if i < 6``: one hour)"""


@dataclasses.dataclass(frozen=True, slots=True)
class CesDecision:
    """Nodes to keep on for the next step, the hold after this step, and which rule decided."""

    target: int
    hold_until: int
    rule: str


def ces_step(i: int, active: np.ndarray, forecast: np.ndarray, powered: int, ready: int, total: int,
             hold_until: int, params: CesParams = CesParams()) -> CesDecision:
    """One CES decision at the end of step ``i``.

    ``active``: busy nodes of every step so far (``active[i]`` just observed); ``forecast``: the forecast
    issued now for steps ``i+1, i+2, ...`` (at least ``2 * future - 1`` values; NaN or missing ones at the
    end of a range are left out of the means, as the published slices shorten there); ``powered`` and
    ``ready``: nodes on and nodes able to serve in step ``i``; ``hold_until``: no decrease before this
    step. Pure: the caller keeps ``hold_until`` between steps."""
    p = params
    now = int(np.floor(active[i]))
    if i < p.warmup:
        return CesDecision(min(now + p.buffer, total), hold_until, "warm-up")
    target = powered
    rule = "keep"
    if ready < now:
        target, hold_until, rule = now + p.buffer, i + p.keep, "shortfall"
    target = min(target, total)
    past = np.floor(np.asarray(active[max(0, i - p.history): i], dtype=np.float64))
    upcoming = np.floor(np.asarray(forecast, dtype=np.float64))
    near = np.concatenate(([now], upcoming[: p.future - 1]))
    far = np.concatenate(([now], upcoming[: 2 * p.future - 1]))
    near, far = near[np.isfinite(near)], far[np.isfinite(far)]
    history_trend = float(np.mean(past)) - now if len(past) else 0.0
    future_trend = now - float(np.mean(near))
    if history_trend >= p.his_threshold and future_trend >= p.fut_threshold:
        if i < hold_until:
            return CesDecision(target, hold_until, "hold")
        hold_until = i
        if float(np.mean(near)) < float(np.mean(far)):
            return CesDecision(target, hold_until, "rising later")
        lower = min(target, now + p.buffer)
        if target - lower >= p.de_threshold:
            return CesDecision(lower, hold_until, "decrease")
    return CesDecision(target, hold_until, rule)


class CesPolicy:
    """``ces_step`` driven by a forecast, for ``replay``: keeps the hold between steps.

    ``forecast[i]`` is the forecast issued at the end of step ``i`` of the replayed range for the steps
    after it (row ``i`` of an ``Outlook``'s ``point``)."""

    def __init__(self, forecast: np.ndarray, params: CesParams = CesParams()) -> None:
        self.forecast = np.asarray(forecast, dtype=np.float64)
        self.params = params
        self.hold_until = 0
        self.rules: list[str] = []

    def decide(self, step: Step, history: np.ndarray) -> int:
        d = ces_step(step.index, history, self.forecast[step.index], step.powered, step.ready, step.total,
                     self.hold_until, self.params)
        self.hold_until = d.hold_until
        self.rules.append(d.rule)
        return d.target
