"""Admission, borrowing, reclaim order and partitions, table by table."""

from __future__ import annotations

import pytest

from gpuaware.quota import Allocation, Demand, QuotaLedger, fair_reclaim_plan, validate

TREE = """
default_queue: a1
capacity: {"*": {gpus: 8, gpu_milli: 8000}}
queues:
  - {name: org, guaranteed: {"*": {gpus: 8}}}
  - {name: a, parent: org, guaranteed: {"*": {gpus: 4, gpu_milli: 4000}}}
  - {name: b, parent: org, guaranteed: {"*": {gpus: 4, gpu_milli: 4000}}}
  - {name: a1, parent: a, limit: {"*": {gpus: 7}}}
  - {name: b1, parent: b, min_runtime_s: 600}
  - {name: b2, parent: b, priority: 10}
partitions:
  - {name: secure, nodes: [n-sec], queues: [b]}
"""


def gpus(n: int) -> Demand:
    return Demand.of(gpus=n, gpu_milli=1000 * n)


def run(ledger: QuotaLedger, uid: str, queue: str, n: int, t: float, **kw) -> None:
    assert ledger.bind(Allocation(uid, queue, gpus(n), started_at=t, **kw))


@pytest.fixture
def ledger() -> QuotaLedger:
    return QuotaLedger(validate(TREE))


@pytest.mark.parametrize("queue, n, node, admitted, reason", [
    ("a1", 4, None, True, "guaranteed"),
    ("a1", 5, None, True, "borrowed"),            # 5 > a's 4 guaranteed, the cluster has room
    ("a1", 8, None, False, "over_limit: a1 would hold gpus[*] 8 > limit 7"),
    ("ghost", 1, None, False, "queue_unknown"),
    ("", 1, None, True, "defaulted"),
    ("a", 1, None, False, "queue_not_leaf"),
    ("a1", 1, "n-sec", False, "partition: node n-sec is reserved to ['b']"),
    ("b1", 1, "n-sec", True, "guaranteed"),      # b1 is under b, which the partition names
])
def test_admit_table(ledger, queue, n, node, admitted, reason):
    got = ledger.admit(queue, gpus(n), now=0, node=node)
    assert got.admitted is admitted
    assert reason in got.reason


def test_full_cluster_borrower_is_refused_owner_gets_a_reclaim_plan(ledger):
    run(ledger, "a-own", "a1", 4, 0)
    run(ledger, "a-borrow-old", "a1", 1, 0, checkpointable=True, last_checkpoint_at=900)
    run(ledger, "a-borrow-new", "a1", 1, 500)
    run(ledger, "b-1", "b2", 2, 0)
    # 8 of 8 used; a holds 6 (2 borrowed), b holds 2 of its 4
    refused = ledger.admit("a1", gpus(1), now=1000)
    assert not refused.admitted and "no_capacity" in refused.reason
    plan = ledger.admit("b2", gpus(2), now=1000)
    assert plan.admitted and "reclaiming" in plan.reason
    # checkpointable first (100 s at risk), then the newest non-checkpointable; never a's own 4
    assert [v.uid for v in plan.reclaim] == ["a-borrow-old", "a-borrow-new"]


def test_lower_priority_victims_go_first(ledger):
    run(ledger, "b2-hi", "b2", 6, 0, priority=10)   # b borrows 2 from a
    run(ledger, "b1-lo", "b1", 2, 0, priority=0)
    plan = ledger.admit("a1", gpus(2), now=10_000)
    assert [v.uid for v in plan.reclaim] == ["b1-lo"]


def test_minimum_runtime_defers_the_reclaim_and_says_when(ledger):
    run(ledger, "b1-young", "b1", 8, 100)            # b1 min_runtime 600 s
    early = ledger.admit("a1", gpus(2), now=400)
    assert not early.admitted and early.retry_after_s == pytest.approx(300)
    late = ledger.admit("a1", gpus(2), now=700)
    assert late.admitted and [v.uid for v in late.reclaim] == ["b1-young"]


def test_bind_and_release_are_idempotent(ledger):
    assert ledger.bind(Allocation("p", "a1", gpus(1), started_at=0))
    assert not ledger.bind(Allocation("p", "a1", gpus(1), started_at=0))
    assert ledger.release("p", 10) is not None
    assert ledger.release("p", 10) is None
    assert ledger.used("org")[0] == 0


def test_jain_and_order_key(ledger):
    run(ledger, "x", "a1", 6, 0)
    run(ledger, "y", "b1", 2, 0)
    # both ask for 8: entitled 4 / 4; a holds 6 -> 1.0, b holds 2 -> 0.5: (1.5)^2 / (2 * 1.25) = 0.9
    assert ledger.jain({"a1": 8000.0, "b1": 8000.0}) == pytest.approx(0.9)
    ledger.advance(3600)
    assert ledger.order_key("b1", 3600) < ledger.order_key("a1", 3600)


def test_per_gpu_type_limit():
    tree = validate("""
queues:
  - {name: q, limit: {"*": {gpus: 8}, "A100": {gpus: 2}}}
""")
    ledger = QuotaLedger(tree)
    ledger.bind(Allocation("p", "q", Demand.of(gpus=2, gpu_milli=2000, gpu_type="A100"), started_at=0))
    assert "limit 2" in ledger.admit("q", Demand.of(gpus=1, gpu_milli=1000, gpu_type="A100"), 0).reason
    assert ledger.admit("q", Demand.of(gpus=1, gpu_milli=1000, gpu_type="T4"), 0).admitted


def test_fair_reclaim_takes_from_the_queue_above_its_share_only_while_it_stays_better_served():
    tree = validate("""
capacity: {"*": {gpus: 8}}
queues:
  - {name: org}
  - {name: a, parent: org}
  - {name: b, parent: org}
""")
    ledger = QuotaLedger(tree)
    for i in range(8):
        ledger.bind(Allocation(f"a{i}", "a", gpus(1), started_at=float(i)))
    # both ask 8: fair share 4 / 4; b holds 0 -> asks 2: after, b 2/4 = 0.5, a keeps 6/4 >= 0.5
    plan = fair_reclaim_plan(ledger, "b", gpus(2), {"a": 8000.0, "b": 8000.0}, now=100)
    assert [v.uid for v in plan] == ["a7", "a6"]  # newest first (least progress at risk)
    # a asking back while above its share gets nothing
    assert fair_reclaim_plan(ledger, "a", gpus(1), {"a": 8000.0, "b": 8000.0}, now=100) is None
    # b at its share (4 of 4) does not reclaim further
    for v in ("a7", "a6", "a5", "a4"):
        ledger.release(v, 100)
    for i in range(4):
        ledger.bind(Allocation(f"b{i}", "b", gpus(1), started_at=100.0))
    assert fair_reclaim_plan(ledger, "b", gpus(1), {"a": 8000.0, "b": 8000.0}, now=200) is None
