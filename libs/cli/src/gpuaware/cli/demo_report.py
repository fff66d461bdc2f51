"""The demo's report rendered: PNG plots and one self-contained HTML page (images inlined), next to
``report.json``, and the CSV files (every pod, the workload's request mix). The numbers come from
``demo_analysis``.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaware.cli.demo_alerts import describe_alerting
from gpuaware.cli.demo_analysis import IN_FLIGHT_S, job_shapes, pod_records
from gpuaware.cli.demo_forecast import HORIZON_COLUMNS, SERIES_COLUMNS, horizon_rows, series_rows
from gpuaware.cli.demo_format import NO_DATA, human, plain
from gpuaware.cli.demo_record import RunResult
from gpuaware.sim import SimPod, job_lives, slowdown

__all__ = ["price_of_fairness_rows", "write_html", "write_jobs_csv", "write_plots", "write_pods_csv",
           "write_typical_pods"]


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


def write_jobs_csv(path: Path, run: RunResult, workload: Mapping[str, SimPod], horizon: float) -> None:
    """One line per job (a gang or a lone pod): its workers' range, when it arrived, first ran and finished,
    how often it was preempted, grown and shrunk, and its slowdown where it was a victim
    (``gpuaware.sim.victims``)."""
    import csv

    shapes = job_shapes(run.log)
    ranges = {s.job: (s.min_members, s.max_members) for s in shapes.values()}

    def r(x: float | None, n: int = 1) -> float | None:
        return None if x is None else round(x, n)

    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "class", "tenant", "min_workers", "max_workers", "arrival_s", "first_start_s",
                    "finished_s", "preemptions", "grows", "shrinks", "slowdown"])
        for j in job_lives(pod_records(run, workload), shapes, horizon):
            lo, hi = ranges.get(j.job, (1, 1))
            w.writerow([j.job, j.klass, j.tenant, lo, hi, r(j.arrival), r(j.first_start), r(j.finished),
                        j.preemptions, j.grows, j.shrinks, r(slowdown(j, horizon), 4) if j.victim else None])


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
                label=f"{r['label']} ({r['policy']}): asked compute held, mean {human(r['allocation']['mean'])}")
        ax.step(s["t_h"], s["occupied"], where="post", color=c, linestyle="--", alpha=0.6,
                label=f"{r['label']}: GPUs occupied, mean {human(r['allocation']['occupied_mean'])}")
        util = (r.get("utilisation") or {}).get("series")
        if util and util["t_h"]:
            # None (not measured: the twin jumped over a quiet stretch) breaks the line: a gap, not a flat value
            values = [math.nan if v is None else v for v in util["utilisation"]]
            gap_h = r["utilisation"].get("not_measured_h") or 0
            ax.step(util["t_h"], values, where="post", color=c, linestyle=":", linewidth=1.6,
                    label=f"{r['label']}: GPU utilisation measured by telemetry, mean {human(r['utilisation']['mean'])}"
                          + (f" ({gap_h:g} h skipped by the twin: not measured)" if gap_h else ""))
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("share of the cluster's GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("GPU allocation and measured utilisation over time")
    _legend_or_no_data(ax, any(len(full[r["label"]]["t_h"]) >= 2 for r in results), fontsize=7, loc="lower right")
    save(fig, "allocation.png")

    fig, ax = plt.subplots(figsize=(9, 3.5))
    for r in results:
        s = full[r["label"]]
        ax.step(s["t_h"], s["fragmentation"], where="post", color=colors.get(r["label"]),
                label=f"{r['label']}: mean {human(r['allocation']['fragmentation_mean'])}")
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("free compute on partly used GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("Fragmentation over time")
    _legend_or_no_data(ax, any(len(full[r["label"]]["t_h"]) >= 2 for r in results), fontsize=8)
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
        _legend_or_no_data(ax, bool(classes), fontsize=8)
    save(fig, "queue_delay.png")

    tenants = sorted({t for r in results for t in r["fairness"]["served_share"]})
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for i, r in enumerate(results):
        vals = [r["fairness"]["served_share"].get(t) or 0.0 for t in tenants]
        ax.bar([x + i * width for x in range(len(tenants))], vals, width, color=colors.get(r["label"]),
               label=f"{r['label']}: Jain {human(r['fairness']['jain'])}")
    ax.set_xticks([x + width / 2 for x in range(len(tenants))], tenants)
    ax.set_ylabel("GPU-seconds held / asked")
    ax.set_title("share of demand served per tenant")
    _legend_or_no_data(ax, bool(tenants), fontsize=8)
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
    _legend_or_no_data(ax, bool(subjects), fontsize=8)
    save(fig, "messages.png")
    return paths


def _legend_or_no_data(ax: Any, drawn: bool, **legend: Any) -> None:
    """The legend, or "no data" across the axes when nothing was drawn (``drawn`` False: a line chart
    whose series have fewer than two points each - one point is an empty frame with a made-up axis -, a
    bar chart with no bars)."""
    if drawn:
        ax.legend(**legend)
        return
    for artist in [*ax.lines, *ax.patches, *ax.collections]:
        artist.remove()
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, NO_DATA, ha="center", va="center", transform=ax.transAxes, fontsize=14, color="#777")


def _demand_plot(plt: Any, r: dict[str, Any], acc: dict[str, Any], window_h: float | None) -> Any:
    """The cluster's GPU demand (running + pending) minute by minute, and what the forecasting service
    predicted for each minute 30 minutes before it: the p50 and the p10-p90 band around it (shaded), with
    the model's share of those 30-minute points (persistence served the rest); the title gives each
    horizon's share of actuals inside the band and at or under the p90 (the plot shows the 30-minute
    forecasts only)."""
    p = acc["plot"]

    def nan(v: list[Any]) -> list[float]:
        return [math.nan if x is None else x for x in v]

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0%}"

    per_h = acc["at_horizon_min"]
    h30 = per_h.get("30", {})
    model = r["forecast"].get("model", {}).get("model") or "persistence"
    at30 = ((acc.get("served") or {}).get("*") or {}).get("model_share_at_horizon_min", {}).get("30")
    who = (f"{model} served {pct(at30)} of these, persistence the rest" if at30 is not None and model != "persistence"
           else model)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.fill_between(p["t_h"], nan(p.get("p10_30min") or p["p50_30min"]), nan(p["p90_30min"]), color="#1f77b4",
                    alpha=0.25, step="post", linewidth=0,
                    label=f"p10-p90 band 30 min ahead: the actual inside it {pct(h30.get('p10_p90_coverage'))} of "
                          f"the time, at or under the p90 {pct(h30.get('p90_coverage'))}")
    ax.step(p["t_h"], nan(p["p50_30min"]), where="post", color="#1f77b4", linewidth=1.0,
            label=f"forecast 30 min ahead, p50 ({who}; RMSE {h30.get('rmse')} vs persistence "
                  f"{h30.get('persistence_rmse')})")
    ax.step(p["t_h"], p["actual"], where="post", color="black", linewidth=1.2, label="demand: GPUs running + pending")
    ax.set_xlabel("virtual time (hours)")
    ax.set_xlim(0, window_h)
    ax.set_ylabel("GPUs")
    coverage = ", ".join(f"{h} min {pct(v.get('p10_p90_coverage'))} / {pct(v.get('p90_coverage'))}"
                         for h, v in per_h.items())
    ax.set_title(f"{r['label']} run: GPU demand and the forecasting service's forecast\n"
                 f"actual inside p10-p90 / at or under p90: {coverage}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def _forecast_html(runs: Mapping[str, Any]) -> str:
    """Each run's demand forecasts, where scored: per horizon the RMSE against persistence and the
    coverage of the p90 and of the p10-p90 band; per demand series who served it."""
    out = ""
    for label, r in runs.items():
        acc = ((r.get("forecast") or {}).get("accuracy") or {})
        if acc.get("status") != "scored":
            continue
        model = ((r["forecast"].get("model") or {}).get("model")) or "persistence"
        out += (f"<h2>Demand forecasts ({html.escape(label)} run; model {html.escape(model)})</h2><p>The cluster's "
                f"total demand (GPUs running + pending; {acc['forecasts']:,} forecasts stored for it, "
                f"{acc['series']} demand series in all): each horizon's p50 against persistence from the same "
                "origins, and how often the actual stayed at or under the p90 and inside the p10-p90 band (a "
                "calibrated band: about 90 % and 80 %).</p>" + _table(HORIZON_COLUMNS, horizon_rows(acc))
                + "<h3>Who served each demand series</h3>" + _table(SERIES_COLUMNS, series_rows(acc)))
    return out


def _pair(x: Any, y: Any) -> str:
    return f"{human(x)} / {human(y)}"


def price_of_fairness_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One run's fairness as a worst-off tenant feels it and what it costs the victims, as (label,
    value) rows for the report's side-by-side tables."""
    h = (r.get("fairness") or {}).get("hourly") or {}
    ft = (r.get("fairness") or {}).get("finish_time") or {}
    v = r.get("victims") or {}
    rs, va = v.get("resizes") or {}, v.get("all") or {}
    worst = h.get("worst_share_of_fair_share")
    return [
        ("Jain over tenants with demand, hourly: contended hours / all hours",
         _pair(h.get("jain_backlogged_contended_mean"), h.get("jain_backlogged_mean"))),
        ("tenants with demand in contended hours / contended hours", _pair(h.get("tenants"), h.get("contended_hours"))),
        ("worst tenant's share of its fair share over contended hours",
         "n/a" if worst is None else f"{worst:.3f} ({h.get('worst_tenant')})"),
        (f"finish-time fairness rho (JCT / alone on 1/{ft.get('tenants', 'N')} of the cluster): p95 / max",
         _pair(ft.get("p95"), ft.get("max"))),
        ("elastic resizes: grows / shrinks", _pair(rs.get("grows"), rs.get("shrinks"))),
        ("elastic jobs resized / elastic jobs (resize handshakes)",
         f"{_pair(rs.get('elastic_jobs_resized'), rs.get('elastic_jobs'))} ({rs.get('handshakes', 0)})"),
        ("victims (jobs preempted or shrunk): preempted / shrunk", _pair(v.get("preempted_jobs"), v.get("shrunk_jobs"))),
        ("victims' slowdown p50 / p95", _pair(va.get("p50"), va.get("p95"))),
        ("preemptions per job: most / jobs preempted more than twice",
         _pair(v.get("preemptions_per_job_max"), v.get("jobs_preempted_more_than_twice"))),
    ]


