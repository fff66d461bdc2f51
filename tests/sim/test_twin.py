"""The digital twin holds the truth: binds are accepted or refused with a reason, departures free
their slices, time only moves forward and events come in order, evictions conserve work honestly,
checkpoint answers are deterministic, and nothing is ever over-allocated whatever it is told."""

from __future__ import annotations

import random

import pytest

from gpuaware.placement import NodeSpec
from gpuaware.sim.clock import AcceleratedClock, VirtualClock, speed_for
from gpuaware.sim.twin import (
    Arrived,
    CheckpointAnswered,
    Finished,
    Refusal,
    Refused,
    Slice,
    Twin,
    default_cluster,
    openb_cluster,
    openb_node_list,
)
from gpuaware.sim.workload_gen import SimPod

T0 = 1_767_225_600.0

NODES = (
    # n1: 2 x T4 (15360 MiB each, the GPU catalog), 16 cores, 64 GiB
    NodeSpec("n1", 16_000, 65_536, 2, "T4", numa_nodes=(0, 1)),
    # n2: 1 x A100 (81920 MiB)
    NodeSpec("n2", 64_000, 262_144, 1, "A100"),
)


def pod(uid: str, *, gpus: int = 1, milli: int = 1000, gmem: int = 0, cpu: int = 1000, mem: int = 1024,
        at: float = 0.0, dur: float | None = 100.0, ckpt: bool = False) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=at, duration_s=dur, cpu_milli=cpu, memory_mib=mem,
                  num_gpu=gpus, gpu_milli=milli, gpu_memory_mib=gmem, checkpointable=ckpt)


def twin_with(*pods: SimPod, fleet: bool = False) -> Twin:
    twin = Twin(NODES, pods, start=T0, seed=3, fleet=fleet)
    twin.advance(T0)  # everything arriving at 0 is pending now
    return twin


def gpu(twin: Twin, node: str, index: int) -> str:
    return twin.node_gpus[node][index].uuid


PODS = (
    pod("half", milli=500, gmem=4096), pod("half2", milli=500, gmem=4096), pod("whole"),
    pod("pair", gpus=2), pod("big-mem", milli=300, gmem=14_000), pod("cpu-hog", cpu=17_000),
    pod("ram-hog", mem=70_000), pod("late", at=50.0),
)


@pytest.mark.parametrize("before, uid, node, slices, reason", [
    # an empty GPU takes a half: 0 + 500 <= 1000
    ([], "half", "n1", [("n1", 0, 500, 4096)], None),
    # two halves share one GPU exactly: 500 + 500 = 1000
    ([("half", "n1", [("n1", 0, 500, 4096)])], "half2", "n1", [("n1", 0, 500, 4096)], None),
    # a whole GPU after a half: 500 + 1000 > 1000
    ([("half", "n1", [("n1", 0, 500, 4096)])], "whole", "n1", [("n1", 0, 1000, 0)], Refusal.GPU_OVER_ALLOCATED),
    # memory: 4096 + 14000 > 15360 although compute fits (500 + 300 <= 1000)
    ([("half", "n1", [("n1", 0, 500, 4096)])], "big-mem", "n1", [("n1", 0, 300, 14_000)],
     Refusal.GPU_MEMORY_OVER_ALLOCATED),
    # binding the same pod twice
    ([("whole", "n1", [("n1", 1, 1000, 0)])], "whole", "n1", [("n1", 0, 1000, 0)], Refusal.ALREADY_BOUND),
    # a pod that never existed, and one that has not arrived yet (arrives at +50 s)
    ([], "ghost", "n1", [("n1", 0, 1000, 0)], Refusal.UNKNOWN_POD),
    ([], "late", "n1", [("n1", 0, 1000, 0)], Refusal.UNKNOWN_POD),
    ([], "whole", "n9", [("n1", 0, 1000, 0)], Refusal.UNKNOWN_NODE),
    # a GPU of n2 named in a decision for n1
    ([], "whole", "n1", [("n2", 0, 1000, 0)], Refusal.GPU_NOT_ON_NODE),
    ([], "pair", "n1", [("n1", 0, 1000, 0)], Refusal.WRONG_GPU_COUNT),
    ([], "pair", "n1", [("n1", 0, 1000, 0), ("n1", 1, 1000, 0)], None),
    # the pod asks 500 milli and 4096 MiB, the slice gives 400
    ([], "half", "n1", [("n1", 0, 400, 4096)], Refusal.SLICE_TOO_SMALL),
    # CPU: 17000 > 16000 on n1; memory: 70000 > 65536 on n1
    ([], "cpu-hog", "n1", [("n1", 0, 1000, 0)], Refusal.CPU_OVER_ALLOCATED),
    ([], "ram-hog", "n1", [("n1", 0, 1000, 0)], Refusal.MEMORY_OVER_ALLOCATED),
])
def test_bind_is_accepted_or_refused_with_a_reason(before, uid, node, slices, reason) -> None:
    twin = twin_with(*PODS)
    for b_uid, b_node, b_slices in before:
        twin.bind(b_uid, b_node, [Slice(gpu(twin, n, i), m, mem, i) for n, i, m, mem in b_slices])
    used_before = {u: twin.gpu_used(u) for u in twin.gpus}
    generation = twin.generation
    want = [Slice(gpu(twin, n, i), m, mem, i) for n, i, m, mem in slices]
    if reason is None:
        binding = twin.bind(uid, node, want, decision_id="d-x")
        assert twin.state(uid) == "bound" and binding.decision_id == "d-x" and binding.bound_at == T0
        for s in want:
            assert twin.gpu_used(s.gpu_uuid)[0] == used_before[s.gpu_uuid][0] + s.gpu_milli
    else:
        with pytest.raises(Refused) as refused:
            twin.bind(uid, node, want, decision_id="d-x")
        assert refused.value.reason is reason and reason.value in str(refused.value)
        assert {u: twin.gpu_used(u) for u in twin.gpus} == used_before and twin.generation == generation
    twin.check()


