"""What a demo run is given: the shared configuration, the two runs' specs, the faults planned for
the gpuaware run's twin, and each service's environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaware.cli.stack import database_env
from gpuaware.schemas import (
    ADMIN,
    BINDER_ID,
    FORECASTING,
    HEALTH_SCORING,
    PLACEMENT_ID,
    QUOTA_ID,
    RECORDER_ID,
    TELEMETRY_AGENT,
    binder_durable,
)
from gpuaware.sim import EccSpec, FaultSpec, ThermalSpec, XidSpec, encode_faults

__all__ = ["NO_FORECASTS", "SOURCE", "VIRTUAL_EPOCH", "DemoConfig", "FaultPlan", "Interrupted", "RunSpec", "demo_nodes",
           "nats_admin", "nats_login", "plan_faults", "service_env"]

SOURCE = "gpuaware-demo"
VIRTUAL_EPOCH = 1_767_225_600.0
"""2026-01-01T00:00:00Z: both runs' twins start their virtual day here, so their times compare"""


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP arrived: stop the services and the stack, report nothing."""


@dataclass(frozen=True)
class DemoConfig:
    """What both runs share (the workload and the world)."""

    out: Path
    run_id: str
    duration_s: float
    """wall seconds each run replays"""
    window_s: float
    """virtual seconds replayed"""
    speed: float
    trace: str
    nodes: str
    """``default`` (the built-in mixed cluster), ``openb``, or a node count for the built-in cluster"""
    default_nodes: int
    load: float
    seed: int
    max_pods: int
    slo_s: float
    shared_data: str = ""
    explain_limit: int = 5_000
    typical_pods_file: str = ""
    window_start_s: float = -1.0
    """traces: where the replayed window starts, seconds after the trace's first pod (-1: there)"""
    telemetry: bool = True
    """run a telemetry agent per run on the twin's GPUs (served by the binder as dcgm-exporter text)"""
    kill_leader_at_s: float = 0.0
    """fault drill: run a standby placement beside the leader and SIGKILL the leader this many wall
    seconds into the gpuaware run (0: no drill)"""
    health: bool = True
    """gpuaware run: health-scoring scores the twin's GPUs, and faults are injected into three of them"""
    forecast_ab: bool = False
    """run gpuaware a second time without its forecasts (same workload, seed and faults): the A/B the
    report compares"""
    elastic: bool = True
    """generator: half of the multi-GPU training jobs are elastic (``gpuaware.sim.workload_gen``); False:
    every job keeps its fixed shape"""
    nats_credentials: Mapping[str, tuple[str, str]] = field(default_factory=dict, repr=False, compare=False)
    """identity -> (user, password) when the demo's NATS requires per-service users (``--auth``): each
    service gets its own through its environment, the demo itself connects as admin. Never printed."""
    demand_model: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """the demand model the forecasting service serves (``demo_forecast.ensure_demand_model``'s answer)"""
    own_nats: bool = True
    """the NATS server is the demo's embedded one (False: ``NATS_URL`` names somebody else's, whose
    streams are never deleted)"""
    database_urls: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """process name -> the DSN of its own login role (``gpuaware.cli.stack.service_databases``), for each
    process of the list with a database role; empty: every such process gets the run's shared DSN.
    Never printed."""
    """the workload's request mix (openb pod-list format) for placement's fragmentation-aware scores"""

    @property
    def twin_nodes(self) -> str:
        return "openb" if self.nodes == "openb" else "default"

    @property
    def node_count(self) -> int:
        return int(self.nodes) if self.nodes.isdigit() else self.default_nodes


NO_FORECASTS = "no-forecasts"
"""the label of the A/B run: gpuaware as in its own run, without the forecasting service"""


