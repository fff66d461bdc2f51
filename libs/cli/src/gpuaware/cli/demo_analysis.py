"""The demo's report: numbers from the recorded events (``gpuaware.sim.metrics``), the invariants,
PNG plots and one self-contained HTML page (images inlined), next to ``report.json``.

Nothing here talks to a server: it reads ``RunResult``s (what the recorder saw) and the workload
rebuilt from the same settings the binder used (for each pod's class and tenant, which the
contract's ``PodPending`` does not carry).
"""

from __future__ import annotations

import base64
import bisect
import html
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaware.cli.demo_config import DemoConfig
from gpuaware.cli.demo_record import RunResult
from gpuaware.schemas import HealthState, PodBound, PodFinished, PodPreempted
from gpuaware.sim.metrics import (
    PodRecord,
    delay_stats,
    delays_by_class,
    jain_index,
    jct,
    queue_delays,
    slo_attainment,
    tenant_service,
    time_in_system,
    time_weighted_mean,
)
from gpuaware.sim.workload_gen import SimPod

__all__ = ["analyse", "busiest_window", "compare", "health_figures", "pod_records", "rebuild_workload", "virtual_clock",
           "write_html", "write_plots", "write_pods_csv", "write_typical_pods"]

SLO_CLASS = "inference"


def rebuild_workload(cfg: DemoConfig, *, whole_trace: bool = False) -> dict[str, SimPod]:
    """The twin's workload, built from the binder's settings exactly as the binder builds it (same
    libraries, same seed, same window): pod uid -> SimPod. ``whole_trace`` ignores the window (traces
    only). Empty when it cannot be rebuilt (the report then falls back to what the events say)."""
    from gpuaware.sim.traces import load_pods, shared_data_dir
    from gpuaware.sim.twin import default_cluster, openb_cluster, openb_node_list
    from gpuaware.sim.workload_gen import from_openb, generate, load_philly, spec_for_cluster

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
                                    max_pods=cfg.max_pods)
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


def write_typical_pods(path: Path, workload: Mapping[str, SimPod]) -> bool:
    """The workload's request mix as an openb-format pod list (``cpu_milli,num_gpu,gpu_milli``): what
    placement's fragmentation-aware scores assume about the pods to come (FGD's premise). False when
    there is no workload to describe."""
    import csv

    if not workload:
        return False
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu_milli", "num_gpu", "gpu_milli"])
        for p in workload.values():
            w.writerow([p.uid, p.cpu_milli, p.num_gpu, p.gpu_milli if p.num_gpu else 0])
    return True


def write_pods_csv(path: Path, run: RunResult, workload: Mapping[str, SimPod]) -> None:
    """One line per arrived pod: what it asked, when it arrived, started, finished, and how it ended."""
    import csv

    accounting = run.log.accounting()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pod_uid", "class", "tenant", "gpu_milli_total", "arrival_s", "first_start_s", "finished_s",
                    "bound_intervals", "state", "reason", "node"])
        for r in pod_records(run, workload):
            state, reason = accounting.get(r.uid, ("", ""))
            d = run.log.decided.get(r.uid)
            w.writerow([r.uid, r.klass, r.tenant, r.gpu_milli_total, round(r.arrival, 1),
                        None if r.first_start is None else round(r.first_start, 1),
                        None if r.finished is None else round(r.finished, 1), len(r.intervals), state, reason,
                        d.node if d is not None else ""])


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
                          "by_class": {c: {k: _clean(v) for k, v in st.items()}
                                       for c, st in delays_by_class(records, horizon).items()}},
        "jct_s": {**{k: _clean(v) for k, v in delay_stats(jcts).items()}, "finished": len(jcts),
                  # every arrived job, the unfinished counted to the end of the window (see time_in_system)
                  "in_system_mean": _clean(statistics.fmean(in_system) if in_system else math.nan)},
        "slo": {"class": SLO_CLASS, "threshold_s": cfg.slo_s, "met": met, "decided": decided,
                "attainment": _clean(met / decided) if decided else None},
        "fairness": {"jain": _clean(jain_index(list(service.values())) if service else math.nan),
                     "served_share": {t: _clean(v) for t, v in service.items()}},
        "invariants": {"over_allocations_replayed": len(ledger.violations),
                       "over_allocation_examples": [f"{v.gpu} {v.milli} milli at t={v.t - t0:.0f}s (pod {v.pod})"
                                                    for v in ledger.violations[:5]],
                       "over_allocations_in_world_snapshot": len(run.snapshot_violations),
                       "world_snapshot_pods": run.snapshot_pods, "unknown_gpus": len(ledger.unknown_gpus),
                       "double_bound": len(run.log.double_bound), "double_bound_examples": run.log.double_bound[:5]},
        "preemption": _preemption(run),
        "failover": run.failover,
        "health": health_figures(run),
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
        "service": {k: stats.get(k) for k in ("gpus", "states", "open_alerts", "counts", "issues", "published",
                                              "checkpoints", "checkpoint_failures", "dead_lettered")} if stats else None,
    }


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
    }


