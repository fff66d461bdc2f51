"""Whether a demo run can be judged at all, before anyone reads its comparison.

A comparison of gpuaware with the baseline means something only when both runs did the same work in
the same conditions. ``judgeable`` says so or lists why not - a pure function of a few facts per run
(``ArmFacts``), used by the headline, the HTML report and ``report.json``'s ``judgeable`` / ``reasons``:

* **enough pods decided** in every run (``Bounds.min_decided``, or the whole workload when it is
  smaller): a run of a few seconds decides a handful of pods, and an allocation mean over them says
  nothing about a scheduler;
* **the whole window replayed** in every run: means over different spans are not comparable;
* **the planned GPU faults reached** (the gpuaware run): a fault the replay never got to was neither
  caught nor missed;
* **the services kept up with the twin's clock** (``lag_figures``): the twin replays a day in minutes,
  so a service that takes a wall second to answer a pending pod costs that pod ``speed`` virtual
  seconds of queueing. The demo times each pod's ``pending`` -> placement's first verdict (decided or
  unschedulable) in wall time, as it received them, and converts it to the twin's time at the speed the
  twin ran then; when the p95 of that lag exceeds ``Bounds.max_lag_ratio`` of the inference SLO the
  run's queue delays measure the machine's load, not the scheduler, and the run is not judged.

The twin also slows itself when the services lag (``gpuaware.sim.Pacer``, in the binder); the effective
speed the demo saw is part of the figures, so the report says when the twin had to slow down.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaware.cli.demo_format import human

__all__ = ["ArmFacts", "Bounds", "Verdict", "arm_facts", "effective_speed", "judgeable", "lag_figures"]


@dataclass(frozen=True)
class Bounds:
    """What a run must reach to be judged; each field's default is explained beside it."""

    min_decided: int = 30
    """pods decided per run: below this an allocation mean is a handful of pods' luck"""
    max_lag_ratio: float = 0.5
    """p95 of the services' lag (pending -> first verdict, in the twin's seconds) over the inference SLO:
    past half the SLO, queueing the machine caused is as large as what the scheduler is judged on"""
    min_lag_samples: int = 10
    """fewer timed verdicts than this give no p95 worth judging on (the decided-pods bound then speaks)"""


@dataclass(frozen=True)
class ArmFacts:
    """What ``judgeable`` needs to know about one run."""

    label: str
    pods_decided: int
    """distinct pods placement decided during the run"""
    workload_pods: int
    """pods in the workload (the most that could be decided)"""
    reached_end: bool
    virtual_s: float
    """virtual seconds replayed"""
    window_s: float
    faults_planned: int = 0
    faults_reached: int = 0
    """planned GPU faults whose start the replay reached"""
    lag: Mapping[str, Any] = field(default_factory=dict)
    """``lag_figures`` of the run"""


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"judgeable": self.ok, "reasons": list(self.reasons)}

    def headline(self) -> str:
        """The sentence that opens the summary when the run cannot be judged ("" when it can)."""
        if self.ok:
            return ""
        return "NOT JUDGEABLE - no comparison is claimed from this run: " + "; ".join(self.reasons) + "."


def judgeable(arms: Sequence[ArmFacts], *, slo_s: float, bounds: Bounds = Bounds()) -> Verdict:
    """Whether the runs ``arms`` can be compared, and every reason why not (module docstring)."""
    reasons: list[str] = []
    if len(arms) < 2:
        reasons.append("fewer than two runs to compare")
    short = [(a.label, a.pods_decided, min(bounds.min_decided, max(1, a.workload_pods))) for a in arms]
    if any(n < need for _, n, need in short):
        need = max(n for _, _, n in short)
        reasons.append("too few pods decided (" + ", ".join(f"{label} {human(n)}" for label, n, _ in short)
                       + f"; at least {human(need)} per run are needed to compare)")
    for a in arms:
        if not a.reached_end:
            reasons.append(f"the {a.label} run replayed {human(a.virtual_s / 3600)} of "
                           f"{human(a.window_s / 3600)} virtual hours")
    for a in arms:
        if a.faults_planned and a.faults_reached < a.faults_planned:
            reasons.append(f"the {a.label} run reached {a.faults_reached} of its {a.faults_planned} planned GPU "
                           "faults (the rest were neither caught nor missed)")
    reference = slo_s if slo_s > 0 else 600.0
    for a in arms:
        lag = a.lag or {}
        p95 = lag.get("p95_virtual_s")
        if p95 is None or (lag.get("samples") or 0) < bounds.min_lag_samples:
            continue
        if p95 > bounds.max_lag_ratio * reference:
            slowed = lag.get("effective_speed")
            reasons.append(
                f"the services lagged the twin's clock in the {a.label} run (p95 pending -> verdict "
                f"{human(lag.get('p95_wall_s'))} s wall = {human(p95 / 60)} virtual min at "
                f"{human(slowed)}x, over {human(bounds.max_lag_ratio)} of the {human(reference / 60)}-min SLO: "
                "the machine was too busy for this speed)")
    return Verdict(not reasons, tuple(reasons))


