"""Pending -> decision over a real nats-server: slices, never-fits, commit/rollback, dedupe, gangs,
explanations."""

from __future__ import annotations

import msgspec
from placement_service_helpers import World, pending, placement

from gpuaware import bus
from gpuaware.schemas.deadletter import HEADER_REASON
from gpuaware.schemas.placement import PLACEMENT_EXPLAIN, ExplainReply, ExplainRequest


async def test_pending_pod_gets_a_decision_with_valid_slices(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1", "n2"])
    async with placement(nats_proc.url, cluster) as svc:
        await world.pend(pending(cluster, "whole", num_gpu=2))
        await world.pend(pending(cluster, "share", gpu_milli=300, gpu_memory_mib=4096))
        await world.wait(lambda: len(world.decisions) == 2, what="two decisions")
        whole, share = world.decision_for("whole"), world.decision_for("share")
        assert whole is not None and share is not None
        # 2 whole GPUs on one node, each a distinct GPU of that node with all of its memory
        assert whole.decision_id == "whole/0" and len(whole.slices) == 2
        assert {s.gpu_milli for s in whole.slices} == {1000}
        assert all(s.gpu_uuid.startswith(f"GPU-{whole.node}-") for s in whole.slices)
        assert {s.memory_mib for s in whole.slices} == {81920}
        # a 300-milli share: one GPU, the memory asked
        assert len(share.slices) == 1 and share.slices[0].gpu_milli == 300 and share.slices[0].memory_mib == 4096
        assert whole.cpu_milli == 4000 and whole.policy == svc.settings.policy_name and 0 <= whole.score <= 100
        svc.state.ledger.check()


async def test_never_fits_is_unschedulable_with_a_reason_and_not_retried(world: World, nats_proc,
                                                                        cluster: str) -> None:
    await world.nodes(["n1"], model="T4", gpus=2)
    async with placement(nats_proc.url, cluster) as svc:
        # 16 GPUs on 2-GPU nodes, and an A100 on a T4 cluster: neither can ever fit
        await world.pend(pending(cluster, "huge", num_gpu=16))
        await world.pend(pending(cluster, "typed", gpu_types=("A100-80GB",)))
        await world.wait(lambda: len(world.unschedulable) == 2, what="two verdicts")
        huge, typed = world.unschedulable_for("huge")[0], world.unschedulable_for("typed")[0]
        assert huge.reason == "too_few_gpus" and "0/1 nodes available" in huge.message
        assert typed.reason == "no_matching_gpu_type"
        assert typed.node_classes[0].node_class == "2xT4/nvlink"
        assert typed.node_classes[0].rejected == {"no_matching_gpu_type": 1}
        assert typed.pod is not None and typed.pod.pod_uid == "typed"
        # freeing capacity does not retry them into a loop: the retry pass over parked pods skips both
        outcomes, _more = svc.state.retry()
        assert outcomes == [] and len(world.unschedulable) == 2 and not world.decisions
        assert svc.state.ledger.pods["huge"].phase == "unresolvable"


async def test_bound_commits_and_bind_failed_rolls_back(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1"], gpus=2)
    async with placement(nats_proc.url, cluster) as svc:
        await world.pend(pending(cluster, "a", num_gpu=2))
        await world.wait(lambda: world.decision_for("a") is not None, what="decision a")
        a = world.decision_for("a")
        assert a is not None
        # the node is full: b waits with a reason
        await world.pend(pending(cluster, "b", num_gpu=2))
        await world.wait(lambda: world.unschedulable_for("b"), what="b unschedulable")
        assert world.unschedulable_for("b")[0].reason == "insufficient_gpu"
        await world.bound(a)
        await world.wait(lambda: svc.state.ledger.pods["a"].phase == "bound", what="a committed")
        assert svc.state.ledger.cluster.used_gpu_milli == 2000
        # the binder could not bind c's decision: the reservation is given back -> b fits again
        await world.finished(a)
        await world.wait(lambda: world.decision_for("b") is not None, what="b decided after a finished")
        b = world.decision_for("b")
        assert b is not None
        await world.bind_failed(b)
        await world.wait(lambda: "b" not in svc.state.ledger.pods, what="b rolled back")
        assert svc.state.ledger.cluster.used_gpu_milli == 0  # capacity visible again
        # a late echo of b's decision (the attempt is closed) does not reserve again
        svc.state.apply_decided(b)
        assert svc.state.ledger.cluster.used_gpu_milli == 0
        # the binder re-queues b as attempt 1: decided again, new id
        await world.pend(pending(cluster, "b", num_gpu=2, attempt=1))
        await world.wait(lambda: any(d.decision_id == "b/1" for d in world.decisions), what="b/1")
        svc.state.ledger.check()


async def test_redelivered_pending_gives_one_decision(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1"])
    async with placement(nats_proc.url, cluster) as svc:
        p = pending(cluster, "dup", gpu_milli=500)
        await world.pend(p)
        await world.pend(p, msg_id="another-id")  # same pod, stored twice (a binder retry with a new id)
        # pending pods are decided in stream order: once a later pod is decided, the copy was handled
        await world.pend(pending(cluster, "later", gpu_milli=250))
        await world.wait(lambda: world.decision_for("later") is not None, what="the later pod's decision")
        stored = [d for d in await world.stored_decisions() if d.pod_uid == "dup"]
        assert len(stored) == 1 and stored[0].decision_id == "dup/0"
        assert svc.state.counters.duplicates >= 1
        # events about a pod placement never decided are ignored
        ghost = msgspec.structs.replace(stored[0], pod_uid="ghost", decision_id="ghost/0")
        await world.bind_failed(ghost)
        await world.finished(ghost)
        # the binder's events are applied in stream order: once the later pod's binding is, so are both
        later = world.decision_for("later")
        assert later is not None
        await world.bound(later)
        await world.wait(lambda: svc.state.ledger.pods["later"].phase == "bound", what="the later pod bound")
        assert svc.state.ledger.cluster.used_gpu_milli == 750
        svc.state.ledger.check()


async def test_gang_is_all_or_nothing(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1", "n2"], gpus=4)
    async with placement(nats_proc.url, cluster) as svc:
        # gang g1: 3 members of 4 GPUs on two 4-GPU nodes: only 2 fit -> none is placed
        for i in range(3):
            await world.pend(pending(cluster, f"g1-{i}", num_gpu=4, gang_id="g1", gang_min_members=3))
        await world.wait(lambda: len(world.unschedulable) >= 5, what="gang g1 verdicts")
        assert not world.decisions and svc.state.ledger.cluster.used_gpu_milli == 0
        # the first two are held for their gang; once complete, the gang does not fit: all three parked
        first = [u.reason for u in world.unschedulable_for("g1-0")]
        assert first == ["gang_incomplete", "insufficient_gpu"]
        assert [u.reason for u in world.unschedulable_for("g1-2")] == ["insufficient_gpu"]
        assert {svc.state.ledger.pods[f"g1-{i}"].phase for i in range(3)} == {"parked"}
        # gang g2: 2 members of 2 GPUs, held until both arrived, then both placed
        await world.pend(pending(cluster, "g2-0", num_gpu=2, gang_id="g2", gang_min_members=2))
        await world.wait(lambda: world.unschedulable_for("g2-0"), what="g2-0 held")
        assert world.unschedulable_for("g2-0")[0].reason == "gang_incomplete" and not world.decisions
        await world.pend(pending(cluster, "g2-1", num_gpu=2, gang_id="g2", gang_min_members=2))
        await world.wait(lambda: len(world.decisions) == 2, what="g2 placed")
        assert {d.pod_uid for d in world.decisions} == {"g2-0", "g2-1"}
        assert all(d.gang_id == "g2" for d in world.decisions)
        svc.state.ledger.check()


async def test_explain_answers_per_node_class(world: World, nats_proc, cluster: str) -> None:
    await world.nodes([f"a{i}" for i in range(3)], model="T4", gpus=2)
    await world.nodes([f"b{i}" for i in range(2)], model="V100", gpus=4, islands=False)
    async with placement(nats_proc.url, cluster):
        # 24 GiB per GPU: the T4s (15 GiB) are too small, the V100s (32 GiB) are busy
        await world.pend(pending(cluster, "fill0", num_gpu=4))
        await world.pend(pending(cluster, "fill1", num_gpu=4))
        await world.wait(lambda: len(world.decisions) == 2, what="V100s full")
        await world.pend(pending(cluster, "p", gpu_memory_mib=24 * 1024))
        await world.wait(lambda: world.unschedulable_for("p"), what="p pending")
        assert world.unschedulable_for("p")[0].reason == "insufficient_gpu"
        explained = []

        async def on_explained(msg) -> None:
            explained.append(msg)

        sub = await world.nc.subscribe("placement.pod.explained.v1", cb=on_explained)
        reply = await bus.request(world.nc, PLACEMENT_EXPLAIN, ExplainRequest(
            source="test", emitted_at=0.0, cluster=cluster, pod_uid="p"), ExplainReply)
        why = reply.explanation
        assert not why.schedulable
        classes = {c.node_class: c for c in why.node_classes}
        assert classes["2xT4/nvlink"].rejected == {"insufficient_gpu_memory": 3}
        assert classes["4xV100"].rejected == {"insufficient_gpu": 2}
        assert why.summary == "0/5 nodes available: 3 insufficient_gpu_memory, 2 insufficient_gpu"
        # a hypothetical pod, answered without deciding
        reply = await bus.request(world.nc, PLACEMENT_EXPLAIN, ExplainRequest(
            source="test", emitted_at=0.0, cluster=cluster, pod=pending(cluster, "q", num_gpu=1)), ExplainReply)
        assert reply.explanation.schedulable and reply.explanation.best_node.startswith("a")
        await world.wait(lambda: len(explained) == 2, what="explanations published")
        await sub.unsubscribe()
        # an unknown pod is a 404, not a crash
        try:
            await bus.request(world.nc, PLACEMENT_EXPLAIN, ExplainRequest(
                source="test", emitted_at=0.0, cluster=cluster, pod_uid="nobody"), ExplainReply)
        except bus.ServiceError as exc:
            assert exc.code == 404
        else:
            raise AssertionError("explaining an unknown pod must fail")


async def test_bad_input_is_dead_lettered_and_the_loop_goes_on(world: World, nats_proc, cluster: str) -> None:
    await world.nodes(["n1"])
    dead = []

    async def on_dead(msg) -> None:
        dead.append(msg)

    sub = await world.nc.subscribe("deadletter.binder.pod.pending.v1", cb=on_dead)
    async with placement(nats_proc.url, cluster):
        # garbage bytes, then a request the contract accepts but no GPU can mean (a MIG profile "weird")
        await world.js.publish("binder.pod.pending.v1", b"{not json", headers={"Nats-Msg-Id": "junk"})
        await world.pend(pending(cluster, "weird", mig_profile="weird"))
        await world.pend(pending(cluster, "fine"))
        await world.wait(lambda: world.decision_for("fine") is not None, what="the loop goes on")
        await world.wait(lambda: len(dead) == 2, what="two dead letters")
        reasons = sorted(m.headers[HEADER_REASON].split(":")[0] for m in dead)
        assert reasons == ["decode error", "permanent"]
        verdict = world.unschedulable_for("weird")
        assert verdict and verdict[0].reason == "invalid_request" and "MIG profile" in verdict[0].message
    await sub.unsubscribe()


async def test_quota_is_asked_when_a_quota_service_answers(world: World, nats_proc, cluster: str) -> None:
    from gpuaware.schemas.quota import QUOTA_ADMIT, AdmitReply, AdmitRequest

    await world.nodes(["n1"])
    asked: list[AdmitRequest] = []

    async def admit(req: AdmitRequest) -> AdmitReply:
        asked.append(req)
        ok = req.pod.queue != "poor"
        return AdmitReply(source="quota/test", emitted_at=0.0, cluster=req.cluster, pod_uid=req.pod.pod_uid,
                          admitted=ok, queue=req.pod.queue, reason="" if ok else "over_limit")

    quota = await bus.add_service(world.nc, "quota", "0.0.1", [bus.Endpoint(
        name="admit", subject=QUOTA_ADMIT, request_type=AdmitRequest, handler=admit)])
    try:
        async with placement(nats_proc.url, cluster):
            await world.pend(pending(cluster, "rich", queue="rich"))
            await world.pend(pending(cluster, "poor", queue="poor"))
            await world.wait(lambda: world.decision_for("rich") and world.unschedulable_for("poor"),
                             what="quota verdicts")
            assert world.decision_for("poor") is None
            refused = world.unschedulable_for("poor")[0]
            assert refused.reason == "quota_exceeded" and refused.message == "over_limit"
            assert {a.pod.pod_uid for a in asked} == {"rich", "poor"} and asked[0].node == "n1"
    finally:
        await quota.stop()


async def test_the_leaders_own_decisions_are_not_applied_again_when_they_echo(world: World, nats_proc,
                                                                               cluster: str) -> None:
    """Each decision is remembered before it is sent, so its echo (which often arrives before the
    stream's ack) is skipped without decoding or applying it again. Remembered at the ack, most
    echoes came first and were applied a second time (idempotently, but at a cost per decision)."""
    await world.nodes(["n1", "n2"])
    async with placement(nats_proc.url, cluster) as svc:
        for i in range(12):
            await world.pend(pending(cluster, f"p{i}", gpu_milli=250))
        await world.wait(lambda: len(world.decisions) == 12, what="twelve decisions")
        echoes = next(f for f in svc.followers if f.name == "placement-decisions")
        await world.wait(lambda: echoes.stats.get("skipped", 0) == 12, what="twelve echoes skipped")
        assert not svc._mine  # each id left with its echo
        svc.state.ledger.check()