@dataclass(frozen=True)
class RunSpec:
    label: str
    """``gpuaware``, ``baseline`` or ``no-forecasts`` (``NO_FORECASTS``)"""
    policy: str
    cluster: str
    forecasts: bool = True
    """placement acts on the forecasting service's forecasts (the A/B run: False; the service runs in
    both, so both arms carry the same load)"""

    @property
    def ours(self) -> bool:
        """gpuaware's services decide (every run but stock Kubernetes' baseline)"""
        return self.label != "baseline"


@dataclass(frozen=True)
class FaultPlan:
    """What the gpuaware run's twin GPUs go through, planned before the binder starts."""

    specs: tuple[FaultSpec, ...]
    labels: tuple[str, ...]
    repair: int | None = None
    """index of the fault whose GPU the operator repairs (reboots the node, then uncordons with clear)"""
    repair_at_s: float = 0.0
    """virtual seconds after the start from which the operator acts (once the GPU is quarantined)"""

    def json(self) -> str:
        return encode_faults(self.specs)


def demo_nodes(cfg: DemoConfig) -> tuple[Any, ...]:
    """The twin's nodes, built as the binder builds them."""
    from gpuaware.sim import default_cluster, openb_cluster, openb_node_list

    if cfg.twin_nodes == "openb":
        return openb_cluster(openb_node_list(Path(cfg.shared_data) if cfg.shared_data else None))
    return default_cluster(cfg.node_count)


def plan_faults(cfg: DemoConfig, nodes: Any) -> FaultPlan:
    """Three faults on GPUs of the three most common GPU models (busy nodes), at a quarter, 40 % and
    55 % of the window, sized in wall seconds so that each lasts long enough to be seen at any speed:

    * an uncorrectable-ECC storm: one uncorrectable error every ~2 wall seconds (1,800 / speed per
      virtual hour: 3 an hour at 576x) and 40x as many corrected ones, for the rest of the run;
    * XID 79 three times (the GPU fell off the bus); the operator reboots the node and uncordons the
      GPU with ``clear`` ``max(10 % of the window, 8 wall s)`` later;
    * a thermal runaway (a cooling failure): +50 degC over 6 wall seconds, recovering after 10.
    """
    w, speed = cfg.window_s, cfg.speed
    big = sorted((n for n in nodes if n.num_gpu >= 4), key=lambda n: n.name) or sorted(nodes, key=lambda n: n.name)
    by_model: dict[str, list[Any]] = {}
    for n in big:
        by_model.setdefault(n.gpu_model, []).append(n)
    models = sorted(by_model, key=lambda m: (-sum(x.num_gpu for x in by_model[m]), m))
    picks = [by_model[m][0] for m in models[:3]]
    picks += [n for n in big if n not in picks][: 3 - len(picks)]
    while len(picks) < 3:
        picks.append(big[0])
    ecc, xid, heat = picks
    ue_per_h = 1800.0 / speed
    specs = (
        EccSpec(node=ecc.name, gpu=2 % ecc.num_gpu, at_s=round(0.25 * w, 3), uncorrected_per_hour=ue_per_h,
                corrected_per_hour=40 * ue_per_h),
        XidSpec(node=xid.name, gpu=5 % xid.num_gpu, at_s=round(0.40 * w, 3), xid=79, count=3, interval_s=1.0),
        ThermalSpec(node=heat.name, gpu=1 % heat.num_gpu, at_s=round(0.55 * w, 3),
                    degrees_per_minute=50.0 / (6.0 * speed / 60.0), duration_s=10.0 * speed),
    )
    labels = ("uncorrectable ECC storm", "XID 79 (fallen off the bus)", "thermal runaway (cooling failure)")
    return FaultPlan(specs, labels, repair=1, repair_at_s=0.40 * w + max(0.10 * w, 8.0 * speed))


def nats_login(cfg: DemoConfig, identity: str) -> dict[str, str]:
    """The environment a service of ``identity`` logs in to the demo's NATS with (empty without --auth)."""
    if not cfg.nats_credentials:
        return {}
    user, password = cfg.nats_credentials[identity]
    return {"NATS_USER": user, "NATS_PASSWORD": password}


