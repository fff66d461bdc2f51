"""quota.admit over real NATS: admit, queue with the reason, admit with a reclaim plan, and the usage
report with Jain's index."""

from __future__ import annotations

from pathlib import Path

from quota_service_helpers import T0, World, pending, quota
from service_runner import eventually

TREE = """
default_queue: a1
capacity: {"*": {gpus: 8}}
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: team-a, parent: org, guaranteed: {"*": {gpus: 4}}}
  - {name: team-b, parent: org, guaranteed: {"*": {gpus: 4}}}
  - {name: a1, parent: team-a, limit: {"*": {gpus: 6}}}
  - {name: b1, parent: team-b}
partitions:
  - {name: clinical, nodes: [secure-1], queues: [team-b]}
"""


async def test_admit_queue_with_reason_and_reclaim(world: World, nats_proc, cluster: str, fresh_database_url: str,
                                                   tmp_path: Path) -> None:
    tree = tmp_path / "queues.yaml"
    tree.write_text(TREE)
    w = world
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)):
        # inside team-a's guarantee (4 of 4)
        r1 = await w.admit(pending(cluster, "p1", "a1", gpus=4), node="n1")
        assert (r1.admitted, r1.queue, r1.reason) == (True, "a1", "guaranteed")
        await w.bound("p1", "a1", "n1", 4, T0)
        # above it: borrowed from team-b's idle guarantee
        r2 = await w.admit(pending(cluster, "p2", "a1", gpus=2), node="n2")
        assert (r2.admitted, r2.reason) == (True, "borrowed")
        await w.bound("p2", "a1", "n2", 2, T0 + 10)
        # a1 holds 6 = its limit: queued with the reason
        r3 = await w.admit(pending(cluster, "p3", "a1", gpus=1), node="n2")
        assert not r3.admitted and r3.reason.startswith("over_limit: a1 would hold gpus[*] 7 > limit 6"), r3.reason
        # unknown queue, and a pod naming none (defaulted to a1, hence over its limit too)
        r4 = await w.admit(pending(cluster, "p4", "ghost"))
        assert not r4.admitted and r4.reason.startswith("queue_unknown")
        r5 = await w.admit(pending(cluster, "p5", "default"))
        assert r5.queue == "a1" and "defaulted" in r5.reason
        # a strict partition: team-a never on secure-1, even idle
        r6 = await w.admit(pending(cluster, "p6", "a1"), node="secure-1")
        assert not r6.admitted and r6.reason.startswith("partition")
        # team-b wants its guarantee back; 6 of 8 used, 4 asked: p2 (borrowed, 2 GPUs) is the reclaim plan
        r7 = await w.admit(pending(cluster, "p7", "b1", gpus=4), node=None)
        assert r7.admitted and [c.pod_uid for c in r7.would_reclaim] == ["p2"], r7
        assert r7.would_reclaim[0].frees.gpu_milli == 2000 and r7.would_reclaim[0].node == "n2"
        # a dry run reserves nothing: asked twice, same answer
        d1 = await w.admit(pending(cluster, "p8", "b1", gpus=2), node="n3", dry_run=True)
        d2 = await w.admit(pending(cluster, "p8", "b1", gpus=2), node="n3", dry_run=True)
        assert d1.admitted and d2.admitted and d1.reason == d2.reason
        # the usage report: a1 holds 6 GPUs; p7 reserved 4 for b1 -> both at or above entitlement
        await eventually(lambda: any(q.queue == "a1" and q.used.gpu_milli == 6000
                                     for r in w.reports for q in r.queues), what="a usage report")
        last = w.reports[-1]
        by = {q.queue: q for q in last.queues}
        assert by["team-a"].guaranteed.gpu_milli == 4000 and by["a1"].limit.gpu_milli == 6000
        assert last.reclaims == 1
        assert last.jain_index is not None and 0 < last.jain_index <= 1
