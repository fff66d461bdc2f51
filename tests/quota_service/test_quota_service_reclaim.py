"""Placement executes quota's reclaim plans, over real NATS: the real placement and quota services in
this process, the binder's events published as the binder publishes them.

A borrowing queue (b1) fills the cluster's 8 GPUs, 4 of them lent from team-a's idle guarantee. The
owner's pod arrives; no node has room and it has no priority to preempt with, so placement asks
quota, quota answers with a reclaim plan, and placement publishes a decision whose planned
preemptions are exactly quota's victims (reason ``reclaim``, checkpoint first for the checkpointable
one). The binder preempts and binds; a second owner pod arriving while the first victim is still
being evicted never gets its GPUs (no double booking); a redelivered pending pod decides nothing new.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from quota_service_helpers import (
    BOUND,
    INVENTORY,
    PENDING,
    PREEMPTED,
    RECLAIM_TREE,
    Watch,
    World,
    inventory,
    pending,
    placement,
    quota,
)
from service_runner import eventually

from gpuaware import bus
from gpuaware.schemas import (
    PlacementDecided,
    PodBound,
    PodPreempted,
)


async def bind(w: World, d: PlacementDecided) -> None:
    """What the binder publishes once it bound a decision."""
    ev = PodBound(source="binder/test", emitted_at=time.time(), cluster=d.cluster, pod_uid=d.pod_uid,
                  pod_name=d.pod_name, namespace=d.namespace, node=d.node, slices=d.slices, bound_at=time.time(),
                  queue=d.queue, decision_id=d.decision_id)
    await bus.publish(w.js, BOUND.at(d.cluster, d.node), ev)


async def preempt(w: World, cluster: str, uid: str, node: str, decision_id: str) -> None:
    ev = PodPreempted(source="binder/test", emitted_at=time.time(), cluster=cluster, pod_uid=uid, pod_name=uid,
                      namespace="ns", node=node, reason="reclaim", preempted_at=time.time(), decision_id=decision_id)
    await bus.publish(w.js, PREEMPTED.at(cluster, node), ev)


def gpus_of(d: PlacementDecided) -> set[tuple[str, str]]:
    return {(d.node, s.gpu_uuid) for s in d.slices}


async def two_nodes(w: World, cluster: str, tmp_path: Path) -> tuple[Path, Watch]:
    """The reclaim queue tree on disk, nodes n1 and n2 announced, and a watch on the cluster's decisions."""
    tree = tmp_path / "queues.yaml"
    tree.write_text(RECLAIM_TREE)
    for node in ("n1", "n2"):
        await bus.publish(w.js, INVENTORY.at(cluster, node), inventory(cluster, node))
    return tree, await Watch(cluster).start(w)


async def place_and_bind(w: World, watch: Watch, cluster: str, borrowers: dict[str, bool]) -> None:
    """Each borrower (uid -> checkpointable) pending in queue b1 with 2 GPUs, decided and bound, in turn."""
    for uid, ckpt in borrowers.items():
        await bus.publish(w.js, PENDING, pending(cluster, uid, "b1", gpus=2, cpu_milli=1000, memory_mib=4096,
                                                 checkpointable=ckpt))
        await eventually(lambda uid=uid: watch.of(uid), what=f"a decision for {uid}")
        await bind(w, watch.of(uid)[0])


async def owner_parks(w: World, watch: Watch, cluster: str) -> None:
    """The owner's pod a-1 (queue a1, 2 GPUs) arrives on a full cluster: placement parks it."""
    await bus.publish(w.js, PENDING, pending(cluster, "a-1", "a1", gpus=2, cpu_milli=1000, memory_mib=4096))
    await eventually(lambda: any(u.pod_uid == "a-1" for u in watch.unschedulable), what="the owner parked")


def bound_in(service: Any, uids: Iterable[str]) -> bool:
    """Whether placement's ledger holds every one of ``uids`` as bound."""
    return all(service.state.ledger.pods[u].phase.value == "bound" for u in uids)


