"""The forecasting service's part in ``gpuaware demo``: a demand model in the registry before the runs,
and afterwards the gpuaware run's demand forecasts scored against what happened.

The demand model is the LSTM of ``gpuaware forecast train`` on the Helios virtual clusters' demand
(running + pending GPUs per minute, CC-BY 4.0, found under ``GPUAWARE_SHARED_DATA``): the same quantity
the service computes per queue from the binder's pod events, on the twin's virtual clock. Training
takes ``--forecast-train-s`` (a minute by default) once per data folder: the model is kept in
``<data-dir>/models/`` and published into the registry of every later stack. Without the Helios files
(or with ``--forecast-train-s 0``) the registry stays empty and the service serves persistence, saying
so in every event; the report says which.

The score: every demand forecast the service stored (``forecast_points``, series
``demand/<cluster>/<queue>``) whose target minute arrived, RMSE of its p50 at each horizon against
persistence from the same origins (the value at the origin, also stored), and how often the actual
stayed under the p90 (a safety margin should cover about 90 %).

What the forecasts changed: placement counts the decisions it made while per-GPU utilisation forecasts
existed, those whose node would differ without the forecast-headroom score, and those on the same node
whose GPUs would differ without the forecasts (``gpuaware_placement_forecast_{scored,changed,gpu_changed}
_total``, read from each placement instance's metrics at the end of the run; `placement_forecast_effect`).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from gpuaware import tsdb
from gpuaware.forecast import rmse

__all__ = ["DEMAND_MODEL", "demand_accuracy", "describe", "ensure_demand_model", "helios_files",
           "placement_forecast_effect"]

DEMAND_MODEL = "demand"
HORIZONS = [10, 30, 60]


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
        return {"status": "none", "reason": "--forecast-train-s 0: persistence is served"}
    if not files:
        return {"status": "none", "reason": f"no Helios demand series under {shared.name}/helios (set "
                                            "GPUAWARE_SHARED_DATA): persistence is served"}
    cache = data_dir / "models" / f"demand-helios-{_fingerprint(files, train_s)}.onnx"
    how = "cached"
    if not cache.is_file():
        from gpuaware.cli.forecast import train_blob
        from gpuaware.forecast import prepare

        console.print(f"training the demand model on {len(files)} Helios virtual clusters for at most "
                      f"{train_s:g} s (once per data folder; --forecast-train-s)")
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
SELECT extract(epoch FROM issued_at), horizon_s, p50, p90, actual, model, model_version
FROM forecast_points WHERE series = %s ORDER BY issued_at, horizon_s
"""


def _rmse(actual: list[float], forecast: list[float]) -> float | None:
    return round(rmse(actual, forecast), 3) if actual else None


async def demand_accuracy(pool: Any, cluster: str, started_at: float) -> dict[str, Any]:
    """The run's demand forecasts (the cluster's total) against their actuals, per horizon; the series
    for the report's plot (actual, and the p50 / p90 issued 30 minutes before each minute)."""
    series = f"demand/{cluster}/*"
    async with pool.connection() as conn:
        cur = await conn.execute(_POINTS, (series,))
        rows = await cur.fetchall()
        cur = await conn.execute("SELECT count(DISTINCT series) FROM forecast_points WHERE series LIKE %s",
                                 (f"demand/{cluster}/%",))
        n_series = (await cur.fetchone())[0]
    if not rows:
        return {"status": "no demand forecasts stored"}
    actual_at: dict[float, float] = {}
    for issued, h, _p50, _p90, actual, _m, _v in rows:
        if actual is not None:
            actual_at[round(float(issued) + float(h))] = float(actual)
    models: dict[str, int] = {}
    per_h: dict[str, dict[str, Any]] = {}
    plot: dict[float, tuple[float, float]] = {}
    for h_min in HORIZONS:
        actuals, p50s, origins, covered = [], [], [], 0
        for issued, h, p50, p90, actual, _model, _version in rows:
            if round(float(h)) != h_min * 60 or actual is None:
                continue
            origin = actual_at.get(round(float(issued)))
            if origin is None:
                continue
            actuals.append(actual)
            p50s.append(p50)
            origins.append(origin)
            covered += p90 is not None and actual <= p90 + 1e-9
            if h_min == 30:
                plot[float(issued) + float(h)] = (p50, p90 if p90 is not None else float("nan"))
        model_rmse, persist_rmse = _rmse(actuals, p50s), _rmse(actuals, origins)
        per_h[str(h_min)] = {
            "points": len(actuals), "rmse": model_rmse, "persistence_rmse": persist_rmse,
            "vs_persistence": (round(1 - model_rmse / persist_rmse, 3)
                               if model_rmse is not None and persist_rmse else None),
            "p90_coverage": round(covered / len(actuals), 3) if actuals else None}
    for _i, _h, _p50, _p90, _a, model, version in rows:
        label = version if model == "lstm" else f"{model} ({version})"
        models[label] = models.get(label, 0) + 1
    times = sorted(actual_at)
    return {
        "status": "scored", "series": n_series, "forecasts": len(rows), "by_model": models, "at_horizon_min": per_h,
        "plot": {"t_h": [round((t - started_at) / 3600, 4) for t in times],
                 "actual": [actual_at[t] for t in times],
                 "p50_30min": [plot.get(t, (None, None))[0] for t in times],
                 "p90_30min": [None if (v := plot.get(t, (None, None))[1]) is None or v != v else v for t in times]},
    }


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
    return f"took part: {acc['forecasts']:,} demand forecasts over {acc['series']} series (model {who}){rmse}{tail}"
