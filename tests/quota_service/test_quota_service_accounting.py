"""Chargeback survives a restart without double counting: the binder's events are replayed from the
stream's start by the restarted service (and some are redelivered as duplicates), yet every GPU-second
is billed once; `gpuaware quota report` prints and writes the same figures."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from quota_service_helpers import T0, World, pending, quota
from service_runner import eventually
from typer.testing import CliRunner

from gpuaware import tsdb
from gpuaware.cli.main import app
from gpuaware.cli.quota import load_intervals
from gpuaware.quota import charge

TREE = """
queues:
  - {name: org}
  - {name: team-a, parent: org}
  - {name: team-b, parent: org}
  - {name: a1, parent: team-a}
  - {name: b1, parent: team-b}
"""


async def _rows(url: str, cluster: str) -> int:
    async with await tsdb.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM quota_intervals WHERE cluster = %s", (cluster,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_accounting_survives_a_restart_without_double_counting(
        world: World, nats_proc, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text(TREE)
    w, url = world, fresh_database_url
    async with quota(nats_proc.url, url, cluster, tree=str(tree)) as q:
        # p1: 2 whole GPUs for an hour -> 7,200 GPU-s, 2 x 8 GiB x 3,600 s = 57,600 GiB-s
        await w.bound("p1", "a1", "n1", 2, T0, msg_id="b-p1")
        await w.finished("p1", "n1", T0 + 3600, T0, msg_id="f-p1")
        # p2: half a GPU from T0+1000, still running at the restart
        await w.bound("p2", "b1", "n2", 1, T0 + 1000, milli=500, memory_mib=4096, msg_id="b-p2")
        await eventually(lambda: q.view.counts["bound"] == 2 and q.view.counts["finished"] == 1, what="events")
        await q.writer.flush()
        assert q.view.ledger.used("team-b")[1] == 500 and q.view.ledger.used("team-a")[1] == 0
    assert await _rows(url, cluster) == 2
    async with quota(nats_proc.url, url, cluster, tree=str(tree)) as q:
        # the replay rebuilt the ledger: p2 runs, p1 does not
        await eventually(lambda: q.view.counts["bound"] == 2, what="the replay")
        assert set(q.view.ledger.running) == {"p2"}
        # redelivered duplicates (other message ids: the binder re-publishing after its own restart)
        await w.bound("p1", "a1", "n1", 2, T0, msg_id="b-p1-again")
        await w.finished("p1", "n1", T0 + 3600, T0, msg_id="f-p1-again")
        # p2 finishes 1,800 s after it started -> 0.5 x 1,800 = 900 GPU-s; p2 preempted and bound again
        # later is a second interval: 1 GPU from T0+5000 to T0+5600 = 600 GPU-s
        await w.finished("p2", "n2", T0 + 2800, T0 + 1000)
        await w.bound("p2", "b1", "n3", 1, T0 + 5000)
        await w.preempted("p2", "n3", T0 + 5600)
        await eventually(lambda: q.view.counts["preempted"] == 1, what="the preemption")
        await q.writer.flush()
        # a pod asked about after the restart is judged against the rebuilt ledger
        assert (await w.admit(pending(cluster, "p9", "a1"), node="n1")).admitted
    assert await _rows(url, cluster) == 3
    got = charge(await load_intervals(url, cluster, T0, T0 + 7200), T0, T0 + 7200, by="queue")
    assert got == [
        {"queue": "a1", "pods": 1, "gpu_seconds": 7200.0, "gpu_memory_gib_seconds": 57600.0},
        {"queue": "b1", "pods": 1, "gpu_seconds": 1500.0, "gpu_memory_gib_seconds": 1800 * 4 + 600 * 8.0},
    ]
    # the command: a window cutting p1 in half (T0+1800 .. T0+7200) -> a1 3,600 GPU-s; b1 0.5 x 1,000 + 600 =
    # 1,100 GPU-s and 4 GiB x 1,000 + 8 GiB x 600 = 8,800 GiB-s; by tenant (team)
    out = tmp_path / "report.csv"
    since = datetime.fromtimestamp(T0 + 1800, UTC).isoformat()
    until = datetime.fromtimestamp(T0 + 7200, UTC).isoformat()
    # the command runs its own event loop (asyncio.run), so it runs beside this test's loop, in a thread
    res = await asyncio.to_thread(CliRunner().invoke, app, ["quota", "report", "--since", since, "--until", until,
                                                            "--by", "tenant", "--cluster", cluster,
                                                            "--database-url", url, "--csv", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text().splitlines() == ["tenant,pods,gpu_seconds,gpu_memory_gib_seconds",
                                            "team-a,1,3600.0,28800.0", "team-b,1,1100.0,8800.0"]
    assert "team-a" in res.output and "1.000" in res.output  # 3,600 GPU-s = 1.000 GPU-hours
    bad = CliRunner().invoke(app, ["quota", "report", "--since", "yesterday", "--database-url", url])
    assert bad.exit_code != 0 and "expected an ISO time" in bad.output
