"""The forecasting service's part in ``gpuaware demo``: a demand model in the registry before the runs,
and afterwards the gpuaware run's demand forecasts scored against what happened.

The demand model is the LSTM of ``gpuaware forecast train`` on the Helios virtual clusters' demand
(running + pending GPUs per minute, CC-BY 4.0, found under ``GPUAWARE_SHARED_DATA``): the same quantity
the service computes per queue from the binder's pod events, on the twin's virtual clock. Training
takes ``--train-s`` (a minute by default) once per data folder: the model is kept in
``<data-dir>/models/`` and published into the registry of every later stack. Without the Helios files
(or with ``--train-s 0``) the registry stays empty and the service serves persistence, saying
so in every event; the report says which.

The score: every demand forecast the service stored for the cluster's total (``forecast_points``,
series ``demand/<cluster>/*``) whose target minute arrived (10, 30 and 60 minutes ahead, and 3, 6 and 12
hours where any such target arrived), RMSE of its p50 at each horizon against
persistence from the same origins (the value at the origin, also stored), how often the actual stayed
under the p90 (a safety margin should cover about 90 %) and how often it fell inside the p10-p90 band
(about 80 % when both ends are calibrated). A p10 or p90 starts at the p50 until the series has
errors to calibrate it on, and those early minutes count: the coverage is that of what was published.
Per demand series (each queue, each group of classes, the total): who served each stored point (the
model and version stored with it; persistence where that version says persistence served the point's
horizon for the series), the one that served most of its points and that share, the model's share at
each horizon, and the most frequent reason when persistence served.

What the forecasts changed: placement counts the decisions it made while per-GPU utilisation forecasts
existed, those whose node would differ without the forecast-headroom score, and those on the same node
whose GPUs would differ without the forecasts (``gpuaware_placement_forecast_{scored,changed,gpu_changed}
_total``, read from each placement instance's metrics at the end of the run; `placement_forecast_effect`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

from gpuaware import tsdb
from gpuaware.forecast import rmse

__all__ = ["DEMAND_MODEL", "demand_accuracy", "describe", "ensure_demand_model", "helios_files",
           "horizon_rows", "horizon_scores", "placement_forecast_effect", "series_rows", "served_by_series",
           "served_label"]

DEMAND_MODEL = "demand"
HORIZONS = [10, 30, 60]
"""the demand model's horizons (minutes): trained for and always scored"""
HOURS_HORIZONS = [180, 360, 720]
"""the service's hours-ahead forecasts (``forecast.hours``), scored where any target arrived: the demo
replays one day, so 12-hour points exist for its first half only"""


def helios_files(shared: Path) -> list[Path]:
    return sorted((shared / "helios").glob("*_cluster_sequence_vc.csv"))


def _fingerprint(files: list[Path], train_s: float) -> str:
    h = hashlib.sha256(f"{train_s:g}".encode())
    for f in files:
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def ensure_demand_model(database_url: str, data_dir: Path, shared: Path, train_s: float, console: Any) -> dict[str, Any]:
    """A ``demand`` model in the registry: already there, the cached one published, or trained now.
    Returns what the report says about it (``status``, ``model``, ``reason``)."""
    from gpuaware import forecast
    from gpuaware.forecast import ModelError

    async def newest() -> forecast.RegistryEntry | None:
        async with await tsdb.connect(database_url) as conn:
            return await forecast.latest_async(conn, DEMAND_MODEL)

    async def publish(blob: bytes, metrics: dict[str, Any]) -> tuple[int, forecast.RegistryEntry | None]:
        async with await tsdb.connect(database_url) as conn:
            return (await forecast.publish_async(conn, DEMAND_MODEL, blob, metrics),
                    await forecast.latest_async(conn, DEMAND_MODEL))

    entry = asyncio.run(newest())
    if entry is not None:
        return {"status": "in the registry", "model": entry.label, "trained_on": entry.meta.get("series", [])}
    files = helios_files(shared)
    if train_s <= 0:
        return {"status": "none", "reason": "--train-s 0: persistence is served"}
    if not files:
        return {"status": "none", "reason": f"no Helios demand series under {shared.name}/helios (set "
                                            "GPUAWARE_SHARED_DATA): persistence is served"}
    cache = data_dir / "models" / f"demand-helios-{_fingerprint(files, train_s)}.onnx"
    how = "cached"
    if not cache.is_file():
        from gpuaware.cli.forecast import train_blob
        from gpuaware.forecast import prepare

        console.print(f"training the demand model on {len(files)} Helios virtual clusters for at most "
                      f"{train_s:g} s (once per data folder; --train-s)")
        try:
            blob = train_blob(prepare(files, "helios", test_days=7), HORIZONS, iters=2_000, seconds=train_s)
        except Exception as exc:  # training failed: the run goes on with persistence, saying why
            return {"status": "none", "reason": f"training failed ({type(exc).__name__}: {exc}): persistence is served"}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(blob)
        how = "trained"
    try:
        version, entry = asyncio.run(publish(cache.read_bytes(), {"trained_s": train_s, "source": "helios",
                                                                  "how": how}))
    except ModelError as exc:
        cache.unlink(missing_ok=True)
        return {"status": "none", "reason": f"the cached model is unusable ({exc}): persistence is served"}
    return {"status": how, "model": f"{DEMAND_MODEL}@{version}",
            "trained_on": entry.meta.get("series", []) if entry else [],
            "data_window": entry.data_window if entry else {}}