def nats_admin(cfg: DemoConfig) -> dict[str, Any]:
    """Connection options for the demo's own connections (it deletes streams, follows every stream)."""
    if not cfg.nats_credentials:
        return {}
    user, password = cfg.nats_credentials[ADMIN]
    return {"user": user, "password": password}


def service_env(cfg: DemoConfig, spec: RunSpec, nats_url: str, database_url: str,
                exporter_port: int = 0, faults: str = "") -> dict[str, dict[str, str]]:
    """Each service's environment for one run (the prefixed settings they read once at start).
    With ``exporter_port`` the binder serves the twin's GPUs as dcgm-exporter text there, and the
    ``agent`` entry is the telemetry agent scraping it (its node list is added once known). A process
    with a database role gets its own login's ``DATABASE_URL`` (``database_url`` where none were
    provisioned), the others none."""
    common = {"NATS_URL": nats_url}

    def db(name: str) -> dict[str, str]:
        return database_env(cfg.database_urls, name, database_url)

    binder = {
        **common, **nats_login(cfg, BINDER_ID), "GPUAWARE_BINDER_CLUSTER": spec.cluster, "GPUAWARE_BINDER_DURABLE": binder_durable(spec.cluster),
        "GPUAWARE_BINDER_TWIN_NODES": cfg.twin_nodes, "GPUAWARE_BINDER_TWIN_DEFAULT_NODES": str(cfg.node_count),
        "GPUAWARE_BINDER_WORKLOAD": cfg.trace, "GPUAWARE_BINDER_WINDOW_S": str(cfg.window_s),
        "GPUAWARE_BINDER_LOAD": str(cfg.load), "GPUAWARE_BINDER_MAX_PODS": str(cfg.max_pods),
        "GPUAWARE_BINDER_SEED": str(cfg.seed), "GPUAWARE_BINDER_SPEED": str(cfg.speed),
        "GPUAWARE_BINDER_START": str(VIRTUAL_EPOCH),
        "GPUAWARE_BINDER_FLEET": "true" if exporter_port else "false",
        "GPUAWARE_BINDER_EXPORTER_PORT": str(exporter_port),
        "GPUAWARE_BINDER_WINDOW_START_S": str(cfg.window_start_s),
        "GPUAWARE_BINDER_ELASTIC": "true" if cfg.elastic else "false",
    }
    if cfg.shared_data:
        binder["GPUAWARE_BINDER_SHARED_DATA"] = cfg.shared_data
    if faults:
        binder["GPUAWARE_BINDER_FAULTS"] = faults
    health = {
        **common, **db("health-scoring"), **nats_login(cfg, HEALTH_SCORING), "GPUAWARE_HEALTH_SCORING_CLUSTER": spec.cluster,
        "GPUAWARE_HEALTH_SCORING_INSTANCE_ID": f"health-{spec.label}",
        # the twin's GPUs are judged in their own (virtual) time; clean periods of two virtual hours
        # (a day in production) so that recoveries fit in the replayed day
        "GPUAWARE_HEALTH_SCORING_TIME_SCALE": f"{cfg.speed:g}",
        "GPUAWARE_HEALTH_SCORING_QUARANTINE_CLEAN_S": "7200", "GPUAWARE_HEALTH_SCORING_DEGRADED_CLEAN_S": "7200",
        "GPUAWARE_HEALTH_SCORING_SCORE_WINDOW_S": "10", "GPUAWARE_HEALTH_SCORING_TICK_S": "2",
        "GPUAWARE_HEALTH_SCORING_INVENTORY_WAIT_S": "3",
    }
    placement = {
        **common, **nats_login(cfg, PLACEMENT_ID), "GPUAWARE_PLACEMENT_CLUSTER": spec.cluster, "GPUAWARE_PLACEMENT_POLICY": spec.policy,
        "GPUAWARE_PLACEMENT_SEED": str(cfg.seed), "GPUAWARE_PLACEMENT_WORLD_RETRY_S": "0.25",
        "GPUAWARE_PLACEMENT_LEASE_POLL_S": "0.1",
        # stock Kubernetes as the baseline runs it: no preemption (gpuaware preempts by priority)
        "GPUAWARE_PLACEMENT_PREEMPTION": "true" if spec.ours else "false",
        # the A/B's arm without forecasts: the forecasting service runs (the same load on the machine) and
        # placement ignores it; with them, the latency-sensitive classes' forecast demand is kept free
        "GPUAWARE_PLACEMENT_FORECASTS": "true" if spec.forecasts else "false",
        "GPUAWARE_PLACEMENT_FORECAST_HEADROOM": "true" if spec.ours and spec.forecasts else "false",
        # idle nodes switched off ahead of falling demand and on a boot delay ahead of rising demand (the
        # twin's nodes take the twin's ten-minute boot); without forecasts the planner has recent demand only
        "GPUAWARE_PLACEMENT_POWER_PLANNER": "true" if spec.ours else "false",
        # stock Kubernetes retries by priority then arrival; gpuaware by fair share, then shortest
        # predicted runtime (the forecasting service's predictor), a starved tenant reclaiming what
        # others run above their share once it ran 10 minutes (the world's, here the twin's, time),
        # and a tenant kept below its share taking turns (the service's default, `gpuaware.quota.turns`)
        "GPUAWARE_PLACEMENT_QUEUE_ORDER": "fair-share" if spec.ours else "priority",
        "GPUAWARE_PLACEMENT_RECLAIM_MIN_RUNTIME_S": "600",
    }
    if cfg.typical_pods_file:
        placement["GPUAWARE_PLACEMENT_TYPICAL_PODS_FILE"] = cfg.typical_pods_file
    agent = {
        **common, **nats_login(cfg, TELEMETRY_AGENT), "GPUAWARE_TELEMETRY_AGENT_CLUSTER": spec.cluster, "GPUAWARE_TELEMETRY_AGENT_BACKEND": "dcgm",
        "GPUAWARE_TELEMETRY_AGENT_DCGM_URL": f"http://127.0.0.1:{exporter_port}/metrics/{{node}}",
        "GPUAWARE_TELEMETRY_AGENT_INSTANCE_ID": f"agent-{spec.label}",
    }
    quota = {**common, **db("quota"), **nats_login(cfg, QUOTA_ID), "GPUAWARE_QUOTA_CLUSTER": spec.cluster, "GPUAWARE_QUOTA_INSTANCE_ID": f"quota-{spec.label}",
             "GPUAWARE_QUOTA_TREE": str(cfg.out / f"quota-queues-{spec.label}.yaml"),
             "GPUAWARE_QUOTA_REPORT_INTERVAL_S": "2"}
    forecasting = {**common, **db("forecasting"), **nats_login(cfg, FORECASTING), "GPUAWARE_FORECASTING_CLUSTER": spec.cluster,
                   "GPUAWARE_FORECASTING_INSTANCE_ID": f"forecasting-{spec.label}",
                   # the twin's GPUs live a day in the run: per-GPU series from the agent's samples, one
                   # step per minute of their time (placement's forecast-headroom gets forecasts in the run)
                   "GPUAWARE_FORECASTING_TIME_SCALE": f"{cfg.speed:g}"}
    # the recorder: a short ack wait, so what a killed recorder held (the fault drill) comes back to its
    # successor within the run
    recorder = {**common, **db("recorder"), **nats_login(cfg, RECORDER_ID), "GPUAWARE_RECORDER_CLUSTER": spec.cluster,
                "GPUAWARE_RECORDER_INSTANCE_ID": f"recorder-{spec.label}", "GPUAWARE_RECORDER_ACK_WAIT_S": "5"}
    return {"binder": binder, "placement": placement, "agent": agent, "health": health, "quota": quota,
            "forecasting": forecasting, "recorder": recorder}
