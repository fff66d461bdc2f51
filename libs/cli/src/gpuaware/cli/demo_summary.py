"""The demo's verdict over both runs: each run analysed with its full series for the plots, the
invariants, what each service did, and the report's headline (``demo_analysis`` gives the figures)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gpuaware.cli.demo_alerts import describe_alerting
from gpuaware.cli.demo_analysis import analyse, compare
from gpuaware.cli.demo_config import DemoConfig
from gpuaware.cli.demo_forecast import describe as describe_forecasting
from gpuaware.cli.demo_format import human
from gpuaware.cli.demo_judge import Verdict, arm_facts, judgeable, lag_figures
from gpuaware.cli.demo_record import RunResult
from gpuaware.sim import SimPod

__all__ = ["analyse_runs", "headline", "judge", "price_of_fairness", "summarise"]

LOOP_SUBJECTS = ("binder.pod.pending.v1", "placement.pod.decided.v1", "binder.pod.bound.v1")
"""every run must carry messages on these (the scheduling loop's subjects)"""


def analyse_runs(cfg: DemoConfig, results: Mapping[str, RunResult], workload: Mapping[str, SimPod],
                 telemetry: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each run's figures (with its measured utilisation) and, apart, the complete series the plots
    get (the figures keep downsampled ones)."""
    runs = {label: analyse(r, cfg, workload) for label, r in results.items()}
    full: dict[str, Any] = {}
    for label, r in results.items():
        runs[label]["utilisation"] = telemetry.get(label, {"status": "not measured"})
        runs[label]["lag"] = lag_figures(r.log.verdict_lags, r.clock, cfg.speed)
        del runs[label]["series"]  # the plots get the ledger's complete series instead
        ledger, _, _ = r.log.replay(r.gpus)
        full[label] = {"t_h": [(s.t - r.started_at) / 3600 for s in ledger.samples],
                       "allocated": [s.allocated for s in ledger.samples],
                       "occupied": [s.occupied for s in ledger.samples],
                       "fragmentation": [s.fragmentation for s in ledger.samples]}
    return runs, full


def _invariants(cfg: DemoConfig, report: Mapping[str, Any], results: Mapping[str, RunResult],
                runs: Mapping[str, dict[str, Any]], cmp_: Mapping[str, Any], hf: Mapping[str, Any],
                health_ran: bool) -> dict[str, bool]:
    a, b = runs["gpuaware"], runs["baseline"]
    invariants = {
        "every pod accounted (bound, finished, or pending with a reason)":
            a["pods"]["unaccounted_count"] == 0 and b["pods"]["unaccounted_count"] == 0,
        "no GPU over-allocated (event replay and world snapshot)": all(
            r["invariants"]["over_allocations_replayed"] == 0 and r["invariants"]["over_allocations_in_world_snapshot"]
            == 0 for r in runs.values()),
        "identical workload in both runs (pod ids and requests)": cmp_["same_workload"],
        "both runs replayed the whole window": all(r.reached_end for r in results.values()),
        "messages on pending / decided / bound in both runs": all(
            (r["messages"].get(s) or 0) > 0 for r in runs.values() for s in LOOP_SUBJECTS),
        "every decision landed in PostgreSQL": all(
            r["placement_events_rows"].get("placement.pod.decided.v1", 0)
            == r["recorded"].get("placement.pod.decided.v1", -1) for r in runs.values()),
        "the bus → database round trip stored every message": bool(report["roundtrip"]["ok"]),
        "no pod bound twice": all(r["invariants"]["double_bound"] == 0 for r in runs.values()),
    }
    if health_ran:
        invariants["no pod placed on a quarantined GPU (after its state change)"] = (
            hf.get("decisions_on_quarantined_gpus") == 0)
        if hf.get("faults"):
            invariants["every GPU fault injected into the twin caught by health scoring"] = bool(
                hf.get("all_faults_caught"))
        am = hf.get("alertmanager") or {}
        if am.get("status") == "took part":
            invariants["the bus's alerts fired in Alertmanager and every one resolved there (alert bridge)"] = (
                am["fired"] > 0 and not am["resolved_on_bus_not_in_alertmanager"])
    drill = a.get("failover")
    if cfg.kill_leader_at_s > 0:
        invariants["placement leader killed mid-run: another instance decided within 5 s"] = bool(
            drill and drill["takeover_s"] is not None and drill["takeover_s"] <= 5.0
            and drill["decisions_by_killed_after_kill"] == 0)
    return invariants


def _service_status(report: Mapping[str, Any], results: Mapping[str, RunResult], a: Mapping[str, Any],
                    services: Mapping[str, bool], hf: Mapping[str, Any], health_ran: bool) -> dict[str, str]:
    svc_status = {}
    for name, built in services.items():
        if not built:
            svc_status[name] = "not built yet"
        elif name == "telemetry":
            tel = report.get("telemetry", {})
            measured = [k for k in ("gpuaware", "baseline") if tel.get(k, {}).get("status") == "measured"]
            svc_status[name] = (f"took part ({' and '.join(measured)} runs: agent on the twin's GPUs, collector)"
                                if measured else tel.get("status", "built"))
        elif name == "health_scoring":
            if health_ran:
                al = hf.get("alerts", {})
                svc_status[name] = (f"took part (gpuaware run: {hf.get('gpus_with_a_state', 0)} GPUs graded, "
                                    f"{sum(hf.get('transitions', {}).values())} state changes, "
                                    f"{sum(al.get('raised', {}).values())} alerts raised / "
                                    f"{sum(al.get('resolved', {}).values())} resolved)")
            else:
                svc_status[name] = "built (not run: the demo's health run is off)"
        elif name == "alert_bridge":
            svc_status[name] = (describe_alerting(hf.get("alertmanager")) if health_ran
                                else "built (not run: the demo's health run is off)")
        elif name == "quota":
            qf = a.get("quota") or {}
            svc_status[name] = (f"took part (gpuaware run: {len(qf.get('queues', {}))} queues reported, Jain's index "
                                f"mean {qf.get('jain', {}).get('mean')}, {len(qf.get('chargeback_by_queue', []))} "
                                "queues billed)" if qf.get("status") == "took part" else qf.get("status", "built"))
        elif name == "forecasting":
            fc = results["gpuaware"].forecast
            svc_status[name] = (describe_forecasting(fc.get("model") or {}, fc.get("accuracy") or {},
                                                     fc.get("placement"), fc.get("stats"))
                                if fc else "built (not run in this demo)")
        else:
            svc_status[name] = "took part (both runs)"
    return svc_status


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def price_of_fairness(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The summary's second half, gpuaware then the baseline: the elastic jobs' resizes, the victims'
    slowdown (p50 / p95 over the jobs preempted or shrunk) and the worst tenant's time-averaged share of
    its fair share over contended hours, beside Jain over the tenants with demand."""
    def side(r: Mapping[str, Any]) -> tuple[str, str, str]:
        v, h = r.get("victims") or {}, (r.get("fairness") or {}).get("hourly") or {}
        rs, va = v.get("resizes") or {}, v.get("all") or {}
        return (f"{rs.get('grows', 0)} grows / {rs.get('shrinks', 0)} shrinks",
                f"{_num(va.get('p50'))} / {_num(va.get('p95'))} over {va.get('victims', 0)} jobs",
                f"{_num(h.get('worst_share_of_fair_share'))} ({h.get('worst_tenant') or 'none'}; Jain "
                f"{_num(h.get('jain_backlogged_contended_mean'))} over {h.get('tenants', 0)} tenants, "
                f"{h.get('contended_hours', 0)} contended hours)")

    (ra, va, wa), (rb, vb, wb) = side(a), side(b)
    return (f"Elastic resizes: gpuaware {ra}, baseline {rb}. Victims' slowdown p50 / p95: gpuaware {va}, "
            f"baseline {vb}. Worst tenant's share of its fair share: gpuaware {wa}, baseline {wb}.")


def judge(cfg: DemoConfig, results: Mapping[str, RunResult], runs: Mapping[str, dict[str, Any]]) -> Verdict:
    """Whether the runs can be compared (``demo_judge.judgeable``), every run taken into account."""
    return judgeable([arm_facts(label, r, runs[label], cfg.window_s, cfg.speed,
                                runs[label]["pods"].get("workload") or runs[label]["pods"]["arrived"])
                      for label, r in results.items()], slo_s=cfg.slo_s)


def headline(cfg: DemoConfig, a: Mapping[str, Any], b: Mapping[str, Any], cmp_: Mapping[str, Any],
             verdict: Verdict) -> str:
    """The summary line: what was replayed, then the comparison - or, for a run that cannot be judged,
    why not and no comparison (a short or starved run's figures are there to diagnose, not to read as a
    result)."""
    scene = (f"{human(a['nodes'])} nodes / {human(a['gpus'])} GPUs, {cfg.trace} workload, "
             f"{human(a['pods']['arrived'])} pods over {human(cfg.window_s / 3600)} virtual hours "
             f"(speed {human(round(cfg.speed))}x).")
    if not verdict.ok:
        return f"{verdict.headline()} {scene} The figures below describe the run; they do not compare the policies."
    gain = cmp_.get("allocation_gain_pct")
    return (f"{scene} Allocation: gpuaware {human(a['allocation']['mean'] or 0.0)} vs baseline "
            f"{human(b['allocation']['mean'] or 0.0)}" + (f" ({gain:+.1f} %)" if gain is not None else "") + ". "
            + price_of_fairness(a, b))


def summarise(cfg: DemoConfig, report: dict[str, Any], results: Mapping[str, RunResult],
              runs: dict[str, dict[str, Any]], services: Mapping[str, bool], started: float) -> None:
    """Add the verdict to ``report``: ``ok`` (every invariant holds), the outcome, the summary line,
    the configuration, the comparison, the runs, the services' parts, health and forecasting."""
    a, b = runs["gpuaware"], runs["baseline"]
    cmp_ = compare(results["gpuaware"], results["baseline"], a, b)
    hf = a.get("health") or {}
    health_ran = hf.get("status") not in (None, "not in this run")
    invariants = _invariants(cfg, report, results, runs, cmp_, hf, health_ran)
    svc_status = _service_status(report, results, a, services, hf, health_ran)
    verdict = judge(cfg, results, runs)
    summary = headline(cfg, a, b, cmp_, verdict)
    report.update({
        "ok": all(invariants.values()), **verdict.as_json(),
        "outcomes": {"gpuaware allocates more than the baseline":
                     cmp_["gpuaware_beats_baseline"] if verdict.ok else None},
        "seconds": round(time.perf_counter() - started, 1), "summary": summary,
        "config": {"duration_s": cfg.duration_s, "window_s": cfg.window_s, "speed": cfg.speed, "trace": cfg.trace,
                   "nodes": cfg.nodes, "load": cfg.load, "seed": cfg.seed, "max_pods": cfg.max_pods,
                   "elastic": cfg.elastic,
                   "slo_s": cfg.slo_s, "run_id": cfg.run_id},
        "invariants": invariants, "comparison": cmp_, "runs": runs, "services": svc_status,
        "health": ("health_scoring not built yet: no health events" if not services["health_scoring"] else {
            "faults_injected": len(hf.get("faults") or []),
            "faults_caught": sum(1 for f in hf.get("faults") or [] if f.get("caught")),
            "decisions_on_quarantined_gpus": hf.get("decisions_on_quarantined_gpus"),
            "alerts_raised": sum((hf.get("alerts") or {}).get("raised", {}).values()),
            "alerts_resolved": sum((hf.get("alerts") or {}).get("resolved", {}).values()),
            "alertmanager": describe_alerting(hf.get("alertmanager")),
            "details": "runs.gpuaware.health"} if health_ran else hf.get("status", "not run")),
        "forecasting": ("forecasting not built yet: no forecast accuracy" if not services["forecasting"]
                        else dict(results["gpuaware"].forecast) or "not run"),
        "utilisation": ("allocation is what the pods asked for and hold (event-sourced, exact); utilisation is "
                        "what the telemetry agent measured on the twin's GPUs (dcgm-exporter text served by the "
                        "binder -> agent -> NATS -> collector -> PostgreSQL), each GPU's load following the pods "
                        "bound to it"),
    })
