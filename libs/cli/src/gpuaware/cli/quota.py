"""`gpuaware quota`: chargeback from the command line.

`report` reads the quota service's chargeback intervals (PostgreSQL, migration 0011_quota) that
overlap `[--since, --until)` and charges each the overlap: GPU-seconds (a 500-milli pod for an hour
is 1,800) and GPU-memory GiB-seconds, by tenant, queue or pod -- the arithmetic is
gpuaware.quota.charge, the same the tests check. It prints a table and writes a CSV (`--csv`).
Times are ISO 8601 (`2026-11-23T08:00`, UTC unless an offset is given) or relative (`24h`, `7d`,
`90m` ago), between 1970 and 2100. The database is `--database-url` (or DATABASE_URL), else the
running `gpuaware up` stack. Bad times, a CSV path that cannot be written and a database out of reach
are refused on standard error (options.refuse), the CSV's path checked before the query and the
CSV written whole or not at all (options.atomic_file).
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuaware import tsdb
from gpuaware.cli.options import atomic_file, out_file, refuse
from gpuaware.quota import Interval, charge, rows_to_csv

app = typer.Typer(help="Quota: chargeback reports of GPU-seconds per tenant, queue or pod.", no_args_is_help=True)

RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LATEST_S = 4_102_444_800.0
"""2100-01-01 UTC: a window's ends are Unix seconds in ``[0, LATEST_S]`` (PostgreSQL and datetime
take them; ``99999999999d`` ago is no time either can hold)"""

SELECT = """SELECT pod_uid, queue, tenant, gpu_milli, gpu_memory_mib,
                   extract(epoch FROM started_at), extract(epoch FROM ended_at), outcome
            FROM quota_intervals
            WHERE cluster = %s AND started_at < %s AND (ended_at IS NULL OR ended_at > %s)"""


@app.callback()
def _group() -> None:
    """Quota chargeback (report)."""


def parse_when(text: str, now: float) -> float:
    """An ISO time (UTC unless it says otherwise) or a duration ago (``24h``) -> epoch seconds, within
    1970..2100 (``LATEST_S``)."""
    m = RELATIVE.match(text.strip())
    if m:
        at = now - float(m.group(1)) * UNITS[m.group(2)]
    else:
        try:
            when = datetime.fromisoformat(text.strip())
        except ValueError:
            raise typer.BadParameter(f"expected an ISO time (2026-11-23T08:00) or a duration ago (24h, 7d); "
                                     f"got {text!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        try:
            at = when.timestamp()
        except (OverflowError, ValueError, OSError):  # year 1 or 9999 in an extreme offset
            at = -1.0
    if not 0.0 <= at <= LATEST_S:  # also refuses nan and inf
        raise typer.BadParameter(f"{text!r} is not between 1970-01-01 and 2100-01-01 (UTC)")
    return at


def _database_url(given: str) -> str:
    if given:
        return given
    from gpuaware.devstack import stack_status

    state = stack_status()
    if state is None:
        raise typer.BadParameter("no database: pass --database-url (or DATABASE_URL), or start `gpuaware up`")
    return state.database_url


async def load_intervals(database_url: str, cluster: str, since: float, until: float) -> list[Interval]:
    async with await tsdb.connect(database_url, application_name="gpuaware-quota-report") as conn:
        cur = await conn.execute(SELECT, (cluster, datetime.fromtimestamp(until, UTC),
                                          datetime.fromtimestamp(since, UTC)))
        rows = await cur.fetchall()
    return [Interval(r[0], r[1], r[2], int(r[3]), int(r[4]), float(r[5]), None if r[6] is None else float(r[6]), r[7])
            for r in rows]


@app.command("report")
def report(
    since: Annotated[str, typer.Option("--since", help="Start: ISO time or a duration ago (24h, 7d).")] = "24h",
    until: Annotated[str, typer.Option("--until", help="End: ISO time, a duration ago, or 'now'.")] = "now",
    by: Annotated[str, typer.Option("--by", help="tenant | queue | pod")] = "tenant",
    csv_path: Annotated[Path, typer.Option("--csv", help="Where to write the CSV.", callback=out_file)] = Path(
        "quota-report.csv"),
    cluster: Annotated[str, typer.Option("--cluster", help="The cluster the quota service serves.")] = "default",
    database_url: Annotated[str, typer.Option("--database-url", envvar="DATABASE_URL",
                                              help="PostgreSQL of the platform.")] = "",
) -> None:
    """GPU-seconds and GPU-memory GiB-seconds per tenant, queue or pod over a window (table + CSV)."""
    if by not in ("tenant", "queue", "pod"):
        raise typer.BadParameter(f"--by must be tenant, queue or pod; got {by!r}")
    now = time.time()
    start = parse_when(since, now)
    end = now if until.strip() == "now" else parse_when(until, now)
    if end <= start:
        raise typer.BadParameter(f"--until ({until}) must be after --since ({since})")
    if not csv_path.parent.is_dir():
        refuse(f"{csv_path}: folder {csv_path.parent} does not exist", label="cannot write the CSV")
    url = _database_url(database_url)
    try:
        intervals = asyncio.run(load_intervals(url, cluster, start, end))
    except Exception as exc:  # the driver's errors (unreachable, refused, bad DSN), surfaced with their message
        refuse(f"{type(exc).__name__}: {exc}", label="cannot read the chargeback intervals", code=3)
    rows = charge(intervals, start, end, by=by)
    fmt = "%Y-%m-%d %H:%M:%S"
    table = Table(title=f"GPU chargeback by {by}, {datetime.fromtimestamp(start, UTC).strftime(fmt)} .. "
                        f"{datetime.fromtimestamp(end, UTC).strftime(fmt)} UTC ({timedelta(seconds=round(end - start))})")
    for col in (by, "pods", "GPU-hours", "GPU-seconds", "GPU-memory GiB-hours"):
        table.add_column(col, justify="left" if col == by else "right")
    for r in rows:
        table.add_row(str(r[by]), str(r["pods"]), f"{r['gpu_seconds'] / 3600:.3f}", f"{r['gpu_seconds']:.1f}",
                      f"{r['gpu_memory_gib_seconds'] / 3600:.3f}")
    console = Console()
    console.print(table if rows else f"no GPU time charged in the window (cluster {cluster})")
    try:
        with atomic_file(csv_path) as tmp:
            tmp.write_text(rows_to_csv(rows) or f"{by},pods,gpu_seconds,gpu_memory_gib_seconds\n")
    except OSError as exc:
        refuse(f"{csv_path}: {exc.strerror or exc}", label="cannot write the CSV", code=3)
    console.print(f"wrote {csv_path}")


# --- the demo's quota part (called from demo_run / demo; kept here so the demo files stay small) ----

DEMO_TEAMS = ("team-vision", "team-nlp")
DEMO_BORROWER = "research"


def demo_tree(gpus: int) -> str:
    """The demo's queue tree for a cluster of ``gpus`` GPUs: two teams with equal weight, each
    guaranteed 30 % of the GPUs; ``research`` guaranteed nothing (everything it runs is borrowed and
    reclaimable); every other queue (team-recsys, Philly's virtual clusters) open and unlimited.
    No strict partition: placement has no partition filter yet, so a node reserved by quota alone
    would only see pods refused and parked there again and again."""
    g = max(1, int(gpus * 0.3))
    return "\n".join([
        "open_queues: true",
        f"capacity: {{'*': {{gpus: {gpus}}}}}",
        "default_queue: default",
        f"half_life_s: {3600}",
        "queues:",
        f"  - {{name: org, guaranteed: {{'*': {{gpus: {2 * g}}}}}}}",
        *(f"  - {{name: {t}, parent: org, weight: 1, guaranteed: {{'*': {{gpus: {g}}}}}}}" for t in DEMO_TEAMS),
        f"  - {{name: {DEMO_BORROWER}, parent: org, weight: 1}}",
        "  - {name: default}",
        "",
    ])


async def demo_summary(pool: object, cluster: str) -> dict:
    """What quota saw in a demo run: per queue, used against guaranteed and fair share over time (from
    its QuotaUsageReported snapshots), Jain's index over time, and the chargeback table (intervals)."""
    async with pool.connection() as conn:  # type: ignore[attr-defined]  # pool: a psycopg pool, untyped here (cli does not import psycopg)
        cur = await conn.execute(
            "SELECT extract(epoch FROM ts), queue, used_gpu_milli, guaranteed_gpu_milli, fair_share_gpu_milli, "
            "jain_index FROM quota_usage WHERE cluster = %s ORDER BY ts", (cluster,))
        usage = await cur.fetchall()
        cur = await conn.execute(
            "SELECT pod_uid, queue, tenant, gpu_milli, gpu_memory_mib, extract(epoch FROM started_at), "
            "extract(epoch FROM ended_at), outcome FROM quota_intervals WHERE cluster = %s", (cluster,))
        rows = await cur.fetchall()
    intervals = [Interval(r[0], r[1], r[2], int(r[3]), int(r[4]), float(r[5]), None if r[6] is None else float(r[6]),
                          r[7]) for r in rows]
    if not usage and not intervals:
        return {"status": "no quota data"}
    # two clocks: snapshots carry the service's (wall) time, intervals the binder's (the twin's virtual time)
    t0 = min((float(u[0]) for u in usage), default=0.0)
    c0 = min((iv.started_at for iv in intervals), default=0.0)
    c1 = max((iv.ended_at or iv.started_at for iv in intervals), default=0.0)
    queues: dict[str, dict] = {}
    jain: list[tuple[float, float]] = []
    for ts_, q, used, guar, fair, j in usage:
        s = queues.setdefault(q, {"t": [], "used_gpus": [], "guaranteed_gpus": 0.0, "fair_share_gpus": []})
        s["t"].append(round(float(ts_) - t0, 1))
        s["used_gpus"].append(used / 1000)
        s["fair_share_gpus"].append(fair / 1000)
        s["guaranteed_gpus"] = guar / 1000
        if j is not None and (not jain or jain[-1][0] != float(ts_)):
            jain.append((float(ts_), float(j)))
    for s in queues.values():
        s["mean_used_gpus"] = round(sum(s["used_gpus"]) / max(len(s["used_gpus"]), 1), 3)
        s["mean_fair_share_gpus"] = round(sum(s["fair_share_gpus"]) / max(len(s["fair_share_gpus"]), 1), 3)
    js = [j for _, j in jain]
    return {
        "status": "took part",
        "queues": {q: {k: v for k, v in s.items() if k in ("guaranteed_gpus", "mean_used_gpus", "mean_fair_share_gpus")}
                   for q, s in queues.items()},
        "series": {q: {"t_s": s["t"], "used_gpus": s["used_gpus"], "fair_share_gpus": s["fair_share_gpus"]}
                   for q, s in queues.items()},
        "jain": {"mean": round(sum(js) / len(js), 4) if js else None, "min": round(min(js), 4) if js else None,
                 "reports": len(js)},
        "chargeback_by_queue": charge(intervals, c0, c1, by="queue"),
        "chargeback_by_tenant": charge(intervals, c0, c1, by="tenant"),
        "preempted_intervals": sum(1 for iv in intervals if iv.outcome.startswith("preempted")),
    }


def demo_table(summary: dict) -> Table | str:
    """The demo report's quota table: per queue, guaranteed, mean used and fair share, GPU-hours billed."""
    if summary.get("status") != "took part":
        return f"quota: {summary.get('status', 'not run')}"
    billed = {r["queue"]: r["gpu_seconds"] for r in summary["chargeback_by_queue"]}
    j = summary["jain"]
    t = Table(title=f"quota (gpuaware run): Jain's index mean {j['mean']} (min {j['min']}, {j['reports']} reports)")
    for col in ("queue", "guaranteed GPUs", "mean used GPUs", "mean fair share GPUs", "GPU-hours billed"):
        t.add_column(col, justify="left" if col == "queue" else "right")
    for q, s in sorted(summary["queues"].items(), key=lambda kv: -billed.get(kv[0], 0.0)):
        t.add_row(q, f"{s['guaranteed_gpus']:g}", f"{s['mean_used_gpus']:.2f}", f"{s['mean_fair_share_gpus']:.2f}",
                  f"{billed.get(q, 0.0) / 3600:.3f}")
    return t