def _victims_html(a: Mapping[str, Any], b: Mapping[str, Any], cmp_: Mapping[str, Any]) -> str:
    """Victims' slowdown per class, side by side, and each tenant's share of its fair share."""
    va, vb = a.get("victims") or {}, b.get("victims") or {}
    classes = sorted(set(va.get("by_class", {})) | set(vb.get("by_class", {})))
    rows = [(c, *(x.get("by_class", {}).get(c, {}).get(k) for x in (va, vb)
                  for k in ("victims", "finished", "p50", "p95", "max"))) for c in classes]
    out = ("<h3>Victims' slowdown per class</h3><p>" + html.escape(str(va.get("slowdown_is", "")))
           + ".</p>" + _table(["class", *(f"{lbl} {k}" for lbl in ("gpuaware", "baseline")
                                         for k in ("victims", "finished", "p50", "p95", "max"))], rows))
    against = cmp_.get("victims_jct_over_baseline_jct") or {}
    if against.get("jobs"):
        out += (f"<p>Against the baseline run (no preemption, but stock placement too): the gpuaware run's victims "
                f"finished in both runs ({against['jobs']}) took {_fmt(against['p50'])} (p50) and "
                f"{_fmt(against['p95'])} (p95) times their JCT there.</p>")
    ha, hb = ((x.get("fairness") or {}).get("hourly") or {} for x in (a, b))
    tenants = sorted(set(ha.get("share_of_fair_share", {})) | set(hb.get("share_of_fair_share", {})))
    out += ("<h3>Share of its fair share per tenant, time-averaged over contended hours</h3>"
            + _table(["tenant", "gpuaware", "baseline"],
                     [(t, ha.get("share_of_fair_share", {}).get(t), hb.get("share_of_fair_share", {}).get(t))
                      for t in tenants]))
    return out


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _alertmanager_html(am: Mapping[str, Any] | None) -> str:
    """The alerts Alertmanager notified through the alert bridge, or why the bridge did not run."""
    out = f"<h3>Alertmanager (alert bridge)</h3><p>{html.escape(describe_alerting(am))}.</p>"
    if am and am.get("alerts"):
        out += _table(["rule", "severity", "node", "GPU", "notified firing (s after the bridge started)",
                       "notified resolved (s)"],
                      [(a["rule"], a["severity"], a["node"], a["gpu_uuid"], a["fired_at"], a["resolved_at"])
                       for a in am["alerts"]])
    return out


