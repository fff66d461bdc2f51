"""Replay a node series against a power policy: what it saves and where it runs short, boot delay honoured.

The model of the cluster, one step (10 minutes on Philly) at a time:

* during step ``t`` the cluster needs ``demand[t]`` nodes (the step's max of busy nodes); the nodes that
  can serve it are the *ready* ones: powered on and done booting. ``demand[t] > ready`` is a shortfall
  event; ``demand[t] - ready`` nodes short for the step's length adds to the shortfall node-minutes (an
  upper bound: the demand is the step's max, so some minutes of the step may have needed fewer);
* at the end of step ``t`` the policy, having seen ``demand[..t]``, names how many nodes should be
  powered (ready or booting) for step ``t + 1``. More than now: that many nodes are switched on and are
  *booting* -- powered, drawing power, not serving -- until ``boot_delay_s`` has passed; they serve from
  the first step starting at or after that (``boot_steps``: with a 600-s delay on 600-s steps, a node
  switched on at the end of step ``t`` serves from step ``t + 2``). Fewer: that many idle ready nodes
  are switched off at once; the nodes busy in step ``t`` are never switched off, and a booting node
  finishes booting;
* the nodes that are neither ready nor booting are powered off: ``total - powered`` per step, summed
  into powered-off node-hours, the energy figure.

The replay starts with every node on and ready; nodes that join the cluster later (Philly's ``total``
grows) come in on and ready too; when the cluster holds fewer nodes than are powered (it shrank, or
nodes joined while others were booting), boots are called off first, latest first, then ready nodes
leave. The Helios CES simulation (HeliosArtifact
``framework/CES Service/CES_Philly.py``) is this model with a boot delay of zero: nodes it switches on at
step ``i`` serve from step ``i + 1``, and ``Lack`` is its shortfall.

``oracle`` is the bound any policy is measured against: it knows the demand to come and keeps powered
exactly the nodes some step within the boot delay will need (and the ones busy now), so it is never
short and no policy under these rules keeps fewer nodes powered at any step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

__all__ = ["Oracle", "Policy", "Recommendation", "ReplayResult", "Step", "boot_steps", "replay"]

Action = Literal["power-down", "power-up"]


@dataclasses.dataclass(frozen=True, slots=True)
class Recommendation:
    """Switch ``count`` nodes ``action`` at ``at`` (epoch seconds: the end of the step just observed)."""

    action: Action
    count: int
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """What a policy knows at the end of step ``index``: the step's demand and the nodes it had."""

    index: int
    at: float
    """epoch seconds of the decision (the end of the step)"""
    demand: int
    ready: int
    booting: int
    total: int
    """nodes in the cluster in the next step (what a target is clipped to)"""

    @property
    def powered(self) -> int:
        return self.ready + self.booting

    @property
    def short(self) -> int:
        """nodes the step lacked: its demand over the ready nodes (0 when covered)"""
        return max(0, self.demand - self.ready)


class Policy(Protocol):
    """Names the nodes to keep powered (ready or booting) in the next step, from what is known now."""

    def decide(self, step: Step, history: np.ndarray) -> int:
        """``history``: the demand of every step so far, ``history[step.index]`` the one just observed."""
        ...


def boot_steps(boot_delay_s: float, step_s: float) -> int:
    """Whole steps a node switched on at a step's end spends booting before the step it can serve."""
    if boot_delay_s < 0 or step_s <= 0:
        raise ValueError(f"boot delay {boot_delay_s} s and step {step_s} s: a delay >= 0 and a step > 0")
    return math.ceil(boot_delay_s / step_s - 1e-9)


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    """Per step: nodes powered, ready and short; the switches made; the figures they add up to."""

    name: str
    step_s: float
    boot_delay_s: float
    demand: np.ndarray
    total: np.ndarray
    powered: np.ndarray
    ready: np.ndarray
    short: np.ndarray
    recommendations: tuple[Recommendation, ...]

    @property
    def off_node_hours(self) -> float:
        return float(np.sum(self.total - self.powered)) * self.step_s / 3600.0

    @property
    def shortfall_events(self) -> int:
        """steps whose demand exceeded the ready nodes"""
        return int(np.count_nonzero(self.short))

    @property
    def shortfall_episodes(self) -> int:
        """runs of consecutive shortfall steps (an event that lasts three steps is one episode)"""
        s = self.short > 0
        return int(s[0]) + int(np.count_nonzero(s[1:] & ~s[:-1])) if len(s) else 0

    @property
    def shortfall_node_minutes(self) -> float:
        return float(np.sum(self.short)) * self.step_s / 60.0

    def summary(self) -> dict[str, float | int | str]:
        ups = [r.count for r in self.recommendations if r.action == "power-up"]
        downs = [r.count for r in self.recommendations if r.action == "power-down"]
        return {"policy": self.name, "steps": len(self.demand), "boot_delay_s": self.boot_delay_s,
                "powered_off_node_hours": round(self.off_node_hours, 2),
                "shortfall_events": self.shortfall_events, "shortfall_episodes": self.shortfall_episodes,
                "shortfall_node_minutes": round(self.shortfall_node_minutes, 1),
                "mean_powered_nodes": round(float(np.mean(self.powered)), 2) if len(self.powered) else 0.0,
                "power_ups": len(ups), "nodes_powered_up": int(sum(ups)),
                "power_downs": len(downs), "nodes_powered_down": int(sum(downs))}


