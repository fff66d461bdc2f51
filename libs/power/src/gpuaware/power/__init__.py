"""gpuaware.power: when to switch idle GPU nodes off and on, pure (reads the node series file; no I/O else).

    series = load_node_series(shared_data_dir() / PHILLY_FILE).window(*PHILLY_SPLIT["test"])
    active, total = series.held()                               # 10-minute max, gaps held and noted
    served = served_outlook(path, horizon=59)                   # gpuaware.forecast's served forecast + p90
    ces = replay("ces", CesPolicy(persistence_outlook(active, 59).point), active, total, 600, 600)
    plan = replay("planner", Planner(served.upper), active, total, 600, 600)
    best = replay("oracle", Oracle(active, 600, 600), active, total, 600, 600)
    plan.off_node_hours, plan.shortfall_events, plan.shortfall_node_minutes, plan.recommendations

Modules: ``nodes`` (the Philly node series: load, published split, gaps said), ``outlook`` (forecasts by
origin: persistence, gpuaware's served forecast and its p90), ``ces`` (the Helios CES policy as
published, a pure step), ``planner`` (gpuaware's planner: the p90 over the boot delay, buffer, hold,
power-up ahead), ``fleet`` (the same planner on a live cluster's named nodes: demand and a GPU forecast
in nodes, which idle nodes go off and which come back), ``replay`` (a policy over a series: powered-off node-hours, shortfalls, the boot delay
honoured; the oracle).
"""

from gpuaware.power.ces import CesDecision, CesParams, CesPolicy, ces_step
from gpuaware.power.fleet import FleetPlanner, FleetStep, NodeAction, NodeFacts, PowerState
from gpuaware.power.nodes import PHILLY_FILE, PHILLY_SPLIT, NodeSeries, NodeSeriesError, load_node_series
from gpuaware.power.outlook import Outlook, persistence_outlook, served_outlook
from gpuaware.power.planner import Planner, PlannerParams, PlanStep, plan_step
from gpuaware.power.replay import Oracle, Policy, Recommendation, ReplayResult, Step, boot_steps, replay

__all__ = [
    "PHILLY_FILE",
    "PHILLY_SPLIT",
    "CesDecision",
    "CesParams",
    "CesPolicy",
    "FleetPlanner",
    "FleetStep",
    "NodeAction",
    "NodeFacts",
    "NodeSeries",
    "NodeSeriesError",
    "Oracle",
    "Outlook",
    "PlanStep",
    "Planner",
    "PlannerParams",
    "Policy",
    "PowerState",
    "Recommendation",
    "ReplayResult",
    "Step",
    "boot_steps",
    "ces_step",
    "load_node_series",
    "persistence_outlook",
    "plan_step",
    "replay",
    "served_outlook",
]