_POINTS = """
SELECT extract(epoch FROM issued_at), horizon_s, p10, p50, p90, actual, model, model_version
FROM forecast_points WHERE series = %s ORDER BY issued_at, horizon_s
"""
_SERVED = """
SELECT series, model, model_version, horizon_s, count(*) FROM forecast_points WHERE series LIKE %s
GROUP BY 1, 2, 3, 4
"""
EPS = 1e-9
"""a bound equal to the actual covers it (both are sums of the same GPU counts, up to rounding)"""
_PERSISTENCE_AT = re.compile(r"; persistence at ([\d., ]+) min$")
PER_HORIZON = "model worse than persistence at this horizon on this series"
"""the reason of a point the model's row left to persistence at its horizon (``selection.Choice``)"""


def _rmse(actual: list[float], forecast: list[float]) -> float | None:
    return round(rmse(actual, forecast), 3) if actual else None


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def served_label(model: str, version: str, horizon_min: float) -> tuple[str, str | None]:
    """(who served a stored point, why persistence did). The model's version for the model
    (``demand@1``), unless the version names the point's horizon among those persistence serves for
    that series (``demand@1; persistence at 30, 60 min``: the 30- and 60-minute points are persistence's).
    ``persistence`` with the kind of reason for a baseline: the reason loses its numbers and its
    parenthesis (``too little history``, ``constant series for N steps``), so the minutes of one cause
    count together."""
    if model != "persistence":
        at = _PERSISTENCE_AT.search(version)
        if at is None:
            return version, None
        if any(abs(float(m) - horizon_min) < 1e-6 for m in at.group(1).split(",")):
            return "persistence", PER_HORIZON
        return version[:at.start()], None
    why = version.removeprefix("baseline: ")
    why = re.split(r":| \(", why, maxsplit=1)[0]
    return "persistence", re.sub(r"(?<![\w@.])\d[\d.]*", "N", why).strip()


