"""The demo's numbers, from the recorded events (``gpuaware.sim.metrics``): each run's figures and
invariants, the health figures, and the comparison of the two runs (``demo_report`` renders them).

Nothing here talks to a server: it reads ``RunResult``s (what the demo saw) and the workload
rebuilt from the same settings the binder used (for each pod's class and tenant, which the
contract's ``PodPending`` does not carry).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaware.cli.demo_config import DemoConfig
from gpuaware.cli.demo_record import RunLog, RunResult
from gpuaware.schemas import HealthState, PodBound, PodFinished, PodPreempted, percentile
from gpuaware.sim import (
    JobLife,
    JobShape,
    PodRecord,
    SimPod,
    delay_stats,
    delays_by_class,
    fair_share_over_windows,
    finish_time_fairness,
    jain_index,
    jct,
    job_lives,
    queue_delays,
    slo_attainment,
    tenant_service,
    tenant_windows,
    time_in_system,
    time_weighted_mean,
    victim_costs,
)

__all__ = [
    "IN_FLIGHT_S",
    "LATENCY_SENSITIVE_CLASSES",
    "SLOWDOWN_IS",
    "analyse",
    "busiest_window",
    "compare",
    "fair_share_hourly",
    "forecast_ab",
    "health_figures",
    "job_shapes",
    "pod_records",
    "power_figures",
    "rebuild_workload",
    "victims",
    "virtual_clock",
]

SLO_CLASS = "inference"
LATENCY_SENSITIVE_CLASSES = ("inference", "interactive")
"""the workload classes someone waits for (the priority classes placement's forecast head-room serves)"""


def rebuild_workload(cfg: DemoConfig, *, whole_trace: bool = False) -> dict[str, SimPod]:
    """The twin's workload, built from the binder's settings exactly as the binder builds it (same
    libraries, same seed, same window): pod uid -> SimPod. ``whole_trace`` ignores the window (traces
    only). Empty when it cannot be rebuilt (the report then falls back to what the events say)."""
    from gpuaware.sim import (
        default_cluster,
        from_openb,
        generate,
        load_philly,
        load_pods,
        openb_cluster,
        openb_node_list,
        shared_data_dir,
        spec_for_cluster,
    )

    shared = Path(cfg.shared_data) if cfg.shared_data else shared_data_dir()
    start = None if cfg.window_start_s < 0 or whole_trace else cfg.window_start_s
    window = None if whole_trace else cfg.window_s
    try:
        if cfg.trace == "generator":
            nodes = (openb_cluster(openb_node_list(shared)) if cfg.twin_nodes == "openb"
                     else default_cluster(cfg.node_count))
            gpus = sum(n.num_gpu for n in nodes)
            spec = spec_for_cluster(gpus, load=cfg.load, duration_s=cfg.window_s,
                                    available_models=tuple(sorted({n.gpu_model for n in nodes})),
                                    max_pods=cfg.max_pods, elastic=cfg.elastic)
            pods = generate(spec, cfg.seed)
        elif cfg.trace == "openb":
            tp = load_pods(shared / "openb" / "openb_pod_list_default.csv")
            first = min((p.creation_time or 0.0 for p in tp), default=0.0)
            pods = from_openb(tp, window_start=None if start is None else first + start, window_s=window,
                              max_pods=0 if whole_trace else cfg.max_pods)
        else:
            pods = load_philly(shared / "pollux" / "traces" / "philly.csv", window_start=start, window_s=window,
                               max_pods=0 if whole_trace else cfg.max_pods)
    except Exception:
        return {}
    return {p.uid: p for p in pods}


def busiest_window(arrivals: Sequence[float], length: float) -> float:
    """Where a window of ``length`` seconds catches the most arrivals (its start: one of the
    arrivals; 0 for none). Traces are sparse at their start, so a demo replays their busiest day."""
    xs = sorted(arrivals)
    best, best_start, j = 0, 0.0, 0
    for i, x in enumerate(xs):
        while xs[j] < x - length:
            j += 1
        # the window [x - length, x] holds xs[j..i]; it starts at xs[j]
        if i - j + 1 > best:
            best, best_start = i - j + 1, xs[j]
    return best_start


def pod_records(run: RunResult, workload: Mapping[str, SimPod]) -> list[PodRecord]:
    """Each arrived pod's life, times relative to the twin's virtual start."""
    t0 = run.started_at
    open_: dict[str, float] = {}
    intervals: dict[str, list[tuple[float, float | None]]] = {}
    finished: dict[str, float] = {}
    for ev in run.log.binder_events:
        if isinstance(ev, PodBound):
            open_[ev.pod_uid] = ev.bound_at - t0
        elif isinstance(ev, (PodFinished, PodPreempted)):
            at = (ev.finished_at if isinstance(ev, PodFinished) else ev.preempted_at) - t0
            start = open_.pop(ev.pod_uid, None)
            if start is not None:
                intervals.setdefault(ev.pod_uid, []).append((start, at))
            if isinstance(ev, PodFinished):
                finished[ev.pod_uid] = at
    for uid, start in open_.items():
        intervals.setdefault(uid, []).append((start, None))
    out = []
    for uid, p in run.log.pending.items():
        sim = workload.get(uid)
        klass = sim.klass.value if sim is not None else (p.priority_class or "batch")
        out.append(PodRecord(
            uid=uid, klass=klass, tenant=p.queue or p.namespace,
            gpu_milli_total=p.gpu_milli_total if p.num_gpu else 0, arrival=p.submitted_at - t0,
            intervals=tuple(sorted(intervals.get(uid, []), key=lambda iv: iv[0])), finished=finished.get(uid),
            duration=p.expected_duration_s))
    return out


def _clean(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


def _downsample(xs: Sequence[Any], limit: int = 600) -> list[Any]:
    if len(xs) <= limit:
        return list(xs)
    step = len(xs) / limit
    return [xs[int(i * step)] for i in range(limit)] + [xs[-1]]


def analyse(run: RunResult, cfg: DemoConfig, workload: Mapping[str, SimPod]) -> dict[str, Any]:
    """Every number of one run, JSON-ready (series downsampled for the file, full for the plots)."""
    horizon = cfg.window_s
    records = pod_records(run, workload)
    ledger, shared, fractional = run.log.replay(run.gpus)
    t0 = run.started_at
    samples = ledger.samples
    times = [s.t - t0 for s in samples]
    alloc = time_weighted_mean(times, [s.allocated for s in samples], 0.0, horizon)
    occ = time_weighted_mean(times, [s.occupied for s in samples], 0.0, horizon)
    frag = time_weighted_mean(times, [s.fragmentation for s in samples], 0.0, horizon)
    accounting = run.log.accounting()
    states = Counter(st for st, _ in accounting.values())
    reasons = Counter(r.split(":")[0] for st, r in accounting.values() if st == "pending")
    unaccounted = sorted(uid for uid, (st, r) in accounting.items() if st == "pending" and not r)
    delays = queue_delays(records, horizon)
    jcts = jct(records)
    in_system = time_in_system(records, horizon)
    slo_pods = [r for r in records if r.klass == SLO_CLASS]
    met, decided = slo_attainment(slo_pods, cfg.slo_s, horizon)
    service = tenant_service(records, horizon)
    fp, _ = run.log.workload_fingerprint()
    lives = job_lives(records, job_shapes(run.log), horizon)
    in_window = [s for s in samples if s.t - t0 <= horizon]
    return {
        "label": run.spec.label, "policy": run.spec.policy, "cluster": run.spec.cluster,
        "decisions_by_policy": dict(run.log.policies),
        "bind_failures": dict(run.log.bind_failures.most_common()),
        "wall_s": round(run.wall_s, 1), "virtual_s": round(run.virtual_end - t0, 1), "reached_end": run.reached_end,
        "nodes": run.nodes, "gpus": len(run.gpus),
        "pods": {"workload": len(workload) or None, "arrived": len(records), "bound": states["bound"],
                 "finished": states["finished"], "pending": states["pending"],
                 "pending_reasons": dict(reasons.most_common()), "unaccounted": unaccounted[:20],
                 "unaccounted_count": len(unaccounted)},
        "allocation": {"mean": _clean(alloc), "occupied_mean": _clean(occ), "fragmentation_mean": _clean(frag),
                       "peak": _clean(max((s.allocated for s in in_window), default=0.0)),
                       "fractional_bound": fractional, "fractional_on_shared_gpu": shared},
        "queue_delay_s": {"all": {k: _clean(v) for k, v in delay_stats(delays).items()},
                          "latency_sensitive": {k: _clean(v) for k, v in delay_stats(queue_delays(
                              [r for r in records if r.klass in LATENCY_SENSITIVE_CLASSES], horizon)).items()},
                          "by_class": {c: {k: _clean(v) for k, v in st.items()}
                                       for c, st in delays_by_class(records, horizon).items()}},
        "jct_s": {**{k: _clean(v) for k, v in delay_stats(jcts).items()}, "finished": len(jcts),
                  # every arrived job, the unfinished counted to the end of the window (see time_in_system)
                  "in_system_mean": _clean(statistics.fmean(in_system) if in_system else math.nan)},
        "slo": {"class": SLO_CLASS, "threshold_s": cfg.slo_s, "met": met, "decided": decided,
                "attainment": _clean(met / decided) if decided else None},
        "fairness": {"jain": _clean(jain_index(list(service.values())) if service else math.nan),
                     "served_share": {t: _clean(v) for t, v in service.items()},
                     "hourly": fair_share_hourly(records, len(run.gpus), horizon),
                     "finish_time": _rounded(finish_time_fairness(lives, float(len(run.gpus)), horizon))},
        "victims": victims(run.log, lives, horizon),
        "invariants": {"over_allocations_replayed": len(ledger.violations),
                       "over_allocation_examples": [f"{v.gpu} {v.milli} milli at t={v.t - t0:.0f}s (pod {v.pod}; "
                                                    f"held by {', '.join(v.holders)})" for v in ledger.violations[:5]],
                       "over_allocations_in_world_snapshot": len(run.snapshot_violations),
                       "world_snapshot_pods": run.snapshot_pods, "unknown_gpus": len(ledger.unknown_gpus),
                       "double_bound": len(run.log.double_bound), "double_bound_examples": run.log.double_bound[:5]},
        "preemption": _preemption(run),
        "failover": run.failover,
        "health": health_figures(run),
        "power": power_figures(run, horizon),
        "quota": run.quota or {"status": "not in this run"},
        "forecast": run.forecast or {"status": "not in this run"},
        "workload_fingerprint": fp,
        "messages": dict(sorted(run.messages.items())),
        "recorded": dict(sorted(run.log.recorded.items())),
        "placement_events_rows": dict(sorted(run.db.items())),
        "exit_codes": run.exit_codes,
        "failure": run.failure,
        "series": {"t_h": _downsample([round(t / 3600, 4) for t in times]),
                   "allocated": _downsample([round(s.allocated, 4) for s in samples]),
                   "occupied": _downsample([round(s.occupied, 4) for s in samples]),
                   "fragmentation": _downsample([round(s.fragmentation, 4) for s in samples])},
    }


IN_FLIGHT_S = 1.0
"""a decision made within this long after a quarantine was published was already in flight (placement
reads the state change from the stream); later ones would break the invariant"""


def virtual_clock(clock: Sequence[tuple[float, float]]) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(wall -> virtual, virtual -> wall), piecewise linear over the (wall, virtual) pairs a run saw (the
    twin may jump when idle); identity when there are fewer than two."""
    if len(clock) < 2:
        return (lambda t: t), (lambda t: t)
    walls = [w for w, _ in clock]
    virt = [v for _, v in clock]

    def interp(xs: list[float], ys: list[float], t: float) -> float:
        i = min(max(bisect.bisect_right(xs, t), 1), len(xs) - 1)
        (a, b), (x, y) = (xs[i - 1], xs[i]), (ys[i - 1], ys[i])
        return x + (y - x) * (t - a) / (b - a) if b > a else y

    return (lambda t: interp(walls, virt, t)), (lambda t: interp(virt, walls, t))


def sampled_before(clock: Sequence[tuple[float, float]], virtual: float) -> float:
    """The wall time of the last (wall, virtual) sample at or before ``virtual`` (-inf when none).
    Between two samples the wall -> virtual mapping is a guess (the twin skips quiet stretches, and a
    slow snapshot on a busy machine leaves a gap of an hour of virtual time): whatever happened after
    that sample may already be past ``virtual``, so a fault's detection is not dated before it by
    interpolation (the philly demo once reported an ECC storm "caught" half an hour before it began)."""
    return max((w for w, v in clock if v <= virtual), default=-math.inf)


def _quarantines(run: RunResult) -> dict[str, list[list[float | None]]]:
    """Per GPU, [published, lifted] wall times of each quarantine (lifted None while it lasts)."""
    out: dict[str, list[list[float | None]]] = {}
    for c in run.log.health_changes:
        spans = out.setdefault(c.gpu_uuid, [])
        open_ = bool(spans) and spans[-1][1] is None
        if c.current is HealthState.QUARANTINED and not open_:
            spans.append([c.emitted_at, None])
        elif c.current is not HealthState.QUARANTINED and open_:
            spans[-1][1] = c.emitted_at
    return out


def _running_on(run: RunResult, gpu: str, at_virtual: float) -> int:
    """Pods holding a slice of ``gpu`` at the twin's time ``at_virtual`` (from the binder's events)."""
    holding: set[str] = set()
    for ev in run.log.binder_events:
        t = getattr(ev, "bound_at", None) or getattr(ev, "finished_at", None) or getattr(ev, "preempted_at", None)
        if t is None:
            continue
        if t > at_virtual:
            break
        if isinstance(ev, PodBound) and any(s.gpu_uuid == gpu for s in ev.slices):
            holding.add(ev.pod_uid)
        elif isinstance(ev, PodFinished | PodPreempted):
            holding.discard(ev.pod_uid)
    return len(holding)


def health_figures(run: RunResult) -> dict[str, Any]:
    """What health-scoring saw and did in a run: each injected fault (caught when, its GPU's states after),
    decisions checked against quarantines, alerts raised and resolved, the operator's repair."""
    h = run.health
    status = h.get("status", "not in this run")
    if status == "not in this run":
        return {"status": status}
    virt, wall = virtual_clock(run.clock)
    t0 = run.started_at

    def vh(t_wall: float) -> float:
        return round((virt(t_wall) - t0) / 3600, 3)

    spans = _quarantines(run)
    violations: list[str] = []
    in_flight = 0
    on_quarantined: Counter[str] = Counter()
    for decided_at, gpus, uid in run.log.placements:
        for g in gpus:
            for a, b in spans.get(g, []):
                if a is not None and decided_at >= a and (b is None or decided_at < b):
                    if decided_at - a <= IN_FLIGHT_S:
                        in_flight += 1
                    else:
                        on_quarantined[g] += 1
                        violations.append(f"pod {uid} on {g} {decided_at - a:.1f}s after its quarantine")
    changes = [c for c in run.log.health_changes if c.previous is not None]
    faults = []
    for f in h.get("faults", []):
        gpu, start_v = f["gpu_uuid"], t0 + f["at_s"]
        mine = [c for c in changes if c.gpu_uuid == gpu]
        after = sampled_before(run.clock, start_v - 60)
        caught = next((c for c in mine if c.current is not HealthState.HEALTHY
                       and (virt(c.changed_at) >= start_v - 60 or c.changed_at >= after)), None)
        entry: dict[str, Any] = {
            **f, "at_h": round(f["at_s"] / 3600, 3), "caught": caught is not None,
            "timeline": [{"at_h": vh(c.changed_at), "from": c.previous.value if c.previous else None,
                          "to": c.current.value, "reasons": [r for r in c.reasons if r != "recovering"][:6]}
                         for c in mine],
            "first_alert": next(({"rule": a.rule, "at_h": vh(a.started_at)} for a in run.log.alerts_raised
                                 if a.gpu_uuid == gpu and virt(a.started_at) >= start_v - 60), None),
            "decisions_on_it_while_quarantined": on_quarantined.get(gpu, 0),
            "decisions_on_it_after_fault": sum(1 for t, gs, _ in run.log.placements
                                               if gpu in gs and virt(t) >= start_v)}
        if caught is not None:
            entry.update(caught_state=caught.current.value, caught_at_h=vh(caught.changed_at),
                         detected_after_virtual_min=round(max(0.0, virt(caught.changed_at) - start_v) / 60, 1),
                         detected_after_wall_s=round(max(0.0, caught.emitted_at - wall(start_v)), 2),
                         pods_running_when_caught=_running_on(run, gpu, virt(caught.changed_at)),
                         caught_reasons=[r for r in caught.reasons if r != "recovering"][:8])
        drains = [d for d in run.log.drains if d.gpu_uuid == gpu and virt(d.recommended_at) >= start_v - 60]
        if drains:
            d = drains[0]
            entry["drain"] = {"at_h": vh(d.recommended_at), "urgent": d.urgent, "pods": len(d.pods),
                              "checkpointable": sum(p.checkpointable for p in d.pods),
                              "order": [p.pod_uid for p in d.pods][:8], "reason": d.reason}
        faults.append(entry)
    resolved = {(a.fingerprint, a.started_at): a for a in run.log.alerts_resolved}
    alerts = [{"rule": a.rule, "severity": a.severity.value, "gpu_uuid": a.gpu_uuid, "node": a.node,
               "raised_at_h": vh(a.started_at),
               "resolved_at_h": vh(resolved[(a.fingerprint, a.started_at)].resolved_at)
               if (a.fingerprint, a.started_at) in resolved else None, "summary": a.summary}
              for a in run.log.alerts_raised]
    stats = h.get("stats") or {}
    return {
        "status": status,
        "faults": faults,
        "all_faults_caught": all(f["caught"] for f in faults) if faults else None,
        "transitions": dict(Counter(f"{c.previous.value}->{c.current.value}" for c in changes if c.previous)),
        "gpus_with_a_state": len({c.gpu_uuid for c in run.log.health_changes}),
        "decisions_checked": len(run.log.placements),
        "decisions_on_quarantined_gpus": len(violations),
        "violation_examples": violations[:5],
        "decisions_in_flight_at_a_quarantine": in_flight,
        "drain_recommendations": {"published": len(run.log.drains),
                                  "pods_listed": sum(len(d.pods) for d in run.log.drains),
                                  "urgent": sum(d.urgent for d in run.log.drains)},
        "alerts": {"raised": dict(Counter(a["rule"] for a in alerts)),
                   "resolved": dict(Counter(a["rule"] for a in alerts if a["resolved_at_h"] is not None)),
                   "open_at_end": sum(1 for a in alerts if a["resolved_at_h"] is None), "list": alerts},
        "repair": h.get("repair"),
        "alertmanager": h.get("alertmanager"),
        "service": {k: stats.get(k) for k in ("gpus", "states", "open_alerts", "counts", "issues", "published",
                                              "checkpoints", "checkpoint_failures", "dead_lettered")} if stats else None,
    }


SLOWDOWN_IS = ("a victim's JCT over the same job's JCT without the preemption: its run from its first start "
               "without a stop, keeping every worker it reached (an elastic job progressing at workers / its "
               "most workers of full speed; a fixed job: first start + its work); a victim unfinished at the "
               "end counts with a lower bound (the end - arrival + the work it has not done)")


def job_shapes(log: RunLog) -> dict[str, JobShape]:
    """Each gang member's job (its gang) and worker range, from the requests as first submitted; a pod
    outside a gang is a job of its own."""
    return {uid: JobShape(p.gang_id, p.gang_min_members, max(p.gang_min_members, p.gang_max_members))
            for uid, p in log.pending.items() if p.gang_id}


def _rounded(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}


def victims(log: RunLog, lives: Sequence[JobLife], horizon: float) -> dict[str, Any]:
    """What preemption and resizing cost the jobs they hit (``gpuaware.sim.victim_costs``), with the
    resize handshakes the binder asked for (checkpoint requests with reason ``resize``, one per job and
    instant) beside the grows and shrinks read from the pods' events."""
    costs = victim_costs(lives, horizon)
    costs["all"] = _rounded(costs["all"])
    costs["by_class"] = {k: _rounded(v) for k, v in costs["by_class"].items()}

    def job(uid: str) -> str:
        p = log.pending.get(uid)
        return (p.gang_id if p is not None else None) or uid

    costs["resizes"]["handshakes"] = len({(job(r.pod_uid), round(r.requested_at, 3)) for r in log.resize_requests})
    return {**costs, "slowdown_is": SLOWDOWN_IS}


def fair_share_hourly(records: Sequence[PodRecord], gpus: int, horizon: float) -> dict[str, Any]:
    """Hour by hour (``gpuaware.sim.fair_share_over_windows``): Jain over the tenants with demand, and
    the worst tenant's time-averaged share of its fair share over the contended hours."""
    f = fair_share_over_windows(tenant_windows(records, horizon), float(gpus))

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    return {"jain_backlogged_mean": r(f.jain_mean), "jain_backlogged_contended_mean": r(f.jain_contended_mean),
            "hours": f.windows, "contended_hours": f.contended_windows, "tenants": f.tenants,
            "worst_tenant": f.worst_tenant, "worst_share_of_fair_share": r(f.worst_share),
            "share_of_fair_share": {t: r(v) for t, v in f.share_of_fair_share.items()}}


def _victims_against(ours: RunResult, base: RunResult) -> dict[str, Any]:
    """Victims of the gpuaware run finished in both runs: their JCT over the same job's JCT in the
    baseline run (which never preempts; its placement differs too, so this is not preemption's cost
    alone)."""
    def lives(run: RunResult) -> dict[str, Any]:
        end = run.virtual_end - run.started_at
        return {j.job: j for j in job_lives(pod_records(run, {}), job_shapes(run.log), end)}

    a, b = lives(ours), lives(base)
    ratios = [(j.finished - j.arrival) / (b[k].finished - b[k].arrival) for k, j in a.items()
              if j.victim and j.finished is not None and k in b and b[k].finished is not None
              and b[k].finished > b[k].arrival]
    return {"jobs": len(ratios), "p50": _clean(percentile(ratios, 50)) if ratios else None,
            "p95": _clean(percentile(ratios, 95)) if ratios else None}


def _preemption(run: RunResult) -> dict[str, Any]:
    """Planned (in decisions) and executed (binder events) preemptions, and checkpoints kept."""
    planned = run.log.planned_victims
    done = [ev for ev in run.log.binder_events if isinstance(ev, PodPreempted)]
    return {"planned_victims": planned, "preempted": len(done),
            "checkpointed": sum(1 for ev in done if ev.checkpointed)}


def compare(ours: RunResult, base: RunResult, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The cross-run invariants: the same workload, and who allocated more."""
    _, ra = ours.log.workload_fingerprint()
    _, rb = base.log.workload_fingerprint()
    common = ra.keys() & rb.keys()
    differing = sorted(uid for uid in common if ra[uid] != rb[uid])
    same_set = ra.keys() == rb.keys()
    ours_alloc = a["allocation"]["mean"] or 0.0
    base_alloc = b["allocation"]["mean"] or 0.0
    return {
        "same_workload": same_set and not differing,
        "same_pod_ids": same_set, "pods_only_in_gpuaware": len(ra.keys() - rb.keys()),
        "pods_only_in_baseline": len(rb.keys() - ra.keys()), "requests_differing": differing[:10],
        "allocation_gpuaware": ours_alloc, "allocation_baseline": base_alloc,
        "allocation_gain_pct": round(100 * (ours_alloc - base_alloc) / base_alloc, 2) if base_alloc else None,
        "gpuaware_beats_baseline": ours_alloc > base_alloc,
        "victims_jct_over_baseline_jct": _victims_against(ours, base),
    }


FORECAST_AB_DELAY_GOAL = 0.8
"""with forecasts, the latency-sensitive classes' p99 queue delay at most this share of the one without"""
FORECAST_AB_ALLOCATION_PP = 2.0
"""... at an allocation within this many percentage points"""


def power_figures(run: RunResult, horizon: float) -> dict[str, Any]:
    """The node-power planner's part in one run (empty when it did not run): node-hours switched off
    within the window (a node is off from the binder's ``off`` until its next answer, a boot counted as
    on since a booting node draws power), their share of the window's node-hours, the
    recommendations by action, the refusals, and the planner's own tally of steps where demand outran
    the powered nodes (``short``: from its recommendations, which state it)."""
    log = run.log
    if not log.power_recommended and not log.power_changed:
        return {"planner": "not in this run"}
    t0, end = run.started_at, run.started_at + horizon
    off_since: dict[str, float] = {}
    off_s = 0.0
    for ev in sorted(log.power_changed, key=lambda e: e.changed_at):
        at = min(max(ev.changed_at, t0), end)
        if ev.state == "off":
            off_since.setdefault(ev.node, at)
        elif ev.node in off_since:
            off_s += at - off_since.pop(ev.node)
    off_s += sum(end - since for since in off_since.values())
    actions = Counter(r.action for r in log.power_recommended)
    short = [r for r in log.power_recommended if "short" in r.reason]
    return {"planner": "on", "node_hours_off": round(off_s / 3600.0, 2),
            "share_of_node_hours": _clean(off_s / (max(1, run.nodes) * horizon)) if horizon > 0 else None,
            "recommended": {"power-down": actions["power-down"], "power-up": actions["power-up"]},
            "refused": sum(1 for c in log.power_changed if c.reason),
            "recommendations_after_a_shortfall": len(short),
            "nodes_off_at_end": sorted(off_since)}


def forecast_ab(with_: Mapping[str, Any], without: Mapping[str, Any]) -> dict[str, Any]:
    """gpuaware's run against the same run without its forecasts (``analyse``'s figures of each): the
    latency-sensitive classes' p99 queue delay, the allocation, and whether each goal was met (None
    where a figure is missing)."""
    def figures(a: Mapping[str, Any]) -> dict[str, Any]:
        ls = a["queue_delay_s"]["latency_sensitive"]
        power = a.get("power", {})
        return {"latency_sensitive_p99_s": ls.get("p99"), "latency_sensitive_pods": ls.get("n"),
                "allocation_mean": a["allocation"]["mean"], "node_hours_off": power.get("node_hours_off"),
                "power_ups": power.get("recommended", {}).get("power-up")}

    on, off = figures(with_), figures(without)
    p_on, p_off = on["latency_sensitive_p99_s"], off["latency_sensitive_p99_s"]
    ratio = p_on / p_off if p_on is not None and p_off else None
    a_on, a_off = on["allocation_mean"], off["allocation_mean"]
    pp = (a_on - a_off) * 100.0 if a_on is not None and a_off is not None else None
    return {"with_forecasts": on, "without_forecasts": off,
            "p99_ratio": None if ratio is None else round(ratio, 3),
            "allocation_pp": None if pp is None else round(pp, 2),
            "goals": {"p99_ratio_at_most": FORECAST_AB_DELAY_GOAL, "allocation_pp_within": FORECAST_AB_ALLOCATION_PP},
            "met": None if ratio is None or pp is None
            else ratio <= FORECAST_AB_DELAY_GOAL and abs(pp) <= FORECAST_AB_ALLOCATION_PP}