# --- plots and HTML -----------------------------------------------------------------------------------


def write_plots(out: Path, results: Sequence[dict[str, Any]], full: Mapping[str, Any],
                window_h: float | None = None) -> list[Path]:
    """PNG plots (matplotlib, Agg); ``full`` holds the un-downsampled series by label; time axes end
    at ``window_h`` (the replayed window) when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"gpuaware": "#1f77b4", "baseline": "#d62728"}
    paths: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        s = full[r["label"]]
        c = colors.get(r["label"])
        ax.step(s["t_h"], s["allocated"], where="post", color=c,
                label=f"{r['label']} ({r['policy']}): asked compute held, mean {r['allocation']['mean']:.3f}")
        ax.step(s["t_h"], s["occupied"], where="post", color=c, linestyle="--", alpha=0.6,
                label=f"{r['label']}: GPUs occupied, mean {r['allocation']['occupied_mean']:.3f}")
        util = (r.get("utilisation") or {}).get("series")
        if util and util["t_h"]:
            # None (not measured: the twin jumped over a quiet stretch) breaks the line: a gap, not a flat value
            values = [math.nan if v is None else v for v in util["utilisation"]]
            gap_h = r["utilisation"].get("not_measured_h") or 0
            ax.step(util["t_h"], values, where="post", color=c, linestyle=":", linewidth=1.6,
                    label=f"{r['label']}: GPU utilisation measured by telemetry, mean {r['utilisation']['mean']:.3f}"
                          + (f" ({gap_h:g} h skipped by the twin: not measured)" if gap_h else ""))
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("share of the cluster's GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("GPU allocation and measured utilisation over time")
    ax.legend(fontsize=7, loc="lower right")
    save(fig, "allocation.png")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    for r in results:
        s = full[r["label"]]
        ax.step(s["t_h"], s["fragmentation"], where="post", color=colors.get(r["label"]),
                label=f"{r['label']}: mean {r['allocation']['fragmentation_mean']:.3f}")
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("free compute on partly used GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("Fragmentation over time")
    ax.legend(fontsize=8)
    save(fig, "fragmentation.png")

    classes = sorted({c for r in results for c in r["queue_delay_s"]["by_class"]})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.38
    for k, q in enumerate(("p50", "p99")):
        ax = axes[k]
        for i, r in enumerate(results):
            vals = [(r["queue_delay_s"]["by_class"].get(c, {}).get(q) or 0.0) / 60 for c in classes]
            ax.bar([x + i * width for x in range(len(classes))], vals, width, color=colors.get(r["label"]),
                   label=r["label"])
        ax.set_xticks([x + width / 2 for x in range(len(classes))], classes)
        ax.set_ylabel("minutes (virtual)")
        ax.set_title(f"queue delay {q} per class")
        ax.legend(fontsize=8)
    save(fig, "queue_delay.png")

    tenants = sorted({t for r in results for t in r["fairness"]["served_share"]})
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for i, r in enumerate(results):
        vals = [r["fairness"]["served_share"].get(t) or 0.0 for t in tenants]
        ax.bar([x + i * width for x in range(len(tenants))], vals, width, color=colors.get(r["label"]),
               label=f"{r['label']}: Jain {r['fairness']['jain']:.3f}")
    ax.set_xticks([x + width / 2 for x in range(len(tenants))], tenants)
    ax.set_ylabel("GPU-seconds held / asked")
    ax.set_title("share of demand served per tenant")
    ax.legend(fontsize=8)
    save(fig, "fairness.png")

    for r in results:
        acc = ((r.get("forecast") or {}).get("accuracy") or {})
        if acc.get("status") == "scored" and acc["plot"]["t_h"]:
            save(_demand_plot(plt, r, acc, window_h), "forecast.png")

    subjects = sorted({s for r in results for s in r["messages"]})
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.32 * len(subjects) + 1)))
    for i, r in enumerate(results):
        vals = [r["messages"].get(s, 0) for s in subjects]
        ax.barh([y + i * width for y in range(len(subjects))], vals, width, color=colors.get(r["label"]),
                label=r["label"])
    ax.set_yticks([y + width / 2 for y in range(len(subjects))], subjects, fontsize=7)
    ax.set_xscale("symlog")
    ax.set_xlabel("messages during the run")
    ax.set_title("NATS messages per subject")
    ax.legend(fontsize=8)
    save(fig, "messages.png")
    return paths


def _demand_plot(plt: Any, r: dict[str, Any], acc: dict[str, Any], window_h: float | None) -> Any:
    """The cluster's GPU demand (running + pending) minute by minute, and what the forecasting service
    predicted for each minute 30 minutes before it (p50 and p90)."""
    p = acc["plot"]

    def nan(v: list[Any]) -> list[float]:
        return [math.nan if x is None else x for x in v]

    h30 = acc["at_horizon_min"].get("30", {})
    model = r["forecast"].get("model", {}).get("model") or "persistence"
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.step(p["t_h"], p["actual"], where="post", color="black", linewidth=1.2, label="demand: GPUs running + pending")
    ax.step(p["t_h"], nan(p["p50_30min"]), where="post", color="#1f77b4", linewidth=1.0,
            label=f"forecast 30 min ahead, p50 ({model}; RMSE {h30.get('rmse')} vs persistence "
                  f"{h30.get('persistence_rmse')})")
    ax.fill_between(p["t_h"], nan(p["p50_30min"]), nan(p["p90_30min"]), color="#1f77b4", alpha=0.25, step="post",
                    label=f"... up to its p90 (the actual at or under it {h30.get('p90_coverage')} of the time)")
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("GPUs")
    ax.set_title(f"{r['label']} run: GPU demand and the forecasting service's forecast")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def write_html(path: Path, report: Mapping[str, Any], plots: Sequence[Path]) -> None:
    """One self-contained page: tables of the headline numbers, the plots inlined as base64 PNGs."""
    runs = report["runs"]
    a, b = runs.get("gpuaware"), runs.get("baseline")
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>gpuaware demo</title><style>",
             "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
             "text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}"
             ".ok{color:#080}.bad{color:#c00}img{max-width:100%}",
             "</style></head><body>", "<h1>gpuaware demo</h1>",
             f"<p>{html.escape(report['summary'])}</p>"]
    inv = {**report.get("invariants", {}),
           **{f"outcome: {k}": v for k, v in report.get("outcomes", {}).items()}}
    parts.append("<h2>Invariants</h2><ul>" + "".join(
        f"<li class='{'ok' if ok else 'bad'}'>{'✔' if ok else '✘'} {html.escape(k)}</li>" for k, ok in inv.items())
        + "</ul>")
    if a and b:
        rows = [
            ("allocation (asked compute held, time-weighted)", a["allocation"]["mean"], b["allocation"]["mean"]),
            ("GPUs occupied (time-weighted)", a["allocation"]["occupied_mean"], b["allocation"]["occupied_mean"]),
            ("GPU utilisation measured by telemetry (time-weighted)", (a.get("utilisation") or {}).get("mean"),
             (b.get("utilisation") or {}).get("mean")),
            ("fragmentation (time-weighted)", a["allocation"]["fragmentation_mean"],
             b["allocation"]["fragmentation_mean"]),
            ("pods arrived", a["pods"]["arrived"], b["pods"]["arrived"]),
            ("pods finished", a["pods"]["finished"], b["pods"]["finished"]),
            ("pods bound at the end", a["pods"]["bound"], b["pods"]["bound"]),
            ("pods pending at the end", a["pods"]["pending"], b["pods"]["pending"]),
            ("queue delay p50 (s, all)", a["queue_delay_s"]["all"]["p50"], b["queue_delay_s"]["all"]["p50"]),
            ("queue delay p99 (s, all)", a["queue_delay_s"]["all"]["p99"], b["queue_delay_s"]["all"]["p99"]),
            ("JCT p50 (s)", a["jct_s"]["p50"], b["jct_s"]["p50"]),
            ("JCT p99 (s)", a["jct_s"]["p99"], b["jct_s"]["p99"]),
            ("JCT mean (s, finished jobs)", a["jct_s"]["mean"], b["jct_s"]["mean"]),
            ("time in system mean (s, every job, unfinished to the end)", a["jct_s"].get("in_system_mean"),
             b["jct_s"].get("in_system_mean")),
            (f"inference SLO attainment (start ≤ {a['slo']['threshold_s']:.0f}s)", a["slo"]["attainment"],
             b["slo"]["attainment"]),
            ("Jain's index over tenants", a["fairness"]["jain"], b["fairness"]["jain"]),
            ("fractional pods on a shared GPU", a["allocation"]["fractional_on_shared_gpu"],
             b["allocation"]["fractional_on_shared_gpu"]),
            ("decisions the world refused (bind failed)", sum(a["bind_failures"].values()),
             sum(b["bind_failures"].values())),
            ("pods preempted (of them checkpointed first)",
             f"{a['preemption']['preempted']} ({a['preemption']['checkpointed']})",
             f"{b['preemption']['preempted']} ({b['preemption']['checkpointed']})"),
        ]
        parts.append("<h2>gpuaware vs stock Kubernetes</h2>")
        parts.append(_table(["", f"gpuaware ({a['policy']})", f"baseline ({b['policy']})"], rows))
        classes = sorted(set(a["queue_delay_s"]["by_class"]) | set(b["queue_delay_s"]["by_class"]))
        qrows = []
        for c in classes:
            qa, qb = a["queue_delay_s"]["by_class"].get(c, {}), b["queue_delay_s"]["by_class"].get(c, {})
            qrows.append((c, qa.get("n"), qa.get("p50"), qa.get("p99"), qa.get("waiting"), qb.get("p50"),
                          qb.get("p99"), qb.get("waiting")))
        parts.append("<h3>Queue delay per class (virtual seconds)</h3>")
        parts.append(_table(["class", "pods", "gpuaware p50", "gpuaware p99", "gpuaware waiting", "baseline p50",
                             "baseline p99", "baseline waiting"], qrows))
        tenants = sorted(set(a["fairness"]["served_share"]) | set(b["fairness"]["served_share"]))
        parts.append("<h3>Share of demand served per tenant</h3>")
        parts.append(_table(["tenant", "gpuaware", "baseline"],
                            [(t, a["fairness"]["served_share"].get(t), b["fairness"]["served_share"].get(t))
                             for t in tenants]))
        drill = a.get("failover")
        if drill:
            took = "never" if drill["takeover_s"] is None else f"{drill['takeover_s']:.2f} s later"
            parts.append(f"<h2>Fault drill</h2><p>The placement leader ({html.escape(str(drill['killed']))}) was "
                         f"SIGKILLed during the gpuaware run; another instance decided {took} "
                         f"({drill['decisions_before']} decisions before, {drill['decisions_after']} after; the "
                         f"killed instance decided {drill['decisions_by_killed_after_kill']} after it died).</p>")
    hf = (a or {}).get("health") or {}
    if hf.get("faults") is not None:
        parts.append("<h2>GPU health: faults injected into the twin's GPUs (gpuaware run)</h2>")
        frows = [(f["label"], f"{f['node']} #{f['gpu_index']}", f["at_h"],
                  f"{f.get('caught_state')} at {f.get('caught_at_h')} h" if f["caught"] else "NOT CAUGHT",
                  f.get("detected_after_virtual_min"), f.get("detected_after_wall_s"),
                  f"{f['first_alert']['rule']} at {f['first_alert']['at_h']} h" if f.get("first_alert") else "",
                  f.get("pods_running_when_caught"), f["decisions_on_it_while_quarantined"],
                  " → ".join(f"{t['to']} ({t['at_h']} h)" for t in f["timeline"]))
                 for f in hf["faults"]]
        parts.append(_table(["fault", "GPU", "starts (virtual h)", "caught", "after (virtual min)", "after (wall s)",
                             "first alert", "pods running on it then", "pods placed on it while quarantined",
                             "its states"], frows))
        parts.append(f"<p>{hf['decisions_checked']} decisions checked against {hf['gpus_with_a_state']} GPUs' "
                     f"health states: {hf['decisions_on_quarantined_gpus']} on a quarantined GPU "
                     f"({hf['decisions_in_flight_at_a_quarantine']} already in flight within {IN_FLIGHT_S:g} s of a "
                     "quarantine's publication). Transitions: "
                     + html.escape(", ".join(f"{k} ×{v}" for k, v in sorted(hf["transitions"].items()))) + ".</p>")
        al = hf["alerts"]
        parts.append("<h3>Alerts</h3>")
        parts.append(_table(["rule", "severity", "GPU", "raised (virtual h)", "resolved (virtual h)", "summary"],
                            [(x["rule"], x["severity"], x["gpu_uuid"], x["raised_at_h"], x["resolved_at_h"],
                              x["summary"][:120]) for x in al["list"]]))
        rep = hf.get("repair")
        if rep:
            parts.append(f"<p>Operator: {html.escape(str(rep.get('reason')))} — <code>gpuaware health uncordon "
                         f"{html.escape(str(rep.get('gpu_uuid')))} --clear</code> at {rep.get('virtual_h')} h: "
                         f"{html.escape(str(rep.get('previous')))} → {html.escape(str(rep.get('current')))}.</p>")
    parts.append("<h2>Plots</h2>")
    for p in plots:
        data = base64.b64encode(p.read_bytes()).decode()
        parts.append(f"<p><img alt='{html.escape(p.stem)}' src='data:image/png;base64,{data}'></p>")
    panels = report.get("dashboards") or []
    if panels:
        parts.append("<h2>Dashboards</h2><p>The Grafana dashboards' panels (deploy/grafana, the same SQL), drawn "
                     "from this demo's database for the gpuaware run.</p>")
        for board in dict.fromkeys(x["dashboard"] for x in panels):
            parts.append(f"<h3>{html.escape(board)}</h3>")
            for x in (x for x in panels if x["dashboard"] == board):
                if "image" in x and (path.parent / x["image"]).is_file():
                    data = base64.b64encode((path.parent / x["image"]).read_bytes()).decode()
                    parts.append(f"<figure><img class='panel' alt='{html.escape(x['title'])}' "
                                 f"src='data:image/png;base64,{data}'><figcaption>{html.escape(x['title'])}: "
                                 f"{x['rows']} rows over {html.escape(x.get('range', ''))} (<a href='{html.escape(x['image'])}'>image</a>)"
                                 "</figcaption></figure>")
                else:
                    parts.append(f"<p class='bad'>{html.escape(x['title'])}: {html.escape(x.get('error', 'no image'))}</p>")
    parts.append("<h2>Messages per subject, and what landed in PostgreSQL</h2>")
    subjects = sorted({s for r in runs.values() for s in (*r["messages"], *r["placement_events_rows"])})
    mrows = [(s, *(x for r in runs.values() for x in (r["messages"].get(s), r["recorded"].get(s),
                                                       r["placement_events_rows"].get(s)))) for s in subjects]
    heads = ["subject", *(f"{lbl} {k}" for lbl in runs for k in ("stored by JetStream", "recorded", "in PostgreSQL"))]
    parts.append(_table(heads, mrows))
    parts.append("<h2>Services</h2>")
    parts.append(_table(["service", "status"], list(report["services"].items())))
    for key in ("roundtrip", "health", "forecasting", "telemetry", "utilisation"):
        if key in report:
            value = report[key]
            if isinstance(value, Mapping):  # the series are in the plots; the page keeps the figures
                value = {k: ({kk: vv for kk, vv in v.items() if kk != "series"} if isinstance(v, Mapping) else v)
                         for k, v in value.items()}
            parts.append(f"<h2>{html.escape(key)}</h2><pre>{html.escape(_pretty(value))}</pre>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))


def _pretty(v: Any) -> str:
    import json

    return json.dumps(v, indent=2, default=str)