def _fmt(v: Any) -> str:
    return human(v)


def _judgement_html(report: Mapping[str, Any]) -> str:
    """Whether the run can be judged (``demo_judge``) and how far the services trailed the twin's clock."""
    reasons = report.get("reasons") or []
    out = ""
    if report.get("judgeable") is False:
        out += ("<h2 class='bad'>Not judgeable</h2><p>No comparison is claimed from this run; the figures below "
                "describe it. Why:</p><ul>" + "".join(f"<li class='bad'>{html.escape(r)}</li>" for r in reasons)
                + "</ul>")
    lags = {label: r.get("lag") for label, r in (report.get("runs") or {}).items() if r.get("lag")}
    if lags:
        out += ("<h3>The services against the twin's clock</h3><p>Each pod's pending to placement's first verdict "
                "(decided or unschedulable), timed in wall seconds as the demo received them and converted to the "
                "twin's seconds at the speed it ran then; the twin slows itself when the services fall behind.</p>"
                + _table(["run", "pods timed", "p50 (wall s)", "p95 (wall s)", "p50 (virtual s)", "p95 (virtual s)",
                          "speed asked", "speed run", "twin slowed"],
                         [(label, x.get("samples"), x.get("p50_wall_s"), x.get("p95_wall_s"), x.get("p50_virtual_s"),
                           x.get("p95_virtual_s"), x.get("nominal_speed"), x.get("effective_speed"),
                           x.get("twin_slowed")) for label, x in lags.items()]))
    return out


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
    parts.append(_judgement_html(report))
    parts.append("<h2>Invariants</h2><ul>" + "".join(
        f"<li>– {html.escape(k)}: not judged</li>" if ok is None else
        f"<li class='{'ok' if ok else 'bad'}'>{'✔' if ok else '✘'} {html.escape(k)}</li>" for k, ok in inv.items())
        + "</ul>")
    ab = report.get("forecast_ab")
    if ab:
        on, off = ab["with_forecasts"], ab["without_forecasts"]
        parts.append("<h2>Forecasts on vs off</h2><p>gpuaware twice on the same workload, seed and faults; the "
                     "forecasting service runs in both (the same load on the machine), and the second time placement "
                     "ignores it: no head-room kept for the latency-sensitive classes' forecast demand, no per-GPU "
                     "forecasts, and the node-power planner decides from recent demand alone.</p>")
        parts.append(_table(("", "with forecasts", "without", "goal"), [
            ("latency-sensitive classes' p99 queue delay (s)", on["latency_sensitive_p99_s"],
             off["latency_sensitive_p99_s"], f"ratio {_fmt(ab['p99_ratio'])} ≤ {ab['goals']['p99_ratio_at_most']}"),
            ("allocation (time-weighted)", on["allocation_mean"], off["allocation_mean"],
             f"{_fmt(ab['allocation_pp'])} pp, within {ab['goals']['allocation_pp_within']}"),
            ("placements held back for the head-room", ab.get("held_back_by_headroom"), "-", ""),
            ("node-hours switched off by the power planner", on.get("node_hours_off"), off.get("node_hours_off"), ""),
            ("nodes switched back on ahead of demand", on.get("power_ups"), off.get("power_ups"), ""),
            ("goals met", "yes" if ab["met"] else "no", "", "")]))
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
            ("node-hours switched off by the node-power planner", (a.get("power") or {}).get("node_hours_off"),
             (b.get("power") or {}).get("node_hours_off")),
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
            *((name, x, y) for (name, x), (_, y) in zip(price_of_fairness_rows(a), price_of_fairness_rows(b),
                                                        strict=True)),
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
        parts.append(_victims_html(a, b, report.get("comparison") or {}))
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
                     "quarantine's publication)."
                     + (" Transitions: " + html.escape(", ".join(f"{k} ×{human(v)}" for k, v in
                                                                  sorted(hf["transitions"].items()))) + "."
                        if hf.get("transitions") else "") + "</p>")
        al = hf["alerts"]
        parts.append("<h3>Alerts</h3>")
        parts.append(_table(["rule", "severity", "GPU", "raised (virtual h)", "resolved (virtual h)", "summary"],
                            [(x["rule"], x["severity"], x["gpu_uuid"], x["raised_at_h"], x["resolved_at_h"],
                              x["summary"][:120]) for x in al["list"]]))
        parts.append(_alertmanager_html(hf.get("alertmanager")))
        rep = hf.get("repair")
        if rep:
            parts.append(f"<p>Operator: {html.escape(str(rep.get('reason')))} — <code>gpuaware health uncordon "
                         f"{html.escape(str(rep.get('gpu_uuid')))} --clear</code> at {rep.get('virtual_h')} h: "
                         f"{html.escape(str(rep.get('previous')))} → {html.escape(str(rep.get('current')))}.</p>")
    parts.append(_forecast_html(runs))
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

    return json.dumps(plain(v), indent=2, default=str)
