"""The demo's forecast figures on constructed ``forecast_points``: RMSE against persistence, the p90's and
the p10-p90 band's coverage per horizon, who served each demand series; and the report's plot, page and
console table built from them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from gpuaware import tsdb
from gpuaware.cli.demo_forecast import PER_HORIZON, demand_accuracy, describe, horizon_scores, served_label
from gpuaware.cli.demo_report import _demand_plot, write_html

T0 = 1_700_000_000.0
MINUTES = 30
"""origins: minutes 0..29; the origin value of minute m is known from m = 10 (the 10-min forecast of m - 10)"""


def _total_rows() -> list[tuple[Any, ...]]:
    """The cluster's total: demand ``t`` GPUs at minute ``t``; every forecast's p50 one GPU over, so its
    RMSE is 1 and persistence's is the horizon in minutes. The bounds miss on purpose: the p10 above
    the actual at origins m % 4 == 0, the 10-min p90 under it at m % 5 == 0. The model served minutes
    0..23, persistence the rest (too little history, two different step counts: one cause)."""
    rows = []
    for m in range(MINUTES):
        for h in (10, 30, 60):
            t = m + h
            p10 = t + 0.5 if m % 4 == 0 else t - 1.0
            p90 = t - 0.5 if h == 10 and m % 5 == 0 else t + 2.0
            model, version = (("lstm", "demand@1") if m < 24 else
                              ("persistence", f"baseline: too little history: {m - 21} steps, the model needs 20"))
            rows.append(("*", m, h, p10, t + 1.0, p90, float(t), model, version))
    return rows


def _store(url: str, cluster: str, rows: list[tuple[Any, ...]]) -> None:
    with psycopg.connect(url) as conn:
        conn.cursor().executemany(
            "INSERT INTO forecast_points (issued_at, series, horizon_s, target_at, model, model_version, p10, p50, "
            "p90, actual) VALUES (to_timestamp(%s), %s, %s, to_timestamp(%s), %s, %s, %s, %s, %s, %s)",
            [(T0 + 60 * m, f"demand/{cluster}/{q}", h * 60.0, T0 + 60 * (m + h), model, version, p10, p50, p90,
              actual) for q, m, h, p10, p50, p90, actual, model, version in rows])


async def test_demand_accuracy_scores_each_horizon_and_says_who_served_each_series(fresh_database_url: str) -> None:
    await tsdb.migrate(fresh_database_url)
    # team-a: persistence for its first 5 origins (a constant series), then the model except at 60 min, where
    # the series' recent errors chose persistence (the version says so)
    queue = [("team-a", m, h, None, 1.0, 2.0, 1.0,
              *(("persistence", "baseline: constant series for 1440 steps (value 3)") if m < 5 else
                ("lstm", "demand@1; persistence at 60 min"))) for m in range(20) for h in (10, 60)]
    klass = [("class:latency-sensitive", m, 10, 0.0, 1.0, 2.0, None, "persistence",
              "baseline: no 'demand' model in the registry") for m in range(6)]
    _store(fresh_database_url, "c_1", _total_rows() + queue + klass)
    _store(fresh_database_url, "cx1", [("*", 0, 10, 0.0, 1.0, 2.0, 1.0, "lstm", "other@9")])  # LIKE's _ is not a wildcard
    pool = await tsdb.open_pool(fresh_database_url)
    try:
        acc = await demand_accuracy(pool, "c_1", T0)
    finally:
        await pool.close()
    assert acc["status"] == "scored" and acc["series"] == 3 and acc["forecasts"] == 3 * MINUTES
    h = acc["at_horizon_min"]
    assert [h[k]["points"] for k in ("10", "30", "60")] == [20, 20, 20]  # origins 10..29 have a known value
    assert [h[k]["rmse"] for k in ("10", "30", "60")] == [1.0, 1.0, 1.0]
    assert [h[k]["persistence_rmse"] for k in ("10", "30", "60")] == [10.0, 30.0, 60.0]
    assert h["10"]["vs_persistence"] == 0.9
    # 10 min: the p90 misses at 10, 15, 20, 25; the band also at 12, 16, 24, 28 (its p10 above the actual)
    assert (h["10"]["p90_coverage"], h["10"]["p10_p90_coverage"]) == (0.8, 0.6)
    assert (h["30"]["p90_coverage"], h["30"]["p10_p90_coverage"]) == (1.0, 0.75)
    assert (h["60"]["p90_coverage"], h["60"]["p10_p90_coverage"]) == (1.0, 0.75)
    assert acc["served"] == {
        "*": {"points": 90, "served": "demand@1", "share": 0.8, "by_label": {"demand@1": 0.8, "persistence": 0.2},
              "model_share_at_horizon_min": {"10": 0.8, "30": 0.8, "60": 0.8},
              "persistence_reason": {"reason": "too little history", "share": 0.2}},
        "class:latency-sensitive": {"points": 6, "served": "persistence", "share": 1.0,
                                    "by_label": {"persistence": 1.0}, "model_share_at_horizon_min": {"10": 0.0},
                                    "persistence_reason": {"reason": "no 'demand' model in the registry",
                                                           "share": 1.0}},
        # 15 points of the model at 10 min; 25 of persistence: 10 of a constant series, 15 at 60 min by choice
        "team-a": {"points": 40, "served": "persistence", "share": 0.625,
                   "by_label": {"persistence": 0.625, "demand@1": 0.375},
                   "model_share_at_horizon_min": {"10": 0.75, "60": 0.0},
                   "persistence_reason": {"reason": PER_HORIZON, "share": 0.375}},
    }
    assert acc["by_model"] == {"demand@1": 72, "persistence (too little history)": 18}
    # the plot: each minute's actual and the 30-min forecast for it (issued 30 minutes before)
    p = acc["plot"]
    at = p["t_h"].index(round(40 * 60 / 3600, 4))  # minute 40: forecast at minute 10 (m % 5 == 0, m % 4 != 0)
    assert (p["actual"][at], p["p10_30min"][at], p["p50_30min"][at], p["p90_30min"][at]) == (40.0, 39.0, 41.0, 42.0)
    at = p["t_h"].index(round(42 * 60 / 3600, 4))  # minute 42: forecast at minute 12, whose p10 misses
    assert (p["p10_30min"][at], p["p90_30min"][at]) == (42.5, 44.0)
    assert p["p50_30min"][p["t_h"].index(round(10 * 60 / 3600, 4))] is None  # no 30-min forecast for minute 10
    line = describe({"model": "demand@1"}, acc)
    assert "30 min ahead the actual fell inside the p10-p90 band 75% of the time, at or under the p90 100%" in line


async def test_hours_ahead_points_are_scored_where_their_targets_arrived(fresh_database_url: str) -> None:
    """The total's minute path for 200 minutes (the actual is the minute), and hours-ahead points from
    the 10-minute boundaries: 3-hour targets in the run (scored), 12-hour ones after it (left out)."""
    await tsdb.migrate(fresh_database_url)
    minutes = [("*", m, h, None, float(m), float(m) + 1, float(m + h), "persistence", "baseline: x")
               for m in range(200) for h in (10,)]
    hours = [("*", m, h, float(m + h - 20), float(m + h - 10), float(m + h), float(m + h) if m + h < 210 else None, "ridge",
              "hours: ridge") for m in range(0, 200, 10) for h in (180, 720)]
    _store(fresh_database_url, "c1", minutes + hours)
    pool = await tsdb.open_pool(fresh_database_url)
    try:
        acc = await demand_accuracy(pool, "c1", T0)
    finally:
        await pool.close()
    h = acc["at_horizon_min"]
    assert list(h) == ["10", "30", "60", "180"]  # 30 and 60: none stored, still reported; 720: no target arrived
    # origins 10, 20 (their value known from the 10-min forecasts) with targets at 190, 200 minutes
    assert (h["180"]["points"], h["180"]["rmse"], h["180"]["persistence_rmse"]) == (2, 10.0, 180.0)
    assert h["180"]["p90_coverage"] == 1.0 and h["180"]["p10_p90_coverage"] == 1.0
    assert acc["served"]["*"]["model_share_at_horizon_min"] == {"10": 0.0, "180": 1.0, "720": 1.0}


def test_a_forecaster_that_stored_no_p10_has_no_band_coverage() -> None:
    rows = [(T0 + 60 * m, 600.0, None, float(m + 10), float(m + 11), float(m + 10), "lstm", "x@1") for m in range(20)]
    scores = horizon_scores(rows, {round(T0 + 60 * (m + 10)): float(m + 10) for m in range(20)}, 10)
    assert scores["points"] == 10 and scores["p90_coverage"] == 1.0 and scores["p10_p90_coverage"] is None


@pytest.mark.parametrize(("model", "version", "horizon", "label"), [
    ("lstm", "demand@2", 10, ("demand@2", None)),
    ("lstm", "demand@2; persistence at 10, 30 min", 60, ("demand@2", None)),
    ("lstm", "demand@2; persistence at 10, 30 min", 30, ("persistence", PER_HORIZON)),
    ("persistence", "baseline: 25% of recent steps are gaps (limit 20%)", 10,
     ("persistence", "N% of recent steps are gaps")),
    ("persistence", "baseline: demand@3 unusable: onnxruntime cannot load the model", 10,
     ("persistence", "demand@3 unusable")),
    ("persistence", "baseline: model worse than persistence on recent data (RMSE 2.1 vs 1.9 at 60 min)", 60,
     ("persistence", "model worse than persistence on recent data")),
])
def test_a_served_label_says_who_served_the_points_horizon_and_groups_one_cause(
        model: str, version: str, horizon: float, label: tuple[str, str | None]) -> None:
    assert served_label(model, version, horizon) == label


def _scored() -> dict[str, Any]:
    per_h = {k: {"points": 20, "rmse": 1.0, "persistence_rmse": float(k), "vs_persistence": round(1 - 1 / int(k), 3),
                 "p90_coverage": 0.9, "p10_p90_coverage": c} for k, c in (("10", 0.6), ("30", 0.75), ("60", 0.8125))}
    t = [round(m / 60, 4) for m in range(60)]
    return {"status": "scored", "series": 2, "forecasts": 540, "by_model": {"demand@1": 540}, "at_horizon_min": per_h,
            "served": {"*": {"points": 270, "served": "demand@1", "share": 0.8,
                             "by_label": {"demand@1": 0.8, "persistence": 0.2},
                             "model_share_at_horizon_min": {"10": 1.0, "30": 0.8, "60": 0.6},
                             "persistence_reason": {"reason": "too little history", "share": 0.2}},
                       "team-a": {"points": 270, "served": "persistence", "share": 1.0,
                                  "by_label": {"persistence": 1.0},
                                  "persistence_reason": {"reason": "constant series for N steps", "share": 1.0}}},
            "plot": {"t_h": t, "actual": [float(m % 7) for m in range(60)],
                     "p10_30min": [None] * 30 + [m % 7 - 1.0 for m in range(30, 60)],
                     "p50_30min": [None] * 30 + [float(m % 7) for m in range(30, 60)],
                     "p90_30min": [None] * 30 + [m % 7 + 1.5 for m in range(30, 60)]}}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def test_the_demand_plot_shades_the_band_and_names_each_horizons_coverage() -> None:
    from matplotlib.collections import PolyCollection

    plt = _plt()
    fig = _demand_plot(plt, {"label": "gpuaware", "forecast": {"model": {"model": "demand@1"}}}, _scored(), 1.0)
    ax = fig.axes[0]
    assert "10 min 60% / 90%, 30 min 75% / 90%, 60 min 81% / 90%" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("p10-p90 band 30 min ahead: the actual inside it 75% of the time, at or under the p90 90%")
    assert "demand@1 served 80% of these, persistence the rest" in labels[1]
    band = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1 and band[0].get_paths()  # the shaded p10-p90 band, drawn where both ends exist
    ys = np.concatenate([path.vertices[:, 1] for path in band[0].get_paths()])
    assert min(ys) == pytest.approx(-1.0) and max(ys) == pytest.approx(7.5)  # from the lowest p10 to the highest p90
    plt.close(fig)


def test_the_page_and_the_console_show_the_horizon_and_served_tables(tmp_path: Path) -> None:
    from rich.console import Console

    from gpuaware.cli.demo_console import print_forecast_tables

    plt = _plt()
    run = {"label": "gpuaware", "forecast": {"model": {"model": "demand@1"}, "accuracy": _scored()}, "messages": {},
           "recorded": {}, "placement_events_rows": {}}
    fig = _demand_plot(plt, run, run["forecast"]["accuracy"], None)
    fig.savefig(tmp_path / "forecast.png", dpi=60)
    plt.close(fig)
    report = {"summary": "s", "invariants": {}, "runs": {"gpuaware": run}, "services": {}}
    write_html(tmp_path / "report.html", report, [tmp_path / "forecast.png"])
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Demand forecasts (gpuaware run; model demand@1)</h2>" in page
    assert ("<tr><td>30 min</td><td>20</td><td>1.000</td><td>30.000</td><td>+96.7%</td><td>90.0%</td>"
            "<td>75.0%</td></tr>") in page
    assert ("<tr><td>* (the total)</td><td>270</td><td>demand@1</td><td>80.0%</td><td>persistence 20.0%</td>"
            "<td>10 min 100.0% / 30 min 80.0% / 60 min 60.0%</td><td>too little history (20.0%)</td></tr>") in page
    assert "<td>team-a</td><td>270</td><td>persistence</td><td>100.0%</td><td>-</td>" in page
    assert page.count("data:image/png;base64,") == 1
    out = io.StringIO()
    print_forecast_tables(Console(file=out, width=200), run)
    text = out.getvalue()
    assert "actual in p10-p90" in text and "75.0%" in text and "persistence's main reason" in text
    assert "constant series for N steps (100.0%)" in text
