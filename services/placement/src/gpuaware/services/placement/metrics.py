"""Placement's Prometheus series: what its view and planner count, read when Prometheus scrapes, and
the pending -> decision latency observed as each decision leaves.

    gpuaware_placement_leader                      1 while this instance decides for its cluster
    gpuaware_placement_pods{phase}                 pods in the view by phase (pending, parked, holding...)
    gpuaware_placement_decisions_total             decisions published by this instance
    gpuaware_placement_unschedulable_total         verdicts "cannot place now", with the reason on the bus
    gpuaware_placement_preemptions_planned_total   victims planned by decisions
    gpuaware_placement_fair_reclaims_total         decisions reclaiming for a starved tenant (fair-share order)
    gpuaware_placement_durations_predicted_total   parked pods' runtimes answered by forecasting.duration
    gpuaware_placement_forecast_scored_total       decisions made while per-GPU forecasts existed
    gpuaware_placement_forecast_changed_total      of those, decisions whose node would differ without the
                                                   forecasts (the forecast-headroom score)
    gpuaware_placement_forecast_gpu_changed_total  of those, decisions on the same node whose GPUs would
                                                   differ without the forecasts (signal-aware GPU choice)
    gpuaware_placement_headroom_held_back_total    placements the forecast head-room refused (pods that could wait)
    gpuaware_placement_headroom_gpus{what}         the head-room: ``kept`` free now, ``forecast`` (the latency-
                                                   sensitive classes' p90 peak), ``held`` (what they hold)
    gpuaware_placement_gpu_milli{state}            GPU compute in the view: used / total (thousandths)
    gpuaware_placement_decision_latency_seconds    histogram: the pending event's emission -> its decision sent
    gpuaware_placement_policy_objects_refused      Kubernetes mode: GPUPolicy objects whose generation is refused

``gpuaware_placement_pods{phase="pending"}`` is the scheduler backlog the alert rules watch; a cluster
whose every instance reports ``leader 0`` has lost its leader.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuaware.runtime import Sample, counter, gauge

__all__ = ["placement_samples"]


def placement_samples(service: Any) -> Iterable[Sample]:
    summary = service.state.summary()
    yield gauge("gpuaware_placement_leader", "1 while this instance decides for its cluster", int(service.leading))
    for phase, n in sorted(summary["pods"].items()):
        yield gauge("gpuaware_placement_pods", "pods in placement's view by phase", n, phase=phase)
    if "pending" not in summary["pods"]:
        yield gauge("gpuaware_placement_pods", "pods in placement's view by phase", 0, phase="pending")
    c = summary["counters"]
    yield counter("gpuaware_placement_decisions", "decisions published by this instance", c["decided"])
    yield counter("gpuaware_placement_unschedulable", "pods judged unschedulable for now", c["unschedulable"])
    yield counter("gpuaware_placement_preemptions_planned", "victims planned by decisions", c["victims_planned"])
    yield counter("gpuaware_placement_fair_reclaims", "decisions reclaiming GPUs for a starved tenant",
                  c["fair_reclaims"])
    yield counter("gpuaware_placement_durations_predicted", "parked pods' runtimes the duration predictor answered",
                  service.durations.answered)
    effect = service.forecast_effect  # a gpuaware.placement.SignalEffect the service registered
    yield counter("gpuaware_placement_forecast_scored", "decisions made while per-GPU forecasts existed",
                  effect.scored)
    yield counter("gpuaware_placement_forecast_changed",
                  "decisions whose node would differ without the forecast-headroom score", effect.changed)
    yield counter("gpuaware_placement_forecast_gpu_changed",
                  "decisions on the same node whose GPUs would differ without the forecasts", effect.gpu_changed)
    headroom = service.headroom  # a gpuaware.placement.ForecastHeadroom, or None when switched off
    if headroom is not None:
        yield counter("gpuaware_placement_headroom_held_back", "placements the forecast head-room refused",
                      headroom.held_back)
        for what, gpus in (("kept", headroom.room_milli / 1000), ("forecast", headroom.forecast_gpus),
                           ("held", headroom.held_milli / 1000)):
            yield gauge("gpuaware_placement_headroom_gpus", "the forecast head-room, GPUs", gpus, what=what)
    power = service.power.counts()  # power.PowerPlanning: followed by every instance, decided by the leader
    for state in ("off", "booting"):
        yield gauge("gpuaware_placement_nodes_unpowered", "GPU nodes switched off or booting, as placement knows them",
                    power[state], state=state)
    for action in ("power-down", "power-up"):
        yield counter("gpuaware_placement_power_recommended", "node-power recommendations this instance published",
                      power[action], action=action)
    yield counter("gpuaware_placement_power_refused", "node-power recommendations the world refused",
                  power["refused"])
    yield counter("gpuaware_placement_power_steps", "node-power planner decisions (short: demand outran the "
                  "nodes taking pods)", power["steps"], outcome="all")
    yield counter("gpuaware_placement_power_steps", "node-power planner decisions (short: demand outran the "
                  "nodes taking pods)", power["short_steps"], outcome="short")
    for state in ("used", "total"):
        yield gauge("gpuaware_placement_gpu_milli", "GPU compute in the view, thousandths of a GPU",
                    summary[f"gpu_milli_{state}"], state=state)
    policies = getattr(service, "policies", None)  # the GPUPolicy watch, in Kubernetes mode only
    if policies is not None:
        verdicts = policies.objects.verdicts.values()
        yield gauge("gpuaware_placement_policy_objects_refused", "GPUPolicy objects whose generation is refused",
                    sum(1 for v in verdicts if not v.accepted))
