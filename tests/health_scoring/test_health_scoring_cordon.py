"""The manual override: `gpuaware health cordon` quarantines a GPU, `uncordon` brings it back, both
audited (who, when, why) in PostgreSQL and in the published state changes' reasons."""

from __future__ import annotations

import asyncio
import time

import psycopg
from health_scoring_helpers import T0, Recorder, gpu_uuid, health_scoring, row, stats
from typer.testing import CliRunner

from gpuaware.cli.main import app
from gpuaware.schemas import HealthState


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["health", *args])
    return result.exit_code, result.output


async def test_cordon_quarantines_and_uncordon_brings_back_both_audited(recorder: Recorder, nats_proc, cluster: str,
                                                                         fresh_database_url: str) -> None:
    r = recorder
    g0 = gpu_uuid("n1", 0)
    await r.nodes(["n1"])
    async with health_scoring(nats_proc.url, fresh_database_url, cluster):
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy"], what="first state")
        before = time.time()
        code, out = await asyncio.to_thread(_cli, "cordon", g0, "--reason", "RMA ticket 42", "--by", "alice",
                                            "--cluster", cluster, "--nats-url", nats_proc.url)
        assert code == 0, out
        assert "healthy -> quarantined" in out and "by alice" in out and "RMA ticket 42" in out
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined"], what="cordoned")
        change = [c for c in r.changes if c.gpu_uuid == g0][-1]
        assert {"manual_cordon", "cordon_by:alice", "cordon_reason:RMA ticket 42"} <= set(change.reasons)
        assert change.changed_at >= before
        await r.wait(lambda: "gpu_cordoned" in r.rules("raised", g0) and "gpu_quarantined" in r.rules("raised", g0),
                     what="cordon alerts")
        # healthy telemetry does not lift a cordon
        await r.sample("n1", T0 + 10, [row("n1", 0), row("n1", 1)])
        await asyncio.sleep(0.3)
        assert r.states_of(g0)[-1] == "quarantined"
        # an unknown GPU and an uncordon of a GPU that is not cordoned are refused, saying why
        code, out = await asyncio.to_thread(_cli, "cordon", "GPU-nope", "--reason", "x", "--cluster", cluster,
                                            "--nats-url", nats_proc.url)
        assert code == 1 and "404" in out and "not known" in out
        code, out = await asyncio.to_thread(_cli, "uncordon", gpu_uuid("n1", 1), "--reason", "x", "--cluster",
                                            cluster, "--nats-url", nats_proc.url)
        assert code == 1 and "409" in out and "not cordoned" in out
        code, out = await asyncio.to_thread(_cli, "uncordon", g0, "--reason", "replaced the board", "--by", "bob",
                                            "--cluster", cluster, "--nats-url", nats_proc.url)
        assert code == 0 and "quarantined -> healthy" in out, out
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined", "healthy"], what="uncordoned")
        back = [c for c in r.changes if c.gpu_uuid == g0][-1]
        assert {"uncordon_by:bob", "uncordon_reason:replaced the board"} <= set(back.reasons)
        assert "manual_cordon" not in back.reasons
        await r.wait(lambda: {"gpu_cordoned", "gpu_quarantined"} <= set(r.rules("resolved", g0)), what="resolved")
        s = await stats(r.nc)
        assert s.counts["cordons"] == 1 and s.counts["uncordons"] == 1
    with psycopg.connect(fresh_database_url) as conn:
        audit = conn.execute("SELECT action, requested_by, reason, previous, current FROM health_overrides "
                             "WHERE cluster = %s ORDER BY at", (cluster,)).fetchall()
        assert audit == [("cordon", "alice", "RMA ticket 42", "healthy", "quarantined"),
                         ("uncordon", "bob", "replaced the board", "quarantined", "healthy")]
        track = conn.execute("SELECT track FROM health_gpu_state WHERE cluster = %s AND gpu_uuid = %s",
                             (cluster, g0)).fetchone()[0]
        assert [a["action"] for a in track["audit"]] == ["cordon", "uncordon"] and track["override"] is None


async def test_cordon_degraded_and_a_request_for_another_cluster(recorder: Recorder, nats_proc, cluster: str,
                                                                fresh_database_url: str) -> None:
    r = recorder
    g1 = gpu_uuid("n1", 1)
    await r.nodes(["n1"])
    async with health_scoring(nats_proc.url, fresh_database_url, cluster) as svc:
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.wait(lambda: r.states_of(g1) == ["healthy"], what="first state")
        code, out = await asyncio.to_thread(_cli, "cordon", g1, "--reason", "flaky fan", "--degraded", "--cluster",
                                            cluster, "--nats-url", nats_proc.url)
        assert code == 0 and "healthy -> degraded" in out, out
        assert svc.view.book.state_of(g1) is HealthState.DEGRADED
        code, out = await asyncio.to_thread(_cli, "cordon", g1, "--reason", "x", "--cluster", "elsewhere",
                                            "--nats-url", nats_proc.url)
        assert code == 1 and "421" in out
        code, out = await asyncio.to_thread(_cli, "cordon", g1, "--reason", " ", "--cluster", cluster,
                                            "--nats-url", nats_proc.url)
        assert code != 0
