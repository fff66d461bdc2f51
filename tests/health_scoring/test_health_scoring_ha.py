"""Two health-scoring instances on one cluster: one leads (consumes, scores, publishes), the other
stands by; when the leader stops, the standby takes over from the last checkpoint and goes on where it
left off: no state change repeated, none lost (each GPU's changes chain), and only the leader publishes."""

from __future__ import annotations

import contextlib

from health_scoring_helpers import Recorder, gpu_uuid, health_scoring, row

from gpuaware.schemas import HealthState


async def test_the_standby_takes_over_from_the_leaders_checkpoint(recorder: Recorder, nats_proc, cluster: str,
                                                                  fresh_database_url: str) -> None:
    r = recorder
    g0 = gpu_uuid("n1", 0)
    await r.nodes(["n1"])
    rules = {"quarantine_clean_s": 60, "degraded_clean_s": 60, "xid_hold_s": 60, "aftershock_k": 0.0}
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(health_scoring(nats_proc.url, fresh_database_url, cluster, **rules))
        second = await stack.enter_async_context(health_scoring(nats_proc.url, fresh_database_url, cluster,
                                                                instance_id="h2", **rules))
        assert first.leading and not second.leading and second.consumer is None
        t0 = 1_000_000.0
        await r.sample("n1", t0, [row("n1", 0), row("n1", 1)])
        await r.sample("n1", t0 + 10, [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined"], what="GPU 0 quarantined by the leader")
        assert {c.source for c in r.changes} == {first.source}
        # the leader stops (hands the lease over after its last checkpoint); the standby takes over
        await first.stop()
        await r.wait(lambda: second.leading, timeout=20.0, what="the standby leading")
        assert second.view.book.state_of(g0) is HealthState.QUARANTINED  # read back from the checkpoint
        for k in range(2, 15):  # the XID stops counting at t0+70, the quarantine ends 60 s later
            await r.sample("n1", t0 + 10 * k, [row("n1", 0, xid_last=79), row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined", "degraded"], timeout=20.0,
                     what="GPU 0 degraded, by the new leader")
        last = [c for c in r.changes if c.gpu_uuid == g0][-1]
        assert last.previous is HealthState.QUARANTINED and last.source == second.source
        assert len({(c.gpu_uuid, c.changed_at, c.current) for c in r.changes}) == len(r.changes)
