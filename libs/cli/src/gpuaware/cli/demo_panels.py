"""The Grafana dashboards' panels, drawn by ``gpuaware demo`` from the same SQL when no Grafana runs.

Every SQL panel of ``gpuaware.dashboards`` runs against the demo's database (its ``$cluster`` the
gpuaware run's cluster) over the replayed virtual day, where the scheduling loop's events, quota and
forecasts live; a panel with nothing there runs again over the run's wall-clock minutes, where the demo's
telemetry lives (the twin's GPUs are read in real time), and says which range it shows. It becomes a PNG
in ``<out>/panels/``: time series as lines (one per ``metric``), tables as a table of the first rows,
stats as the number. ``report.html`` shows them under "Dashboards"; ``report.json`` lists each panel
with how many rows its query returned (a query that returns nothing is there to see, not hidden).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuaware.cli.demo_format import NO_DATA, human

__all__ = ["render_panels"]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


async def render_panels(pool: Any, cluster: str, ranges: dict[str, tuple[datetime, datetime]],
                        out: Path) -> list[dict[str, Any]]:
    """Run every SQL panel and draw it; one entry per panel: dashboard, title, rows, the range it shows
    (the first of ``ranges`` with rows), image (relative to ``out``'s parent), or its query's error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpuaware.dashboards import expand, sql_panels

    out.mkdir(parents=True, exist_ok=True)
    done: list[dict[str, Any]] = []
    for p in sql_panels():
        entry: dict[str, Any] = {"dashboard": p.dashboard, "title": p.title, "kind": p.kind}
        try:
            for name, (start, end) in ranges.items():
                async with pool.connection() as conn:
                    cur = await conn.execute(expand(p.sql, start, end, cluster))
                    cols = [d.name for d in cur.description]
                    rows = await cur.fetchall()
                entry["range"] = name
                if rows and (p.kind != "stat" or rows[0][0]):
                    break
        except Exception as exc:  # the report shows the panel's error; the demo goes on
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            done.append(entry)
            continue
        entry["rows"] = len(rows)
        fig = _draw(plt, p, cols, rows)
        path = out / f"{_slug(p.dashboard)}--{_slug(p.title)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        entry["image"] = f"{out.name}/{path.name}"
        done.append(entry)
    return done


def _number(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _draw(plt: Any, p: Any, cols: list[str], rows: list[tuple]) -> Any:
    title = f"{p.title}"
    if p.kind == "timeseries":
        fig, ax = plt.subplots(figsize=(7, 3))
        value = next(c for c in cols if c not in ("time", "metric"))
        series: dict[str, tuple[list[Any], list[float]]] = {}
        for r in rows:
            d = dict(zip(cols, r, strict=True))
            xs, ys = series.setdefault(str(d.get("metric", value)), ([], []))
            xs.append(d["time"])
            ys.append(_number(d[value]))
        drawable = {name: xy for name, xy in series.items() if len(xy[0]) >= 2}
        for name, (xs, ys) in sorted(drawable.items())[:12]:
            ax.plot(xs, ys, linewidth=1.0, label=name)
        if 1 < len(drawable) <= 12:
            ax.legend(fontsize=6, loc="upper left")
        ax.set_ylabel(value, fontsize=8)
        ax.tick_params(labelsize=7)
        if not drawable:  # no rows, or one point a series: no line, and no made-up time axis around it
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, f"{NO_DATA} in this run" if not rows else f"{NO_DATA}: one point per series "
                    f"({human(rows[0][cols.index(value)])})", ha="center", va="center", transform=ax.transAxes)
    elif p.kind == "stat":
        fig, ax = plt.subplots(figsize=(3, 1.6))
        ax.axis("off")
        ax.text(0.5, 0.45, human(rows[0][0]) if rows else NO_DATA, ha="center", va="center",
                fontsize=26 if rows else 14)
    else:
        shown = rows[:12]
        fig, ax = plt.subplots(figsize=(7, 0.45 + 0.28 * max(1, len(shown))))
        ax.axis("off")
        if shown:
            cells = [[_cell(v) for v in r] for r in shown]
            t = ax.table(cellText=cells, colLabels=cols, loc="center", cellLoc="left")
            t.auto_set_font_size(False)
            t.set_fontsize(6.5)
            t.scale(1, 1.1)
        else:
            ax.text(0.5, 0.5, "no rows in this run", ha="center", va="center")
        if len(rows) > len(shown):
            title += f" (first {len(shown)} of {len(rows)})"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def _cell(v: Any) -> str:
    if isinstance(v, int | float | Decimal) and not isinstance(v, bool):
        return human(v)
    if isinstance(v, datetime):
        return v.strftime("%m-%d %H:%M")
    text = "" if v is None else str(v)
    return text if len(text) <= 28 else text[:25] + "..."