async def test_owner_gets_its_lent_guarantee_back(world: World, nats_proc, cluster: str, fresh_database_url: str,
                                                  tmp_path: Path) -> None:
    w = world
    tree, watch = await two_nodes(w, cluster, tmp_path)
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)) as q, \
            placement(nats_proc.url, cluster, preemption_cooldown_s=0.0) as p:
        # b1 fills the cluster: 4 pods of 2 GPUs (4 GPUs its guarantee, 4 borrowed from team-a)
        borrowers = {"b-1": False, "b-2": False, "b-3": True, "b-4": False}  # uid -> checkpointable
        await place_and_bind(w, watch, cluster, borrowers)
        held = {uid: watch.of(uid)[0] for uid in borrowers}
        assert all(not d.preemptions for d in held.values())
        await eventually(lambda: bound_in(p, borrowers) and len(q.view.ledger.running) == 4,
                         what="the borrowers bound in placement and quota")

        # the owner's pod: no room, priority 0 (no preemption of its own); quota reclaims for it
        await bus.publish(w.js, PENDING, pending(cluster, "a-1", "a1", gpus=2, cpu_milli=1000, memory_mib=4096))
        await eventually(lambda: watch.of("a-1"), what="a decision for the owner's pod")
        d1 = watch.of("a-1")[0]
        assert [(v.pod_uid, v.reason) for v in d1.preemptions] == [("b-3", "reclaim")], d1.preemptions
        assert d1.preemptions[0].checkpoint_first  # checkpointable: the binder's handshake runs first
        assert d1.preemptions[0].node == held["b-3"].node == d1.node
        assert gpus_of(d1) == gpus_of(held["b-3"])  # exactly the GPUs the victim gives back
        assert q.view.counts["reclaim_plans"] >= 1 and p.quota.reclaims == 1
        assert "a-1" in q.view.ledger.running  # the decision's own admit reserved it in quota
        assert not [u for u in watch.unschedulable if u.pod_uid == "a-1" and u.reason == "quota_exceeded"]

        # a second owner pod while b-3 is still being evicted: another borrower is reclaimed for it,
        # never b-3's GPUs again
        await bus.publish(w.js, PENDING, pending(cluster, "a-2", "a1", gpus=2, cpu_milli=1000, memory_mib=4096))
        await eventually(lambda: watch.of("a-2"), what="a decision for the second owner pod")
        d2 = watch.of("a-2")[0]
        victims2 = [v.pod_uid for v in d2.preemptions]
        assert len(victims2) == 1 and victims2[0] in {"b-1", "b-2", "b-4"}, victims2
        assert all(v.reason == "reclaim" for v in d2.preemptions)
        assert not gpus_of(d2) & gpus_of(d1)
        assert gpus_of(d2) == gpus_of(held[victims2[0]])

        # the binder executes both plans: victims preempted, owners bound
        await preempt(w, cluster, "b-3", d1.node, d1.decision_id)
        await bind(w, d1)
        await preempt(w, cluster, victims2[0], d2.node, d2.decision_id)
        await bind(w, d2)
        await eventually(lambda: all(p.state.ledger.pods[u].phase.value == "bound" for u in ("a-1", "a-2")),
                         what="the owners bound in placement's view")
        await eventually(lambda: "b-3" not in q.view.ledger.running and victims2[0] not in q.view.ledger.running,
                         what="quota saw the victims go")

        # idempotent: the owner's pending pod redelivered decides nothing new
        before = len(watch.decided)
        await bus.publish(w.js, PENDING, pending(cluster, "a-1", "a1", gpus=2, cpu_milli=1000, memory_mib=4096),
                          msg_id=f"{cluster}/a-1/0/again")
        await bus.publish(w.js, PENDING, pending(cluster, "probe", "b1", gpus=1, cpu_milli=1000, memory_mib=4096))
        await eventually(lambda: any(u.pod_uid == "probe" for u in watch.unschedulable) or watch.of("probe"),
                         what="the probe's verdict (the redelivery was handled before it)")
        assert len(watch.of("a-1")) == 1 and len(watch.decided) - before == len(watch.of("probe"))
        # team-a holds its guarantee (4), b1 its own (4): the probe asks above b1's guarantee with the
        # cluster full, so quota has nothing to reclaim for it and it waits
        assert not watch.of("probe")


async def test_a_new_leader_asks_quota_about_the_pods_left_parked(world: World, nats_proc, cluster: str,
                                                                  fresh_database_url: str, tmp_path: Path) -> None:
    """The owner's pod arrived while quota was down (nobody answered: parked for lack of room, no plan).
    Quota comes back; the next placement leader asks about the parked pod and executes the plan."""
    w = world
    tree, watch = await two_nodes(w, cluster, tmp_path)
    borrowers = ("b-1", "b-2", "b-3", "b-4")
    async with placement(nats_proc.url, cluster, instance_id="p1") as p1:
        async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)):
            await place_and_bind(w, watch, cluster, dict.fromkeys(borrowers, False))
            await eventually(lambda: bound_in(p1, borrowers), what="the borrowers bound")
        # quota is gone: the owner's pod finds no room and nobody to ask
        await owner_parks(w, watch, cluster)
        assert not watch.of("a-1") and p1.quota.reclaims == 0
    async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)) as q:
        await eventually(lambda: all(u in q.view.ledger.running for u in borrowers),
                         what="quota rebuilt the borrowers from the binder's events")
        async with placement(nats_proc.url, cluster, instance_id="p2") as p2:
            await eventually(lambda: watch.of("a-1"), what="the new leader's reclaim decision")
            (d,) = watch.of("a-1")
            assert len(d.preemptions) == 1 and d.preemptions[0].reason == "reclaim"
            assert d.preemptions[0].pod_uid in borrowers and p2.quota.reclaims == 1


async def test_a_pod_parked_while_quota_was_down_is_asked_about_once_quota_is_back(
        world: World, nats_proc, cluster: str, fresh_database_url: str, tmp_path: Path) -> None:
    """The same leader throughout: nobody answered when the owner's pod parked; once quota may be back
    (`quota_recheck_s`) placement asks about it and executes the plan."""
    w = world
    tree, watch = await two_nodes(w, cluster, tmp_path)
    borrowers = ("b-1", "b-2", "b-3", "b-4")
    async with placement(nats_proc.url, cluster, quota_recheck_s=0.5) as p:
        async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)):
            await place_and_bind(w, watch, cluster, dict.fromkeys(borrowers, False))
            await eventually(lambda: bound_in(p, borrowers), what="the borrowers bound")
        await owner_parks(w, watch, cluster)
        assert not watch.of("a-1") and "a-1" in p.quota.due
        async with quota(nats_proc.url, fresh_database_url, cluster, tree=str(tree)):
            await eventually(lambda: watch.of("a-1"), what="the reclaim decision once quota is back")
            (d,) = watch.of("a-1")
            assert [v.reason for v in d.preemptions] == ["reclaim"] and p.quota.reclaims == 1
