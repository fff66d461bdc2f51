"""Properties (hypothesis) over random trees and random arrival/departure sequences.

The model: a cluster of C GPUs (known to the tree), k teams under one root with guarantees summing
to at most C and optional limits, one strict partition of nodes reserved to team 0. Each step either
submits a pod (queue, GPUs, priority, checkpointable) -- admitted pods run, their reclaim victims
stop first -- or finishes a running pod. After every step:
  * no queue holds more than its limit, the cluster never more than C;
  * a pod of a queue that fits inside its guarantee is admitted (free room or a reclaim plan):
    guaranteed capacity is reclaimable, so no queue waits while its guarantee stands idle; with a
    minimum runtime the plan exists at the latest ``retry_after_s`` later;
  * a node of the partition is never given to another queue.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaware.quota import Allocation, Demand, QuotaLedger, validate


@st.composite
def trees(draw):
    cap = draw(st.integers(4, 32))
    k = draw(st.integers(2, 4))
    guaranteed = [draw(st.integers(0, cap)) for _ in range(k)]
    while sum(guaranteed) > cap:
        i = int(np.argmax(guaranteed))
        guaranteed[i] -= 1
    limits = [draw(st.one_of(st.none(), st.integers(g, cap + 4))) for g in guaranteed]
    min_rt = draw(st.sampled_from([0.0, 0.0, 300.0]))
    queues = [{"name": "org", "guaranteed": {"*": {"gpus": cap}}}]
    for i, (g, lim) in enumerate(zip(guaranteed, limits, strict=True)):
        q = {"name": f"t{i}", "parent": "org", "guaranteed": {"*": {"gpus": g}}, "min_runtime_s": min_rt}
        if lim is not None:
            q["limit"] = {"*": {"gpus": lim}}
        queues.append(q)
    cfg = {"capacity": {"*": {"gpus": cap}}, "queues": queues,
           "partitions": [{"name": "p", "nodes": ["secure-0", "secure-1"], "queues": ["t0"]}]}
    return validate(cfg), cap, k


steps = st.lists(st.tuples(st.sampled_from(["submit", "submit", "finish"]), st.integers(0, 3), st.integers(1, 4),
                           st.integers(0, 2), st.booleans(), st.integers(0, 10**6)), min_size=1, max_size=40)


def gpus(n: int) -> Demand:
    return Demand.of(gpus=n, gpu_milli=1000 * n)


def check_invariants(ledger: QuotaLedger, cap: int, k: int) -> None:
    # the ledger's running totals are the sum of its pods
    for q in ("org", *(f"t{i}" for i in range(k))):
        brute = sum((a.demand.vector for a in ledger.running.values() if q in ledger.tree.ancestors(a.queue)),
                    np.zeros(5, dtype=np.int64))
        assert np.array_equal(ledger.used(q), brute)
    assert ledger.total_used()[0] <= cap
    for i in range(k):
        lim = ledger.tree.limit(f"t{i}")
        assert np.all(ledger.used(f"t{i}") <= lim)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), steps)
def test_limits_guarantees_and_partitions(tree_cap_k, ops):
    tree, cap, k = tree_cap_k
    ledger = QuotaLedger(tree)
    now, uid = 0.0, 0
    for op, q, n, prio, ckpt, pick in ops:
        now += 60.0
        queue = f"t{q % k}"
        if op == "finish":
            if ledger.running:
                ledger.release(sorted(ledger.running)[pick % len(ledger.running)], now)
            continue
        d = gpus(n)
        inside = ledger.within_guarantee(queue, d, now) and ledger.over_limit(queue, d, now) is None
        a = ledger.admit(queue, d, now)
        if inside and not a.admitted:
            # only minimum runtimes may delay the owner, and they say until when
            assert a.retry_after_s is not None and a.retry_after_s > 0
            later = ledger.admit(queue, d, now + a.retry_after_s + 1e-6)
            assert later.admitted, later.reason
            continue
        if inside:
            assert a.admitted, a.reason
        # strict partition: anyone but t0 is refused on its nodes, even with the cluster idle
        on_secure = ledger.admit(queue, d, now, node="secure-1")
        if queue != "t0":
            assert not on_secure.admitted and on_secure.reason.startswith("partition")
        if a.admitted:
            for v in a.reclaim:
                assert ledger.tree.min_runtime(v.queue) <= now - v.started_at
                ledger.release(v.uid, now)
            uid += 1
            ledger.bind(Allocation(f"p{uid}", queue, d, started_at=now, priority=prio, checkpointable=ckpt))
        check_invariants(ledger, cap, k)


@settings(max_examples=100, deadline=None)
@given(trees(), st.integers(0, 3))
def test_an_idle_guarantee_is_never_refused(tree_cap_k, q):
    """Every other queue borrows the whole cluster; a queue with idle guarantee still gets it."""
    tree, cap, k = tree_cap_k
    owner = f"t{q % k}"
    g = int(tree.guaranteed(owner)[0])
    ledger = QuotaLedger(tree)
    others = [f"t{i}" for i in range(k) if f"t{i}" != owner]
    i = 0
    while ledger.total_used()[0] < cap:
        placed = False
        for o in others:
            if ledger.admit(o, gpus(1), 0.0).admitted:
                ledger.bind(Allocation(f"b{i}", o, gpus(1), started_at=0.0))
                i += 1
                placed = True
                break
        if not placed:
            break
    if g == 0:
        return
    a = ledger.admit(owner, gpus(g), 10**6)  # past any minimum runtime
    assert a.admitted, a.reason
    freed = sum(int(v.demand.vector[0]) for v in a.reclaim)
    assert cap - int(ledger.total_used()[0]) + freed >= g