@pytest.mark.parametrize("reason, transient", [
    (Refusal.GPU_OVER_ALLOCATED, True), (Refusal.UNKNOWN_NODE, True), (Refusal.WRONG_GPU_COUNT, True),
    (Refusal.UNKNOWN_POD, False), (Refusal.ALREADY_BOUND, False), (Refusal.POD_FINISHED, False),
])
def test_refusal_says_whether_deciding_again_can_help(reason: Refusal, transient: bool) -> None:
    assert reason.transient is transient


def test_departure_at_end_of_work_frees_the_slices() -> None:
    twin = twin_with(pod("a", dur=100.0), pod("b", dur=None))
    g = gpu(twin, "n1", 0)
    twin.advance(T0 + 10)
    twin.bind("a", "n1", [Slice(g, 1000, 15_000)])
    # bound at +10 with 100 s of work: departs at +110, not before
    assert twin.next_event_at() == T0 + 110
    assert twin.advance(T0 + 109.9) == []
    (done,) = twin.advance(T0 + 110)
    assert isinstance(done, Finished) and done.at == T0 + 110 and done.started_at == T0 + 10
    assert twin.gpu_used(g) == (0, 0) and twin.node_used("n1") == (0, 0) and twin.state("a") == "finished"
    twin.bind("b", "n1", [Slice(g, 1000, 15_000)])  # the freed GPU takes the next pod
    with pytest.raises(Refused) as refused:
        twin.bind("a", "n1", [Slice(gpu(twin, "n1", 1), 1000)])
    assert refused.value.reason is Refusal.POD_FINISHED
    twin.check()


def test_events_come_in_time_order_and_time_never_goes_back() -> None:
    twin = Twin(NODES, [pod("p3", at=30), pod("p1", at=10), pod("p2", at=10), pod("p0", at=0)], start=T0,
                fleet=False)
    assert twin.next_event_at() == T0
    events = twin.advance(T0 + 10)
    # ties at +10 break by uid
    assert [(e.pod.uid, e.at - T0) for e in events if isinstance(e, Arrived)] == [("p0", 0), ("p1", 10), ("p2", 10)]
    twin.bind("p0", "n2", [Slice(gpu(twin, "n2", 0), 1000)])  # at +10, departs at +110
    events = twin.advance(T0 + 200)
    assert [(type(e).__name__, e.at - T0) for e in events] == [("Arrived", 30), ("Finished", 110)]
    assert twin.now == T0 + 200 and twin.next_event_at() is None
    with pytest.raises(ValueError, match="backwards"):
        twin.advance(T0 + 199)