def effective_speed(clock: Sequence[tuple[float, float]], nominal: float) -> float | None:
    """Virtual seconds per wall second the twin ran at over ``clock``'s (wall, virtual) pairs, each
    stretch's rate capped at ``nominal`` (a faster stretch is the twin jumping over a quiet spell, not
    running faster); None with fewer than two pairs."""
    total = weighted = 0.0
    for (w0, v0), (w1, v1) in itertools.pairwise(clock):
        dw = w1 - w0
        if dw <= 0:
            continue
        total += dw
        weighted += min(max(v1 - v0, 0.0) / dw, nominal) * dw
    return weighted / total if total > 0 else None


def _speed_at(clock: Sequence[tuple[float, float]], walls: Sequence[float], nominal: float, t: float) -> float:
    """The twin's speed around wall time ``t`` (the stretch of ``clock`` holding it, capped at
    ``nominal``; ``nominal`` outside the clock's pairs). ``walls``: the pairs' wall times."""
    i = bisect.bisect_left(walls, t)
    if i == 0 or i >= len(walls):
        return nominal
    (w0, v0), (w1, v1) = clock[i - 1], clock[i]
    return min(max(v1 - v0, 0.0) / (w1 - w0), nominal) if w1 > w0 else nominal


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def lag_figures(lags: Sequence[tuple[float, float]], clock: Sequence[tuple[float, float]],
                nominal: float) -> dict[str, Any]:
    """The services' lag behind the twin: ``lags`` are (wall time the pending was seen, wall seconds to
    placement's first verdict on it); each converted to virtual seconds at the twin's speed then.
    Strict-JSON figures: samples, p50 / p95 in wall and virtual seconds, the nominal and effective speed
    and whether the twin slowed itself (ran under 90 % of nominal)."""
    speed = effective_speed(clock, nominal)
    out: dict[str, Any] = {"samples": len(lags), "nominal_speed": nominal,
                           "effective_speed": None if speed is None else round(speed, 1),
                           "twin_slowed": speed is not None and speed < 0.9 * nominal}
    if not lags:
        return {**out, "p50_wall_s": None, "p95_wall_s": None, "p50_virtual_s": None, "p95_virtual_s": None}
    wall = [max(0.0, d) for _, d in lags]
    walls = [w for w, _ in clock]
    virtual = [max(0.0, d) * _speed_at(clock, walls, nominal, t) for t, d in lags]
    return {**out, "p50_wall_s": round(_quantile(wall, 0.5), 3), "p95_wall_s": round(_quantile(wall, 0.95), 3),
            "p50_virtual_s": round(_quantile(virtual, 0.5), 1), "p95_virtual_s": round(_quantile(virtual, 0.95), 1)}


def arm_facts(label: str, run: Any, analysed: Mapping[str, Any], window_s: float, nominal_speed: float,
              workload_pods: int) -> ArmFacts:
    """One run's facts from its ``RunResult`` and its analysis (``demo_analysis.analyse``)."""
    replayed = run.virtual_end - run.started_at
    faults = (run.health or {}).get("faults") or []
    planned = [f for f in faults if f.get("at_s") is not None and f["at_s"] <= window_s]
    return ArmFacts(label=label, pods_decided=len(run.log.decided), workload_pods=workload_pods,
                    reached_end=bool(run.reached_end), virtual_s=replayed, window_s=window_s,
                    faults_planned=len(planned), faults_reached=sum(1 for f in planned if f["at_s"] <= replayed),
                    lag=analysed.get("lag") or lag_figures(run.log.verdict_lags, run.clock, nominal_speed))