def replay(name: str, policy: Policy, demand: Sequence[int] | np.ndarray, total: Sequence[int] | np.ndarray,
           step_s: float, boot_delay_s: float, start: float = 0.0) -> ReplayResult:
    """Run ``policy`` over ``demand`` (busy nodes per step) in a cluster of ``total`` nodes per step (see
    the module docstring); ``start`` is the epoch second of step 0, for the recommendations' times."""
    d = np.asarray(demand)
    n_total = np.asarray(total)
    if d.shape != n_total.shape or d.ndim != 1:
        raise ValueError(f"demand and total must be 1-d of one length, got {d.shape} and {n_total.shape}")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(n_total))):
        raise ValueError("demand and total must be finite: hold gaps first (NodeSeries.held)")
    d, n_total = d.astype(np.int64), n_total.astype(np.int64)
    n = len(d)
    delay = boot_steps(boot_delay_s, step_s)
    arrivals = np.zeros(n + delay + 2, dtype=np.int64)
    powered, ready_at, short = (np.zeros(n, dtype=np.int64) for _ in range(3))
    recs: list[Recommendation] = []
    ready = int(n_total[0]) if n else 0
    booting = 0
    for t in range(n):
        ready += int(arrivals[t])
        booting -= int(arrivals[t])
        cap = int(n_total[t])
        if t and cap > n_total[t - 1]:  # nodes joined the cluster: they come in on, as every node starts
            ready += cap - int(n_total[t - 1])
        excess = ready + booting - cap
        for k in range(len(arrivals) - 1, t, -1):  # more nodes than the cluster has: boots give way first
            if excess <= 0:
                break
            cut = min(excess, int(arrivals[k]))
            arrivals[k] -= cut
            booting -= cut
            excess -= cut
        if excess > 0:  # then ready nodes
            ready -= excess
        powered[t], ready_at[t], short[t] = ready + booting, ready, max(0, int(d[t]) - ready)
        if t == n - 1:
            break
        at = start + (t + 1) * step_s
        step = Step(index=t, at=at, demand=int(d[t]), ready=ready, booting=booting, total=int(n_total[t + 1]))
        target = min(max(int(policy.decide(step, d[: t + 1])), 0), int(n_total[t + 1]))
        if target > ready + booting:
            up = target - ready - booting
            booting += up
            arrivals[t + 1 + delay] += up
            recs.append(Recommendation("power-up", up, at))
        elif target < ready + booting:
            down = min(ready + booting - target, max(0, ready - int(d[t])))
            if down > 0:
                ready -= down
                recs.append(Recommendation("power-down", down, at))
    return ReplayResult(name=name, step_s=float(step_s), boot_delay_s=float(boot_delay_s), demand=d,
                        total=n_total, powered=powered, ready=ready_at, short=short, recommendations=tuple(recs))


class Oracle:
    """Knows the demand to come: keeps powered the nodes busy now and the most any step will need before a
    node switched on now could serve, ``max(demand[t], demand[t+1 .. t+1+boot_steps])``.

    No policy can keep fewer powered at a step and stay covered: a node that serves at any step up to
    ``boot_steps`` ahead must already be powered now, and a busy node cannot be switched off. The target
    only falls once every step it covered is past, so nodes switched on earlier are ready in time and it
    is never short (``tests/power`` replays it on random series to hold it to that)."""

    def __init__(self, demand: Sequence[int] | np.ndarray, boot_delay_s: float, step_s: float) -> None:
        self.demand = np.asarray(demand, dtype=np.int64)
        self.delay = boot_steps(boot_delay_s, step_s)

    def decide(self, step: Step, history: np.ndarray) -> int:
        del history  # it reads the future instead
        ahead = self.demand[step.index + 1: step.index + 2 + self.delay]
        return max(step.demand, int(ahead.max()) if len(ahead) else 0)
