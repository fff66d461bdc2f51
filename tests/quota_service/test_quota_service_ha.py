"""Two quota instances on one cluster, over real NATS and PostgreSQL: the lease holder alone decides
admissions (a standby relays what it receives), so a queue's limit holds across both; when the
leader stops, or loses its lease without handing it over, the standby takes over from the binder's
stream and answers; nothing is admitted twice and usage is reported by one instance at a time."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from quota_service_helpers import T0, World, pending, quota
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas import QUOTA_ADMIT, QUOTA_LEASE_BUCKET, AdmitReply, AdmitRequest, PodPending
from gpuaware.services.quota.handlers import quota_samples

TREE = """
capacity: {"*": {gpus: 8}}
queues:
  - {name: org}
  - {name: a1, parent: org, limit: {"*": {gpus: 4}}}
"""
"""one queue limited to 4 GPUs: two instances deciding alone would admit 8"""


def request(cluster: str, pod: PodPending) -> AdmitRequest:
    return AdmitRequest(source="placement/test", emitted_at=T0, cluster=cluster, pod=pod, node="n1")


def tree(tmp_path: Path) -> str:
    path = tmp_path / "queues.yaml"
    path.write_text(TREE)
    return str(path)


async def leader_of(*instances: Any) -> Any:
    await eventually(lambda: sum(1 for q in instances if q.leading) == 1, timeout=30.0, what="one quota leader")
    return next(q for q in instances if q.leading)


async def test_one_decides_the_standby_relays(world: World, nats_proc: Any, cluster: str, fresh_database_url: str,
                                             tmp_path: Path) -> None:
    w = world
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(quota(nats_proc.url, fresh_database_url, cluster, tree=tree(tmp_path),
                                                  instance_id="q1"))
        b = await stack.enter_async_context(quota(nats_proc.url, fresh_database_url, cluster, tree=tree(tmp_path),
                                                  instance_id="q2"))
        leader = await leader_of(a, b)
        standby = b if leader is a else a
        # two asked through the standby itself, the rest through the service's queue group (either instance)
        direct = [await standby.admit(request(cluster, pending(cluster, f"s{i}", "a1"))) for i in range(2)]
        over_nats = [await w.admit(pending(cluster, f"p{i}", "a1"), node="n1") for i in range(4)]
        replies = direct + over_nats
        assert [r.admitted for r in replies] == [True] * 4 + [False] * 2, [r.reason for r in replies]
        assert all(r.reason.startswith("over_limit") for r in replies[4:])
        assert all(r.source == leader.source for r in replies), "every answer is the leader's"
        assert (leader.answered, standby.answered) == (6, 0)
        assert standby.relayed >= 2
        assert standby.view.ledger.running == {} and len(leader.view.ledger.running) == 4
        exported = {q.instance: {m.name: m.value for m in quota_samples(q)} for q in (leader, standby)}
        assert exported[leader.instance]["gpuaware_quota_leading"] == 1.0
        assert exported[standby.instance]["gpuaware_quota_leading"] == 0.0
        assert exported[standby.instance]["gpuaware_quota_admissions_relayed"] == standby.relayed
        assert exported[leader.instance]["gpuaware_quota_admissions_answered"] == 6


async def test_takeover_rebuilds_from_the_stream_nothing_doubled(world: World, nats_proc: Any, cluster: str,
                                                                 fresh_database_url: str, tmp_path: Path) -> None:
    w = world
    path = tree(tmp_path)
    async with contextlib.AsyncExitStack() as stack:
        a_ctx = quota(nats_proc.url, fresh_database_url, cluster, tree=path, instance_id="q1")
        a = await a_ctx.__aenter__()
        a_running = True
        try:
            b = await stack.enter_async_context(quota(nats_proc.url, fresh_database_url, cluster, tree=path,
                                                      instance_id="q2"))
            assert await leader_of(a, b) is a
            for i in range(3):
                assert (await w.admit(pending(cluster, f"p{i}", "a1"), node="n1")).admitted
                await w.bound(f"p{i}", "a1", "n1", 1, T0 + i)
            await eventually(lambda: len(w.reports) >= 2, what="usage reports from the leader")
            await eventually(lambda: len(b.view.ledger.running) == 3, what="the standby following the binder")
            await a_ctx.__aexit__(None, None, None)  # the leader stops: it hands the lease over
            a_running = False
            await eventually(lambda: b.leading, timeout=30.0, what="the standby taking over")
            kv = await w.nc.jetstream().key_value(QUOTA_LEASE_BUCKET)
            assert (await kv.get(cluster)).value == b"q2"
            again = await w.admit(pending(cluster, "p0", "a1"), node="n1")
            assert (again.admitted, again.reason) == (True, "already admitted")
            fourth = await w.admit(pending(cluster, "p3", "a1"), node="n1")
            fifth = await w.admit(pending(cluster, "p4", "a1"), node="n1")
            assert fourth.admitted and not fifth.admitted, (fourth.reason, fifth.reason)
            assert fourth.source == fifth.source == b.source and b.takeovers == 1
            await eventually(lambda: w.reports[-1].source == b.source, what="usage reports from the new leader")
        finally:
            if a_running:
                await a_ctx.__aexit__(None, None, None)
    sources = [r.source for r in w.reports]
    switch = sources.index(b.source)
    assert set(sources[:switch]) == {a.source} and set(sources[switch:]) == {b.source}, sources
    assert len({r.as_of for r in w.reports}) == len(w.reports), "one report per interval, never two"


async def test_a_lease_lost_without_handover_holds_requests_for_the_next_leader(
        world: World, nats_proc: Any, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    w = world
    path = tree(tmp_path)
    patient = {"tree": path, "leader_wait_s": 60.0}  # a takeover on a loaded machine may be slow
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(quota(nats_proc.url, fresh_database_url, cluster, instance_id="q1",
                                                  **patient))
        b = await stack.enter_async_context(quota(nats_proc.url, fresh_database_url, cluster, instance_id="q2",
                                                  **patient))
        assert await leader_of(a, b) is a
        assert (await w.admit(pending(cluster, "p0", "a1", gpus=3), node="n1")).admitted
        await w.bound("p0", "a1", "n1", 3, T0)
        await eventually(lambda: len(b.view.ledger.running) == 1, what="the standby following the binder")
        assert a.lease is not None
        await a.lease.stop(release=False)  # as if frozen: the key stays until it expires
        assert not a.leading and not b.leading
        # asked while nobody leads: held, then answered by the new leader from the stream's state
        replies = [await bus.request(w.nc, QUOTA_ADMIT, request(cluster, pending(cluster, f"p{i}", "a1")), AdmitReply,
                                     timeout=60.0) for i in (1, 2)]
        assert b.leading and b.takeovers == 1
        assert [(r.admitted, r.source) for r in replies] == [(True, b.source), (False, b.source)], replies
        assert a.answered == 1 and b.answered == 2
