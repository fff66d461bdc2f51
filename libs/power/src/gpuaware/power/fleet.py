"""The planner on a live cluster: which idle GPU nodes to switch off, and which to switch on, by name.

``plan_step`` decides in counts over a node series (how many nodes to keep powered). A live cluster
has named nodes of known GPU counts, pods that hold GPUs rather than nodes, and a demand forecast in
GPUs (``forecast.demand.predicted.v1``: the cluster's total, running + pending). ``FleetPlanner``
turns one into the other, once per ``PlannerParams.step_s`` of the world's time:

* **demand in nodes**: the nodes with a pod on them now, plus the pending pods' GPUs in whole nodes
  (``ceil(pending / GPUs per node)``, the typical node's count);
* **the forecast in nodes**: the p90 GPUs over the planner's reach at today's packing -- the busy
  nodes per GPU held now (a cluster whose pods spread over more nodes than their GPUs fill needs more
  nodes per GPU forecast), never fewer nodes than whole ones would take;
* **which nodes**: a power-down takes idle nodes that are on and have been idle longest (at least
  ``idle_steps`` steps: a node that just emptied may be wanted again), and always leaves one node of
  every GPU model on, so a pod asking for a model never waits a boot for it; a power-up takes the
  nodes switched off longest (the order they went, so each waits its turn), then any booting ones
  are simply awaited;
* the rules of ``plan_step`` (the p90 over the boot delay, the buffer, the hold after a shortfall, no
  flapping) decide the count. A shortfall here is demand (busy nodes plus pending in nodes) above the
  nodes that take pods.

Without a forecast (forecasts switched off, none received yet) the band is the recent demand alone:
the planner then keeps what the last ``idle_steps`` steps needed plus the buffer -- a persistence
planner, the one the report compares against.

The planner is pure and remembers only what it must between steps: when each node was last busy, when
each went off, the recent demand and the hold.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import deque
from collections.abc import Sequence
from typing import Literal

import numpy as np

from gpuaware.power.planner import PlannerParams, plan_step
from gpuaware.power.replay import Step

__all__ = ["FleetPlanner", "FleetStep", "NodeAction", "NodeFacts", "PowerState"]

PowerState = Literal["on", "off", "booting"]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFacts:
    """One GPU node as the planner needs it."""

    name: str
    gpus: int
    gpu_model: str
    busy: bool
    """a pod holds (or was decided onto) the node"""
    state: PowerState
    """``off`` includes a power-down recommended and not yet answered: placement keeps pods off it"""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeAction:
    node: str
    action: Literal["power-down", "power-up"]


@dataclasses.dataclass(frozen=True, slots=True)
class FleetStep:
    """One decision: the switches, and the arithmetic behind them (what a recommendation says)."""

    at: float
    actions: tuple[NodeAction, ...]
    target: int
    """GPU nodes to keep powered (on or booting) from now"""
    demand_nodes: int
    forecast_nodes: float | None
    ready: int
    booting: int
    total: int
    short: int
    """demand above the nodes that take pods, at this step"""

    @property
    def reason(self) -> str:
        band = f"p90 forecast {self.forecast_nodes:.1f} nodes" if self.forecast_nodes is not None else "no forecast"
        return (f"keep {self.target} of {self.total} GPU nodes powered: demand {self.demand_nodes} nodes now, "
                f"{band}; {self.ready} on, {self.booting} booting" + (f"; {self.short} short" if self.short else ""))


class FleetPlanner:
    """``plan_step`` over a live cluster's named nodes (see the module docstring)."""

    def __init__(self, params: PlannerParams | None = None) -> None:
        self.params = params = params if params is not None else PlannerParams()
        self.index = 0
        self.last_at: float | None = None
        self.hold_until = 0
        self.recent: deque[int] = deque(maxlen=max(1, params.idle_steps))
        self.idle_since: dict[str, float] = {}
        self.off_since: dict[str, float] = {}
        self.short_steps = 0
        """decisions taken when demand outran the nodes that take pods (``index``: all of them)"""

    def due(self, now: float) -> bool:
        """Whether a step of the world's time has passed since the last decision."""
        return self.last_at is None or now - self.last_at >= self.params.step_s

    def decide(self, now: float, nodes: Sequence[NodeFacts], *, held_gpus: float, pending_gpus: float,
               forecast_gpus: Sequence[float] | None) -> FleetStep:
        """One decision at ``now`` (the world's clock). ``forecast_gpus``: the p90 of the cluster's GPU
        demand at the planner's steps ahead (1, 2, ... ``reach``), None without a forecast."""
        p = self.params
        gpu_nodes = [n for n in nodes if n.gpus > 0]
        self._remember(now, gpu_nodes)
        per_node = statistics.median(n.gpus for n in gpu_nodes) if gpu_nodes else 1
        busy = sum(n.busy for n in gpu_nodes)
        demand = busy + math.ceil(max(0.0, pending_gpus) / per_node - 1e-9)
        ready = sum(n.state == "on" for n in gpu_nodes)
        booting = sum(n.state == "booting" for n in gpu_nodes)
        nodes_per_gpu = max(busy / held_gpus if held_gpus > 0 else 0.0, 1.0 / per_node)
        band = (np.array([max(0.0, float(g)) * nodes_per_gpu for g in forecast_gpus], dtype=np.float64)
                if forecast_gpus else np.array([], dtype=np.float64))
        step = Step(self.index, now, demand, ready, booting, len(gpu_nodes))
        self.recent.append(demand)
        d = plan_step(step, np.array(self.recent, dtype=np.float64), band, self.hold_until, p)
        self.hold_until = d.hold_until
        actions: list[NodeAction] = []
        if d.recommendation is not None and d.recommendation.action == "power-down":
            actions = self._downs(now, gpu_nodes, d.recommendation.count)
        elif d.recommendation is not None:
            actions = self._ups(gpu_nodes, d.recommendation.count)
        for a in actions:
            if a.action == "power-down":
                self.off_since[a.node] = now
            else:
                self.off_since.pop(a.node, None)
        self.index += 1
        self.last_at = now
        self.short_steps += step.short > 0
        peak = float(band[: p.reach].max()) if len(band) else None
        return FleetStep(now, tuple(actions), d.target, demand, peak, ready, booting, len(gpu_nodes), step.short)

    def _remember(self, now: float, nodes: Sequence[NodeFacts]) -> None:
        for n in nodes:
            if n.busy or n.state != "on":
                self.idle_since.pop(n.name, None)
            else:
                self.idle_since.setdefault(n.name, now)
            if n.state == "off":
                self.off_since.setdefault(n.name, now)
            else:
                self.off_since.pop(n.name, None)

    def _downs(self, now: float, nodes: Sequence[NodeFacts], count: int) -> list[NodeAction]:
        """The idle nodes idle longest (at least ``idle_steps`` steps), one node of each GPU model kept on."""
        idle_for = self.params.idle_steps * self.params.step_s
        on_by_model: dict[str, int] = {}
        for n in nodes:
            if n.state == "on":
                on_by_model[n.gpu_model] = on_by_model.get(n.gpu_model, 0) + 1
        candidates = sorted((n for n in nodes if n.name in self.idle_since and now - self.idle_since[n.name] >= idle_for),
                            key=lambda n: (self.idle_since[n.name], n.name))
        out: list[NodeAction] = []
        for n in candidates:
            if len(out) >= count:
                break
            if on_by_model[n.gpu_model] <= 1:
                continue
            on_by_model[n.gpu_model] -= 1
            out.append(NodeAction(n.name, "power-down"))
        return out

    def _ups(self, nodes: Sequence[NodeFacts], count: int) -> list[NodeAction]:
        off = sorted((n for n in nodes if n.state == "off"),
                     key=lambda n: (self.off_since.get(n.name, math.inf), n.name))
        return [NodeAction(n.name, "power-up") for n in off[:count]]