def served_by_series(rows: list[tuple[str, str, str, float, int]], cluster: str) -> dict[str, dict[str, Any]]:
    """Per demand series (``*`` the total, ``class:<group>``, each queue; total first, then by name) from
    (series, model, model_version, horizon_s, points) counts, each point labelled by ``served_label``: the
    label that served most points (``served``) and its ``share``, every label's share (``by_label``), the
    share of the points at each horizon not served by persistence (``model_share_at_horizon_min``), and
    the most frequent reason when persistence served (``persistence_reason``, with its share of the
    series' points)."""
    counts: dict[str, dict[str, int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    at_h: dict[str, dict[str, list[int]]] = {}
    prefix = f"demand/{cluster}/"
    for series, model, version, horizon_s, n in rows:
        name = str(series).removeprefix(prefix)
        h_min = float(horizon_s) / 60
        label, why = served_label(str(model), str(version), h_min)
        counts.setdefault(name, {})
        counts[name][label] = counts[name].get(label, 0) + int(n)
        model_n = at_h.setdefault(name, {}).setdefault(f"{h_min:g}", [0, 0])
        model_n[0] += int(n) if label != "persistence" else 0
        model_n[1] += int(n)
        if why is not None:
            reasons.setdefault(name, {})
            reasons[name][why] = reasons[name].get(why, 0) + int(n)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(counts, key=lambda x: (x != "*", x)):
        by = counts[name]
        total = sum(by.values())
        top = max(by, key=lambda k: (by[k], k))
        entry: dict[str, Any] = {
            "points": total, "served": top, "share": _share(by[top], total),
            "by_label": {k: _share(v, total) for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
            "model_share_at_horizon_min": {h: _share(*v) for h, v in sorted(at_h[name].items(),
                                                                            key=lambda kv: float(kv[0]))}}
        kinds = reasons.get(name)
        if kinds:
            first = max(kinds, key=lambda k: (kinds[k], k))
            entry["persistence_reason"] = {"reason": first, "share": _share(kinds[first], total)}
        out[name] = entry
    return out


def horizon_scores(rows: list[tuple[Any, ...]], actual_at: dict[float, float], h_min: int) -> dict[str, Any]:
    """One horizon's figures over the points whose target and origin values are known: RMSE of the p50
    and of persistence from the same origins, the share of actuals at or under the p90, and inside
    [p10, p90] (None where no point stored a p10: a forecaster that published none)."""
    actuals, p50s, origins, under, inside, with_p10 = [], [], [], 0, 0, 0
    for issued, h, p10, p50, p90, actual, _model, _version in rows:
        if round(float(h)) != h_min * 60 or actual is None:
            continue
        origin = actual_at.get(round(float(issued)))
        if origin is None:
            continue
        actuals.append(actual)
        p50s.append(p50)
        origins.append(origin)
        under += p90 is not None and actual <= p90 + EPS
        with_p10 += p10 is not None
        inside += p10 is not None and p90 is not None and p10 - EPS <= actual <= p90 + EPS
    model_rmse, persist_rmse = _rmse(actuals, p50s), _rmse(actuals, origins)
    return {"points": len(actuals), "rmse": model_rmse, "persistence_rmse": persist_rmse,
            "vs_persistence": (round(1 - model_rmse / persist_rmse, 3)
                               if model_rmse is not None and persist_rmse else None),
            "p90_coverage": _share(under, len(actuals)),
            "p10_p90_coverage": _share(inside, len(actuals)) if with_p10 else None}


async def demand_accuracy(pool: Any, cluster: str, started_at: float) -> dict[str, Any]:
    """The run's demand forecasts (the cluster's total) against their actuals, per horizon (RMSE against
    persistence, p90 and p10-p90 coverage); who served each demand series (``served``, see
    ``served_by_series``); the series for the report's plot (actual, and the p10 / p50 / p90 issued 30
    minutes before each minute)."""
    series = f"demand/{cluster}/*"
    async with pool.connection() as conn:
        cur = await conn.execute(_POINTS, (series,))
        rows = await cur.fetchall()
        like = cluster.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")  # a name's own, not wildcards
        cur = await conn.execute(_SERVED, (f"demand/{like}/%",))
        served = served_by_series(await cur.fetchall(), cluster)
    if not rows:
        return {"status": "no demand forecasts stored"}
    actual_at: dict[float, float] = {}
    for issued, h, _p10, _p50, _p90, actual, _m, _v in rows:
        if actual is not None:
            actual_at[round(float(issued) + float(h))] = float(actual)
    per_h = {str(h_min): horizon_scores(rows, actual_at, h_min) for h_min in HORIZONS}
    per_h.update({str(h_min): scores for h_min in HOURS_HORIZONS
                  if (scores := horizon_scores(rows, actual_at, h_min))["points"]})
    plot: dict[float, tuple[float | None, float, float | None]] = {}
    for issued, h, p10, p50, p90, actual, _model, _version in rows:
        if round(float(h)) == 30 * 60 and actual is not None:
            plot[float(issued) + float(h)] = (p10, p50, p90)
    models: dict[str, int] = {}
    for _i, h, _p10, _p50, _p90, _a, model, version in rows:
        label, why = served_label(model, version, float(h) / 60)
        label = label if why is None else f"{label} ({why})"
        models[label] = models.get(label, 0) + 1
    times = sorted(actual_at)

    def at(t: float, k: int) -> float | None:
        v = plot.get(t, (None, None, None))[k]
        return None if v is None or v != v else v

    return {
        "status": "scored", "series": len(served), "forecasts": len(rows), "by_model": models, "at_horizon_min": per_h,
        "served": served,
        "plot": {"t_h": [round((t - started_at) / 3600, 4) for t in times],
                 "actual": [actual_at[t] for t in times],
                 "p10_30min": [at(t, 0) for t in times],
                 "p50_30min": [at(t, 1) for t in times],
                 "p90_30min": [at(t, 2) for t in times]},
    }


HORIZON_COLUMNS = ("horizon", "points", "RMSE (GPUs)", "persistence RMSE", "better by", "actual <= p90",
                   "actual in p10-p90")
SERIES_COLUMNS = ("demand series", "points", "served most", "of its points", "the others",
                  "model's share per horizon", "persistence's main reason")


def _pct(v: float | None, signed: bool = False) -> str:
    return "n/a" if v is None else (f"{v:+.1%}" if signed else f"{v:.1%}")


def horizon_rows(acc: dict[str, Any]) -> list[tuple[str, ...]]:
    """The report's table of the total's forecasts per horizon (``HORIZON_COLUMNS``), as text."""
    return [(f"{h} min", str(v["points"]), "n/a" if v["rmse"] is None else f"{v['rmse']:.3f}",
             "n/a" if v["persistence_rmse"] is None else f"{v['persistence_rmse']:.3f}",
             _pct(v.get("vs_persistence"), signed=True), _pct(v.get("p90_coverage")),
             _pct(v.get("p10_p90_coverage")))
            for h, v in acc["at_horizon_min"].items()]


def series_rows(acc: dict[str, Any]) -> list[tuple[str, ...]]:
    """The report's table of who served each demand series (``SERIES_COLUMNS``), as text."""
    out: list[tuple[str, ...]] = []
    for name, v in (acc.get("served") or {}).items():
        others = ", ".join(f"{k} {_pct(x)}" for k, x in v["by_label"].items() if k != v["served"])
        why = v.get("persistence_reason")
        per_h = " / ".join(f"{h} min {_pct(x)}" for h, x in v.get("model_share_at_horizon_min", {}).items())
        out.append(("* (the total)" if name == "*" else name, str(v["points"]), v["served"], _pct(v["share"]),
                    others or "-", per_h or "-", f"{why['reason']} ({_pct(why['share'])})" if why else "-"))
    return out


FORECAST_COUNTERS = {"gpuaware_placement_forecast_scored": "scored", "gpuaware_placement_forecast_changed": "changed",
                     "gpuaware_placement_forecast_gpu_changed": "gpu_changed",
                     "gpuaware_placement_headroom_held_back": "headroom_held_back"}


def placement_forecast_effect(metrics_texts: list[str]) -> dict[str, Any]:
    """The placement instances' forecast counters (Prometheus text, one per instance), summed: decisions
    made while per-GPU forecasts existed (``scored``) and those the forecast-headroom score changed."""
    from gpuaware.runtime import counter_totals

    got = {**dict.fromkeys(FORECAST_COUNTERS.values(), 0), "instances": len(metrics_texts)}
    for text in metrics_texts:
        for name, value in counter_totals(text, FORECAST_COUNTERS).items():
            got[FORECAST_COUNTERS[name]] += int(value)
    return got


def effect_line(effect: dict[str, Any], stats: dict[str, Any]) -> str:
    """How often placement's forecast-headroom score changed a decision, or why it could not."""
    if not effect or not effect.get("instances"):
        return "placement's forecast counters unread"
    held = (f"; the head-room kept for the latency-sensitive classes' forecast demand held back "
            f"{effect.get('headroom_held_back', 0):,} placements of pods that could wait")
    if effect["scored"]:
        return (f"of the {effect['scored']:,} decisions made while per-GPU forecasts existed, the forecasts changed "
                f"the node of {effect['changed']:,} (forecast-headroom score) and the GPUs of "
                f"{effect.get('gpu_changed', 0):,} more (signal-aware GPU choice){held}")
    return (f"no decision was made while per-GPU forecasts existed ({stats.get('windows', 0)} utilisation windows "
            f"forecast; the twin's GPUs are forecast from the telemetry agent's samples){held}")


def describe(model: dict[str, Any], acc: dict[str, Any], effect: dict[str, Any] | None = None,
             stats: dict[str, Any] | None = None) -> str:
    """One line for the report's services section."""
    who = model.get("model") or f"persistence ({model.get('reason', 'no model')})"
    tail = f"; {effect_line(effect, stats or {})}" if effect is not None else ""
    if acc.get("status") != "scored":
        return f"took part (demand model {who}); {acc.get('status', 'no forecasts')}{tail}"
    h30 = acc["at_horizon_min"].get("30", {})
    gain = h30.get("vs_persistence")
    rmse = "" if gain is None else f"; 30-min RMSE {h30['rmse']:.2f} vs persistence {h30['persistence_rmse']:.2f} GPUs"
    band = ("" if h30.get("p10_p90_coverage") is None else
            f"; 30 min ahead the actual fell inside the p10-p90 band {h30['p10_p90_coverage']:.0%} of the time, "
            f"at or under the p90 {h30['p90_coverage']:.0%}")
    return (f"took part: {acc['forecasts']:,} forecasts of the total demand, {acc['series']} demand series (model {who})"
            f"{rmse}{band}{tail}")
