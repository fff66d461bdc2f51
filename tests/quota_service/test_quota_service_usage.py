"""The usage report weighs what each queue holds against its fair share of what every queue asks:
pods the binder announced as pending count as their queue's demand until they are bound or gone."""

from __future__ import annotations

from pathlib import Path

from quota_service_helpers import PENDING, RECLAIM_TREE, T0, World, pending, quota
from service_runner import eventually

from gpuaware import bus


async def test_pending_pods_are_demand_and_jain_sees_the_starved_queue(
        world: World, nats_proc, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "q.yaml"
    tree.write_text(RECLAIM_TREE)
    w = world
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)) as q:
        await w.bound("a-big", "a1", "n1", 8, T0)
        await bus.publish(w.js, PENDING, pending(cluster, "b-wait", "b1", gpus=4))
        await eventually(lambda: q.view.counts["pending"] == 1 and q.view.counts["bound"] == 1, what="the events")
        r = await q.report()
        by = {u.queue: u for u in r.queues}
        # asked: a1 8 (holds), b1 4 (waits) on 8 GPUs -> fair shares 4 / 4 (guarantees first);
        # a1 holds 8 -> min(1, 8/4) = 1, b1 holds 0 -> 0: Jain (1 + 0)^2 / (2 * 1) = 0.5
        assert by["b1"].pending_pods == 1 and by["team-b"].pending_pods == 1
        assert by["a1"].fair_share.gpu_milli == 4000 and by["b1"].fair_share.gpu_milli == 4000
        assert r.jain_index == 0.5
        # b's pod bound (a's pod stopped): no demand left waiting, both served -> 1.0
        await w.finished("a-big", "n1", T0 + 60, T0)
        await w.bound("b-wait", "b1", "n2", 4, T0 + 61)
        await eventually(lambda: q.view.counts["bound"] == 2, what="the bind")
        r2 = await q.report()
        assert {u.queue: u.pending_pods for u in r2.queues}["b1"] == 0
        assert r2.jain_index is None  # one queue asks: nothing to compare
