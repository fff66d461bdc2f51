"""gpuaware.health: GPU health scoring, pure (no I/O, no clock: times are passed in).

    book = HealthBook(HealthConfig())                       # one per service (or per replay)
    a = book.observe(obs)                                   # Observation -> Assessment
    a.to_scored(...), a.to_state_changed(...)               # the contract's GpuScored / GpuStateChanged
    book.tick(now); book.cordon(...); book.uncordon(...)    # staleness, manual override (audited)
    alerts.decide(a, emitted_at=now)                        # AlertBook: AlertRaised / AlertResolved
    recommend_drain(a, pods)                                # which pods to move, in what order
    score_stream(observations, config)                      # the same scoring over any stream

Modules: ``observation`` (the input and the adapters from samples and rollups), ``tracker`` (the
``HealthBook``: bad-input handling, overrides, persistence), ``components`` (each component's score,
reasons and evidence), ``track`` (what is kept per GPU, the ``Assessment``), ``state`` (hysteresis, overrides), ``risk`` (the failure
risk, with its arithmetic), ``xid`` (NVIDIA's XID catalogue), ``alerts``, ``drain``, ``config`` (every knob). The
evaluations against real and simulated fault data live in ``gpuaware.sim`` (``hbm``,
``health_fleet``, ``fleet_faults``). README.md has the
whole API for the service.
"""

from gpuaware.health.alerts import (
    RULES,
    ActiveAlert,
    AlertBook,
    AlertDecision,
    Condition,
    conditions,
    decide_alerts,
)
from gpuaware.health.config import HealthConfig, RiskModel, ScoreRules, StateRules
from gpuaware.health.drain import DrainPlan, DrainStep, PodOnGpu, PodsOnGpus, drain_order, recommend_drain
from gpuaware.health.inputs import InputCounters, InputIssue, IssueKind
from gpuaware.health.observation import Observation, from_rolledup, from_rollup, from_sample, from_sampled
from gpuaware.health.risk import RiskEstimate
from gpuaware.health.state import LEVEL, STATES, Override, OverrideRecord
from gpuaware.health.tracker import COMPONENTS, Assessment, GpuTrack, HealthBook, score_stream
from gpuaware.health.xid import XID_CATALOG, XidAction, XidClass, XidInfo, classify_xid

__all__ = [
    "COMPONENTS",
    "LEVEL",
    "RULES",
    "STATES",
    "XID_CATALOG",
    "ActiveAlert",
    "AlertBook",
    "AlertDecision",
    "Assessment",
    "Condition",
    "DrainPlan",
    "DrainStep",
    "GpuTrack",
    "HealthBook",
    "HealthConfig",
    "InputCounters",
    "InputIssue",
    "IssueKind",
    "Observation",
    "Override",
    "OverrideRecord",
    "PodOnGpu",
    "PodsOnGpus",
    "RiskEstimate",
    "RiskModel",
    "ScoreRules",
    "StateRules",
    "XidAction",
    "XidClass",
    "XidInfo",
    "classify_xid",
    "conditions",
    "decide_alerts",
    "drain_order",
    "from_rolledup",
    "from_rollup",
    "from_sample",
    "from_sampled",
    "recommend_drain",
    "score_stream",
]
