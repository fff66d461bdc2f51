"""The node-power planner in placement: recommend idle GPU nodes off and back on, keep pods off them.

Placement holds what the planner needs (which nodes hold pods, the pending pods' GPUs, the demand
forecast it already follows for the head-room) and is the only decider of where pods go, so the one
that switches a node off is the one that stops sending pods there. Every instance keeps the nodes'
power from the stream (its leader's recommendations and the binder's answers), so a standby that
takes over knows which nodes are off; only the leader decides (``gpuaware.power.FleetPlanner``, once
per ``power_step_s`` of the world's time) and publishes ``placement.node.power_recommended.v1``.

A node recommended off takes no pod from that moment (``Planner.unpowered``); the binder's answer
(``binder.node.power_changed.v1``) says what the world did: ``off``, ``booting`` until ``ready_at``,
or ``on`` (a refusal: a pod was bound there meanwhile). A booting node takes pods once the world's
clock passes its ``ready_at``: ``tick`` notices and frees it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
import uuid

from gpuaware import schemas
from gpuaware.power import FleetPlanner, FleetStep, NodeFacts, PlannerParams, PowerState
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import PlacementState

__all__ = ["PowerPlanning", "total_p90_path"]

ANSWERS_KEPT = 4096

log = logging.getLogger(__name__)


def total_p90_path(ev: schemas.DemandPredicted, step_s: float, steps: int) -> list[float] | None:
    """The cluster total's p90 (the quantile nearest 0.9) at ``issued_at + k * step_s``, k = 1..steps,
    read off the forecast's path (the latest point at or before each time); None without that series.
    A series labelled ``horizon`` (the hours-ahead path) is not read: the planner's steps are minutes,
    and an hourly path would hold its 1-hour point over them."""
    series = next((s for s in ev.series if s.metric == "gpus_requested"
                   and not {"queue", "class", "horizon"} & set(s.labels)), None)
    if series is None or not ev.quantiles or not series.values:
        return None
    q = min(range(len(ev.quantiles)), key=lambda i: abs(ev.quantiles[i] - 0.9))
    path = series.values[q]
    out: list[float] = []
    for k in range(1, steps + 1):
        at = ev.issued_at + k * step_s
        idx = int((at - ev.start) // ev.step_s) if ev.step_s > 0 else 0
        if idx < 0:
            continue
        out.append(float(path[min(idx, len(path) - 1)]))
    return out or None


class PowerPlanning:
    """The nodes' power as this instance knows it, and (leading) the planner's decisions."""

    def __init__(self, state: PlacementState, settings: PlacementSettings, source: str) -> None:
        s = settings
        self.state = state
        self.cluster = s.cluster
        self.source = source
        self.params = PlannerParams(boot_delay_s=s.power_boot_delay_s, step_s=s.power_step_s,
                                    buffer=s.power_buffer_nodes, hold=s.power_hold_steps, idle_steps=s.power_idle_steps)
        self.planner = FleetPlanner(self.params)
        self.power: dict[str, PowerState] = {}
        """nodes not plainly on: ``off`` (recommended or switched off) or ``booting``"""
        self.ready_at: dict[str, float] = {}
        self.forecast: list[float] | None = None
        """the cluster total's latest p90 path, at the planner's steps ahead"""
        self.recommended: dict[str, int] = {"power-down": 0, "power-up": 0}
        self.refused = 0
        self.last: FleetStep | None = None
        self.answered: collections.OrderedDict[str, None] = collections.OrderedDict()
        """recommendations the binder answered already (the last ``ANSWERS_KEPT``): an echo of one read
        after its answer (two streams, no order between them) changes nothing"""
        self._ids = itertools.count()
        self._run = uuid.uuid4().hex[:8]

    # -- what every instance follows --------------------------------------------------------------

    def apply_demand_forecast(self, ev: schemas.DemandPredicted) -> bool:
        if ev.cluster != self.cluster:
            return False
        path = total_p90_path(ev, self.params.step_s, self.params.reach)
        if path is not None:
            self.forecast = path
        return False

    def apply_recommended(self, ev: schemas.NodePowerRecommended) -> bool:
        """A leader's recommendation (this one's echo, or a previous leader's): a node recommended off
        takes no pod from now; one recommended on waits for the binder's answer."""
        if ev.cluster != self.cluster or ev.recommendation_id in self.answered:
            return False
        if ev.action == "power-down":
            self.power[ev.node] = "off"
            self._publish_unpowered()
        return False

    def apply_changed(self, ev: schemas.NodePowerChanged) -> bool:
        """The binder's answer: True when the node takes pods again (parked pods may fit)."""
        if ev.cluster != self.cluster:
            return False
        was = self.power.get(ev.node, "on")
        if ev.recommendation_id:
            self.answered[ev.recommendation_id] = None
            while len(self.answered) > ANSWERS_KEPT:
                self.answered.popitem(last=False)
        if ev.state == "on":
            self.power.pop(ev.node, None)
            self.ready_at.pop(ev.node, None)
            if ev.reason:
                self.refused += 1
                log.info("power-down of %s refused by the world: %s", ev.node, ev.reason)
        else:
            self.power[ev.node] = ev.state
            if ev.state == "booting" and ev.ready_at is not None:
                self.ready_at[ev.node] = ev.ready_at
        self._publish_unpowered()
        return was != "on" and ev.state == "on"

    def tick(self, now: float) -> bool:
        """Booting nodes whose ``ready_at`` passed take pods now: True when one did."""
        ready = [n for n, at in self.ready_at.items() if at <= now and self.power.get(n) == "booting"]
        for n in ready:
            self.power.pop(n, None)
            self.ready_at.pop(n, None)
        if ready:
            self._publish_unpowered()
        return bool(ready)

    def _publish_unpowered(self) -> None:
        self.state.planner.unpowered = frozenset(self.power)

    # -- what the leader decides ------------------------------------------------------------------

    def facts(self) -> tuple[list[NodeFacts], float, float]:
        """Every GPU node's facts, the GPUs held now and the pending pods' GPUs (from the ledger)."""
        ledger = self.state.ledger
        cluster = ledger.cluster
        if cluster is None:
            return [], 0.0, 0.0
        busy = {a.node for a in cluster.allocations.values()}
        nodes = [NodeFacts(spec.name, spec.num_gpu, spec.gpu_model, i in busy, self.power.get(spec.name, "on"))
                 for i, spec in enumerate(cluster.specs) if spec.num_gpu > 0]
        held = cluster.used_gpu_milli / 1000.0
        pending = sum(e.request.num_gpu * e.request.gpu_milli / 1000.0 for e in ledger.waiting() if e.request is not None)
        return nodes, held, pending

    def unsent(self, rec: schemas.NodePowerRecommended) -> None:
        """A recommendation the stream did not take: its node takes pods again (the next step decides anew)."""
        if rec.action == "power-down" and self.power.get(rec.node) == "off":
            self.power.pop(rec.node, None)
            self._publish_unpowered()

    def step(self, now: float) -> list[schemas.NodePowerRecommended]:
        """One decision when due (else nothing): the recommendations to publish. A node recommended
        off is kept from pods at once."""
        if not self.planner.due(now):
            return []
        nodes, held, pending = self.facts()
        if not nodes:
            return []
        d = self.planner.decide(now, nodes, held_gpus=held, pending_gpus=pending, forecast_gpus=self.forecast)
        self.last = d
        out = []
        for a in d.actions:
            out.append(schemas.NodePowerRecommended(
                source=self.source, emitted_at=time.time(), cluster=self.cluster,
                recommendation_id=f"power-{self._run}-{next(self._ids)}", node=a.node, action=a.action,
                recommended_at=now, reason=d.reason, powered_target=d.target, demand_nodes=d.demand_nodes,
                forecast_nodes=d.forecast_nodes))
            self.recommended[a.action] += 1
            if a.action == "power-down":
                self.power[a.node] = "off"
        if out:
            self._publish_unpowered()
            log.info("power: %s (%s)", ", ".join(f"{r.action} {r.node}" for r in out), d.reason)
        return out

    def counts(self) -> dict[str, int]:
        """What the metrics export: nodes off / booting now, recommendations by action, refusals, the
        planner's decisions and those taken short of nodes."""
        states = list(self.power.values())
        return {"off": states.count("off"), "booting": states.count("booting"),
                "power-down": self.recommended["power-down"], "power-up": self.recommended["power-up"],
                "refused": self.refused, "steps": self.planner.index, "short_steps": self.planner.short_steps}
