"""Telemetry in -> score and state change out -> alert raised and later resolved, over a real
nats-server and PostgreSQL; the score history and the alerts land in the database."""

from __future__ import annotations

import psycopg
from health_scoring_helpers import T0, Recorder, gpu_uuid, health_scoring, row, stats

from gpuaware.schemas import HealthState


async def test_xid_79_quarantines_then_a_clean_period_brings_the_gpu_back(recorder: Recorder, nats_proc, cluster: str,
                                                                         fresh_database_url: str) -> None:
    r = recorder
    g0, g1 = gpu_uuid("n1", 0), gpu_uuid("n1", 1)
    await r.nodes(["n1"])
    # clean periods of 60 s of telemetry time, an XID counts for 60 s, no aftershock hazard (so the
    # clean periods alone decide); the samples carry their own times, 10 s apart: no waiting
    async with health_scoring(nats_proc.url, fresh_database_url, cluster, quarantine_clean_s=60,
                              degraded_clean_s=60, xid_hold_s=60, aftershock_k=0.0) as svc:
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.wait(lambda: len(r.changes) == 2, what="both GPUs' first state")
        assert {(c.gpu_uuid, c.previous, c.current) for c in r.changes} == {
            (g0, None, HealthState.HEALTHY), (g1, None, HealthState.HEALTHY)}
        # GPU 0 falls off the bus at T0+10 (the agent's last-XID gauge moves from 0 to 79)
        await r.sample("n1", T0 + 10, [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: r.states_of(g0)[-1:] == ["quarantined"], what="GPU 0 quarantined")
        q = [c for c in r.changes if c.gpu_uuid == g0][-1]
        assert q.previous is HealthState.HEALTHY and "xid_79" in q.reasons and q.changed_at == T0 + 10
        await r.wait(lambda: {"gpu_quarantined", "gpu_xid_critical"} <= set(r.rules("raised", g0)),
                     what="critical alerts")
        scored = [s for s in r.scored if s.gpu_uuid == g0 and s.scored_at == T0 + 10]
        assert scored and scored[0].state is HealthState.QUARANTINED and scored[0].components["xid"] == 0.0
        assert r.states_of(g1) == ["healthy"]  # the neighbour is untouched
        # quiet samples every 10 s: the XID stops counting at T0+70, quarantine ends 60 s later (T0+130,
        # degraded), degraded ends 60 s after that (T0+190, healthy)
        for k in range(2, 21):
            await r.sample("n1", T0 + 10 * k, [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined", "degraded", "healthy"],
                     what="GPU 0 back to healthy")
        times = {c.current.value: c.changed_at for c in r.changes if c.gpu_uuid == g0 and c.previous}
        assert times == {"quarantined": T0 + 10, "degraded": T0 + 130, "healthy": T0 + 190}
        await r.wait(lambda: sorted(r.rules("resolved", g0)) == ["gpu_degraded", "gpu_quarantined",
                                                                  "gpu_xid_critical"], what="alerts resolved")
        assert sorted(r.rules("raised", g0)) == ["gpu_degraded", "gpu_quarantined", "gpu_xid_critical"]
        s = await stats(r.nc)
        assert s.states == {"healthy": 2, "degraded": 0, "quarantined": 0} and s.open_alerts == 0
        assert s.counts["state_changes"] == 5 and s.checkpoints > 0 and s.dead_lettered == 0
        assert svc.view.book.state_of(g0) is HealthState.HEALTHY
    # what PostgreSQL holds: the score history with the transitions, the alerts opened and closed
    with psycopg.connect(fresh_database_url) as conn:
        changes = conn.execute("SELECT previous, state, cause, extract(epoch FROM ts)::float8 - %s FROM health_scores "
                               "WHERE cluster = %s AND gpu_uuid = %s AND changed ORDER BY ts",
                               (T0, cluster, g0)).fetchall()
        assert changes == [(None, "healthy", "first", 0.0), ("healthy", "quarantined", "escalated", 10.0),
                           ("quarantined", "degraded", "clean_period", 130.0),
                           ("degraded", "healthy", "clean_period", 190.0)]
        reasons = conn.execute("SELECT reasons FROM health_scores WHERE cluster = %s AND gpu_uuid = %s AND "
                               "state = 'quarantined' ORDER BY ts LIMIT 1", (cluster, g0)).fetchone()[0]
        assert "xid_79" in reasons
        alerts = conn.execute("SELECT rule, resolved_at IS NOT NULL FROM health_alerts WHERE cluster = %s "
                              "ORDER BY rule", (cluster,)).fetchall()
        assert alerts == [("gpu_degraded", True), ("gpu_quarantined", True), ("gpu_xid_critical", True)]
        state = conn.execute("SELECT state FROM health_gpu_state WHERE cluster = %s AND gpu_uuid = %s",
                             (cluster, g0)).fetchone()
        assert state == ("healthy",)


async def test_stale_telemetry_is_scored_and_alerted_by_the_tick_and_the_state_held(
        recorder: Recorder, nats_proc, cluster: str, fresh_database_url: str) -> None:
    import asyncio
    import time

    r = recorder
    g0 = gpu_uuid("n1", 0)
    await r.nodes(["n1"])
    async with health_scoring(nats_proc.url, fresh_database_url, cluster, stale_after_s=1.0, tick_s=0.2):
        now = time.time()
        await r.sample("n1", now, [row("n1", 0, xid_last=0), row("n1", 1)])
        await r.sample("n1", now + 0.1, [row("n1", 0, xid_last=79), row("n1", 1)])  # quarantined, then silence
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined"], what="quarantined")
        await r.wait(lambda: "gpu_telemetry_stale" in r.rules("raised", g0), what="stale alert")
        stale = [x for x in r.scored if x.gpu_uuid == g0 and "stale_telemetry" in x.reasons]
        assert stale and stale[-1].components["telemetry"] == 50.0
        assert stale[-1].state is HealthState.QUARANTINED  # the state is held, not changed by silence
        await asyncio.sleep(0.5)
        assert r.rules("raised", g0).count("gpu_telemetry_stale") == 1  # raised once while it lasts
        await r.sample("n1", time.time(), [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: "gpu_telemetry_stale" in r.rules("resolved", g0), what="stale resolved")
        assert r.states_of(g0) == ["healthy", "quarantined"]
        s = await stats(r.nc)
        assert s.issues.get("stale", 0) >= 1 and s.inputs["stale_periods"] >= 1