def test_clocks() -> None:
    clock = VirtualClock(T0)
    assert clock.advance(5) == T0 + 5 and clock() == T0 + 5
    with pytest.raises(ValueError):
        clock.advance_to(T0)
    wall = [100.0]
    fast = AcceleratedClock(speed=speed_for(86_400, 300), start=T0, wall=lambda: wall[0])
    assert fast.speed == 288.0
    wall[0] += 2.5  # 2.5 s of wall = 720 s of cluster time
    assert fast() == T0 + 720
    assert fast.wall_delay(T0 + 720 + 288) == pytest.approx(1.0)
    assert fast.skip_to(T0 + 1000) == pytest.approx(280) and fast() == pytest.approx(T0 + 1000)
    assert fast.skip_to(T0) == 0.0 and fast() == pytest.approx(T0 + 1000)  # skipping never goes back


@pytest.mark.parametrize("checkpointed, ckpt_pod, finish_at", [
    # 100 s of work, evicted after 30 s at +30, bound again at +40:
    # checkpointed -> 70 s left -> departs at +110
    (True, True, 110.0),
    # not checkpointed -> starts over: 100 s -> departs at +140 (30 s lost)
    (False, True, 140.0),
    # asked to checkpoint but the pod cannot: as if not checkpointed
    (True, False, 140.0),
])
def test_eviction_keeps_progress_only_when_checkpointed(checkpointed: bool, ckpt_pod: bool,
                                                        finish_at: float) -> None:
    twin = twin_with(pod("v", dur=100.0, ckpt=ckpt_pod))
    g = gpu(twin, "n2", 0)
    twin.bind("v", "n2", [Slice(g, 1000)])
    twin.advance(T0 + 30)
    ev = twin.evict("v", checkpointed=checkpointed)
    assert ev.checkpointed is (checkpointed and ckpt_pod) and ev.attempt == 1
    assert ev.lost_work_s == (0.0 if ev.checkpointed else 30.0)
    assert twin.state("v") == "pending" and twin.gpu_used(g) == (0, 0)
    assert twin.advance(T0 + 40) == []  # the departure planned for +100 was cancelled
    twin.bind("v", "n2", [Slice(g, 1000)])
    assert twin.next_event_at() == T0 + finish_at
    with pytest.raises(Refused) as refused:
        twin.evict("nobody")
    assert refused.value.reason is Refusal.UNKNOWN_POD


def test_checkpoint_answers_are_deterministic_and_asked_once() -> None:
    def ask(seed: int) -> tuple[float, list]:
        twin = Twin(NODES, [pod("c", ckpt=True, dur=None), pod("n", dur=None)], start=T0, seed=seed, fleet=False,
                    checkpoint_delay_s=(2.0, 20.0))
        twin.advance(T0)
        twin.bind("c", "n2", [Slice(gpu(twin, "n2", 0), 1000)])
        twin.bind("n", "n1", [Slice(gpu(twin, "n1", 0), 1000)])
        due = twin.request_checkpoint("c", "r-1")
        assert twin.request_checkpoint("c", "r-1") == due  # asked again while pending: same answer
        twin.request_checkpoint("n", "r-2")
        assert twin.checkpoints_in_flight == 2
        events = twin.advance(T0 + 60)
        return due, [(e.request_id, e.status, e.answer) for e in events if isinstance(e, CheckpointAnswered)]

    due, answers = ask(seed=1)
    assert T0 + 2 <= due <= T0 + 20
    # the non-checkpointable pod answers "unsupported" after at most 1 s, the other "completed"
    assert answers == [("r-2", "unsupported", 1), ("r-1", "completed", 1)]
    assert ask(seed=1)[0] == due and ask(seed=2)[0] != due


