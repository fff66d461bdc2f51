"""The pure parts the service is built on: the score cache, the ledger's event algebra, explanations,
gangs, and the wire <-> engine conversion. No server needed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from placement_service_helpers import inventory, pending

from gpuaware.placement import (
    DEFAULT_PROFILE,
    OURS,
    Cluster,
    Decision,
    NodeSpec,
    PodRequest,
    TypicalPods,
    policy,
)
from gpuaware.placement.cache import CachedScheduler
from gpuaware.placement.explain import explain
from gpuaware.placement.ledger import Ledger, Phase
from gpuaware.placement.session import Framework, Placed, Session, Waiting
from gpuaware.schemas.pods import GpuCapabilities
from gpuaware.services.placement import convert


def _cluster() -> list[NodeSpec]:
    rng = np.random.default_rng(3)
    kinds = [("G2", 8, 96_000), ("T4", 2, 104_000), ("V100M32", 8, 96_000), ("P100", 2, 64_000)]
    return [NodeSpec(f"n{i:03d}", *(lambda k: (k[2], 393_216, k[1], k[0]))(kinds[int(rng.integers(4))]))
            for i in range(120)]


def _pods(n: int) -> list[PodRequest]:
    rng = np.random.default_rng(5)
    shares = (1000, 1000, 500, 250, 320, 810)
    out = []
    for i in range(n):
        k = int(rng.integers(10))
        if k < 7:
            out.append(PodRequest(f"p{i}", int(rng.choice([2000, 4000, 8000])), 1024, 1, int(rng.choice(shares))))
        elif k < 9:
            out.append(PodRequest(f"p{i}", 16000, 1024, 2, 1000, gpu_types=("G2", "V100M32") if k == 8 else ()))
        else:
            out.append(PodRequest(f"p{i}", 4000, 1024))
    return out


@pytest.mark.parametrize("name", [OURS, DEFAULT_PROFILE, "FGD", "DotProd", "BestFit"])
def test_cached_scheduler_decides_exactly_like_the_scheduler(name: str) -> None:
    nodes, pods = _cluster(), _pods(1500)
    typical = TypicalPods.from_requests(pods)
    results = []
    for wrap in (False, True):
        cluster = Cluster(nodes)
        sched = policy(name, typical=typical, tie_rank=np.random.default_rng(1).permutation(len(nodes)))
        s = CachedScheduler(sched) if wrap else sched
        out, live = [], []
        for i, pod in enumerate(pods):
            r = s.schedule(pod, cluster.snapshot())
            if isinstance(r, Decision):
                cluster.reserve(pod, r.node, r.gpus)
                live.append(pod.name)
                out.append((r.node, r.gpus, r.score, r.feasible))
            else:
                out.append(r.code)
            if i % 3 == 0 and len(live) > 40:  # departures, so nodes change back and forth
                cluster.unreserve(live.pop(0))
        results.append(out)
        if wrap:
            assert s.cacheable == (name != "BestFit")  # BestFit normalises across nodes: passed through
    assert results[0] == results[1]


# each row: events applied in order -> (phase of "x" or None, GPU milli held in the cluster)
E = {"queue": ("queue", 0), "decide0": ("decide", 0), "bound0": ("bound", 0), "failed0": ("failed", 0),
     "finished": ("finished", 0), "queue1": ("queue", 1), "decide1": ("decide", 1)}


@pytest.mark.parametrize("events, phase, used", [
    (["queue", "decide0"], Phase.DECIDED, 1000),                       # reserve on decide
    (["queue", "decide0", "bound0"], Phase.BOUND, 1000),               # commit on bound
    (["queue", "decide0", "failed0"], None, 0),                        # roll back on bind_failed
    (["queue", "decide0", "failed0", "decide0"], None, 0),             # a late echo stays ignored
    (["queue", "decide0", "bound0", "finished", "bound0"], None, 0),   # replayed binding after finish
    (["bound0", "decide0"], Phase.BOUND, 1000),                        # cross-stream order: bound first
    (["queue", "decide0", "failed0", "queue1", "decide1"], Phase.DECIDED, 1000),  # the binder re-queued it
    (["queue", "decide0", "decide0", "decide0"], Phase.DECIDED, 1000),  # duplicates
    (["finished", "queue"], None, 0),                                  # a pod that left is not re-opened
])
def test_ledger_applies_events_idempotently_in_any_order(events: list[str], phase: Phase | None,
                                                        used: int) -> None:
    ledger = Ledger([NodeSpec("n", 8000, 8000, 2, "A100")])
    req = PodRequest("x", 100, 100, 1, 1000)
    for name in events:
        op, attempt = E[name]
        if op == "queue":
            ledger.queue("x", attempt, req)
        elif op == "decide":
            ledger.decide("x", attempt, f"x/{attempt}", "n", (0,), req)
        elif op == "bound":
            ledger.bound("x", attempt, "n", (0,), req, f"x/{attempt}")
        elif op == "failed":
            ledger.rollback("x", f"x/{attempt}", attempt)
        elif op == "finished":
            ledger.release("x", 0)
    entry = ledger.pods.get("x")
    assert (entry.phase if entry else None) == phase
    assert ledger.cluster.used_gpu_milli == used
    ledger.check()


def test_ledger_keeps_pods_on_unknown_nodes_until_the_node_appears() -> None:
    ledger = Ledger([NodeSpec("a", 8000, 8000, 2, "A100")])
    ledger.bound("x", 0, "b", (1,), PodRequest("x", 100, 100, 1, 1000))
    assert ledger.pods["x"].phase == Phase.BOUND and not ledger.pods["x"].placed
    assert ledger.cluster.used_gpu_milli == 0
    unplaced = ledger.set_nodes([NodeSpec("a", 8000, 8000, 2, "A100"), NodeSpec("b", 8000, 8000, 2, "A100")])
    assert not unplaced and ledger.pods["x"].placed and ledger.cluster.used_gpu_milli == 1000
    ledger.check()


def test_a_gpu_whose_last_pod_left_forgets_its_forecast_and_refuses_older_ones() -> None:
    now = [100.0]
    ledger = Ledger([NodeSpec("n", 8000, 8000, 2, "A100")], clock=lambda: now[0])
    half = PodRequest("a", 100, 100, 1, 500)
    ledger.bound("a", 0, "n", (0,), half, "a/0")
    ledger.bound("b", 0, "n", (0,), replace(half, name="b"), "b/0")
    ledger.bound("w", 0, "n", (1,), PodRequest("w", 100, 100, 1, 1000), "w/0")
    for g in (0, 1):
        assert ledger.set_gpu_forecast("n", g, 0.9, issued_at=99.0)
    c = ledger.cluster
    ledger.release("a", 0)  # GPU 0 still runs b: its forecast stays (load that is still there)
    assert c.gpu_util_forecast[0, 0] == pytest.approx(0.9)
    now[0] = 110.0
    ledger.release("b", 0)
    ledger.release("w", 0)  # both GPUs empty now: nothing of their forecasts' load runs there
    assert np.isnan(c.gpu_util_forecast[0]).all() and "forecast" not in c.snapshot().signals
    assert not ledger.set_gpu_forecast("n", 0, 0.9, issued_at=105.0)  # made before the GPU emptied
    assert np.isnan(c.gpu_util_forecast[0, 0]) and ledger.stats.stale_forecasts == 1
    assert ledger.set_gpu_forecast("n", 0, 0.4, issued_at=111.0)  # made after: kept
    ledger.set_nodes([NodeSpec("n", 8000, 8000, 2, "A100")])  # a rebuild re-reserves, nobody leaves
    assert ledger.cluster.gpu_util_forecast[0, 0] == pytest.approx(0.4)


def test_the_truth_evicts_conflicting_decisions() -> None:
    ledger = Ledger([NodeSpec("n", 8000, 8000, 1, "A100")])
    ledger.decide("mine", 0, "mine/0", "n", (0,), PodRequest("mine", 100, 100, 1, 1000))
    # the binder says another pod holds that GPU (a decision of a previous leader): it wins
    ledger.bound("theirs", 0, "n", (0,), PodRequest("theirs", 100, 100, 1, 1000), "theirs/0")
    assert "mine" not in ledger.pods and ledger.pods["theirs"].placed
    ledger.check()


def test_explain_counts_each_node_once_under_its_first_failing_check() -> None:
    nodes = ([NodeSpec(f"t{i}", 64_000, 100_000, 2, "T4") for i in range(3)]
             + [NodeSpec(f"v{i}", 64_000, 100_000, 4, "V100M32") for i in range(2)]
             + [NodeSpec("cpu", 64_000, 100_000)])
    cluster = Cluster(nodes)
    cluster.reserve(PodRequest("busy", 1000, 0, 4, 1000), cluster.index["v0"], (0, 1, 2, 3))
    # 24 GiB per GPU: T4 (15 GiB) too small; v0 busy; v1 fits; cpu node has no GPU
    why = explain(PodRequest("p", 1000, 0, 1, 1000, gpu_memory_mib=24 * 1024), cluster.snapshot())
    assert why.schedulable and why.feasible == 1
    classes = {c.node_class: (c.feasible, c.rejected) for c in why.classes}
    assert classes == {"2xT4": (0, {"insufficient_gpu_memory": 3}), "4xV100M32": (1, {"insufficient_gpu": 1}),
                       "cpu-only": (0, {"too_few_gpus": 1})}
    # 5 GPUs: nowhere, ever -> unresolvable, headline is the static reason
    never = explain(PodRequest("q", 1000, 0, 5, 1000), cluster.snapshot())
    assert not never.resolvable and never.reason == "too_few_gpus"
    assert never.summary == "0/6 nodes available: 6 too_few_gpus"


def test_explain_counts_every_class_as_a_node_by_node_recount_does() -> None:
    """explain counts reasons per node class in C; the verdicts (and their order, ties included) must be
    what counting node by node gives."""
    import random
    from collections import Counter

    from gpuaware.placement.explain import node_class_names, node_reasons

    rng = random.Random(5)
    nodes = [NodeSpec(f"n{i}", rng.choice([8_000, 32_000, 96_000]), 131_072, rng.choice([0, 2, 4, 8]),
                      rng.choice(["T4", "V100M32", "A100"])) for i in range(60)]
    cluster = Cluster([n if n.num_gpu else NodeSpec(n.name, n.cpu_milli, n.memory_mib) for n in nodes])
    for i, n in enumerate(cluster.specs):
        for g in range(n.num_gpu):
            if rng.random() < 0.5:
                cluster.reserve(PodRequest(f"f{i}-{g}", 0, 0, 1, rng.choice([300, 700, 1000])), i, (g,))
    snap = cluster.snapshot()
    for pod in (PodRequest("a", 4000, 0, 1, 500), PodRequest("b", 40_000, 0, 2, 1000),
                PodRequest("c", 1000, 0, 1, 1000, gpu_types=("A100",)), PodRequest("d", 1000, 0)):
        why = explain(pod, snap)
        reason, _ = node_reasons(pod, snap)
        names = node_class_names(snap)
        per_class: dict[str, Counter[str]] = {}
        sizes: Counter[str] = Counter()
        for i, cls in enumerate(names):  # the reference: one node at a time
            sizes[cls] += 1
            per_class.setdefault(cls, Counter())[reason[i]] += 1
        expected = []
        for cls, size in sizes.most_common():
            counts = per_class[cls]
            feasible = counts.pop("", 0)
            expected.append((cls, size, feasible, list(counts.most_common())))
        got = [(c.node_class, c.nodes, c.feasible, list(c.rejected.items())) for c in why.classes]
        assert got == expected, pod.name
        assert len(expected) > 3


def test_gang_places_all_or_leaves_the_cluster_untouched() -> None:
    cluster = Cluster([NodeSpec("a", 64_000, 100_000, 4, "A100"), NodeSpec("b", 64_000, 100_000, 4, "A100")])
    session = Session(cluster, Framework.of(policy("DotProd")))
    three = [PodRequest(f"m{i}", 1000, 0, 4, 1000, gang_id="g", gang_min_members=3) for i in range(3)]
    failed = session.allocate_gang(three)
    # two members found a node each, the third none: every member waits, nothing stays reserved
    assert all(isinstance(r, Waiting) for r in failed) and len(failed) == 3
    assert [r.status.plugin for r in failed].count("gang") == 2
    assert cluster.used_gpu_milli == 0 and not cluster.allocations
    two = session.allocate_gang(three[:2])
    assert all(isinstance(r, Placed) for r in two) and cluster.used_gpu_milli == 8000
    assert {r.decision.node_name for r in two} == {"a", "b"}


@pytest.mark.parametrize("asked, models, expected", [
    (("A100-80GB",), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"), ("NVIDIA A100-SXM4-80GB",)),
    (("A100",), ("NVIDIA A100-SXM4-80GB", "T4"), ("NVIDIA A100-SXM4-80GB",)),
    (("V100M32",), ("V100M32", "V100M16"), ("V100M32",)),
    (("H100",), ("T4",), ("H100",)),  # nothing matches: kept, so the pod is explained, not silently widened
])
def test_gpu_type_aliases(asked, models, expected) -> None:
    assert convert.resolve_types(asked, models) == expected


def test_pending_pod_and_inventory_translate_to_the_engine() -> None:
    spec, _gpus, model, _ = convert.node_of(inventory("c", "n1", model="A100", gpus=4))
    assert (spec.num_gpu, spec.gpu_model, spec.nvlink_islands) == (4, "A100", (0, 0, 0, 0))
    assert model is not None and model.memory_mib == 81920 and model.nvlink and model.tensor_cores
    # a MIG 3g.40gb slice: 3/7 of a MIG-capable GPU with 40 GiB
    req = convert.pod_request(pending("c", "m", mig_profile="3g.40gb"))
    assert (req.num_gpu, req.gpu_milli, req.gpu_memory_mib, "mig" in req.capabilities) == (1, 429, 40960, True)
    # a CPU-only pod carries no GPU share; compute capability narrows the allowed models
    assert convert.pod_request(pending("c", "cpu", num_gpu=0)).gpu_milli == 0
    req = convert.pod_request(pending("c", "cc", capabilities=GpuCapabilities(min_compute_capability="8.0")),
                              {"A100": model, "T4": replace(model, name="T4")}, {"A100": (8, 0), "T4": (7, 5)})
    assert req.gpu_types == ("A100",)