def test_no_over_allocation_whatever_it_is_told() -> None:
    nodes = default_cluster(6)
    pods = [pod(f"p{i}", gpus=random.Random(i).choice([1, 1, 2, 4]), milli=1000, cpu=2000, mem=4096, dur=50.0 + i)
            for i in range(60)]
    pods += [pod(f"f{i}", milli=random.Random(-i).choice([100, 250, 500, 700]), gmem=2048, cpu=500, dur=30.0 + i)
             for i in range(60)]
    twin = Twin(nodes, pods, start=T0, seed=1, fleet=False)
    rng = random.Random(7)
    uuids = list(twin.gpus)
    accepted = refused = 0
    t = T0
    for _ in range(800):
        t += rng.uniform(0, 3)
        twin.advance(t)
        pending = twin.pending()
        if not pending:
            continue
        p = rng.choice(pending)
        node = rng.choice(list(twin.nodes))
        on_node = [g.uuid for g in twin.node_gpus[node]]
        picks = rng.sample(on_node if rng.random() < 0.9 else uuids, min(p.num_gpu, len(on_node)))
        try:
            twin.bind(p.uid, node, [Slice(u, p.gpu_milli, p.gpu_memory_mib) for u in picks])
            accepted += 1
        except Refused:
            refused += 1
        if rng.random() < 0.05 and twin.bindings():
            twin.evict(rng.choice(twin.bindings()).pod.uid, checkpointed=rng.random() < 0.5)
        twin.check()
    assert accepted > 50 and refused > 50  # both paths were exercised


def test_the_fleet_mirrors_the_bindings_and_names_the_same_gpus() -> None:
    twin = Twin(default_cluster(6), [pod("a", milli=500, gmem=4096, dur=10.0)], start=T0, seed=2)
    assert twin.fleet is not None
    twin.advance(T0)
    node = "twin-h100-000"
    inventory = twin.fleet.inventory(node)
    assert [(g.uuid, g.nvlink_island, g.numa_node) for g in inventory.gpus] == [
        (g.uuid, g.nvlink_island, g.numa_node) for g in twin.node_gpus[node]]
    assert {g.nvlink_island for g in twin.node_gpus[node]} == {f"{node}/nvl0"}
    g0 = twin.node_gpus[node][0].uuid
    twin.bind("a", node, [Slice(g0, 500, 4096)])
    assert [(p.name, p.milli) for p in twin.fleet.assignments(node)[g0]] == [("a", 500)]
    twin.advance(T0 + 10)
    assert twin.fleet.assignments(node)[g0] == ()


def test_default_cluster_is_heterogeneous_and_deterministic() -> None:
    nodes = default_cluster(16)
    assert nodes == default_cluster(16)
    kinds = {}
    for n in nodes:
        kinds[dict(n.labels)["gpuaware.io/node-kind"]] = kinds.get(dict(n.labels)["gpuaware.io/node-kind"], 0) + 1
    # 16 nodes by weights 2:3:2:2:3:2, one of each first: 3 h100, 3 a100, 3 a100pcie, 2 v100, 3 t4, 2 l4
    assert kinds == {"h100": 3, "a100": 3, "a100pcie": 3, "v100": 2, "t4": 3, "l4": 2}
    assert sum(n.num_gpu for n in nodes) == 3 * 8 + 3 * 8 + 3 * 4 + 2 * 8 + 3 * 4 + 2 * 8
    by_kind = {dict(n.labels)["gpuaware.io/node-kind"]: n for n in nodes}
    assert by_kind["a100pcie"].nvlink_islands == (0, 0, 1, 1)  # NVLink bridges in pairs
    assert by_kind["v100"].nvlink_islands == (0, 0, 0, 0, 1, 1, 1, 1)
    assert by_kind["t4"].nvlink_islands == (-1,) * 4 and by_kind["t4"].numa_nodes == (0, 0, 1, 1)
    twin = Twin(default_cluster(6), start=T0, fleet=False)
    assert {g.nvlink_island for g in twin.node_gpus["twin-a100pcie-000"]} == {
        "twin-a100pcie-000/nvl0", "twin-a100pcie-000/nvl1"}
    assert all(g.nvlink_island is None for g in twin.node_gpus["twin-t4-000"])


def test_openb_cluster_has_1213_nodes_and_6212_gpus(shared_data) -> None:
    nodes = openb_cluster(openb_node_list(shared_data))
    assert len(nodes) == 1213 and sum(n.num_gpu for n in nodes) == 6212
    twin = Twin(nodes, start=T0)
    assert len(twin.gpus) == 6212 and twin.fleet is not None and twin.fleet.n_gpus == 6212
