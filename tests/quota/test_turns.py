"""Turn-taking: owed service, when a queue is due a turn, and whom a turn stops."""

from __future__ import annotations

import pytest

from gpuaware.quota import Allocation, Demand, QuotaLedger, validate
from gpuaware.quota.turns import TurnTaking

TREE = """
capacity: {"*": {gpus: 16, gpu_milli: 16000}}
queues:
  - {name: wide}
  - {name: s1}
  - {name: s2}
  - {name: vip, priority: 5}
"""


def gpus(n: int) -> Demand:
    return Demand.of(gpus=n, gpu_milli=1000 * n)


@pytest.fixture
def ledger() -> QuotaLedger:
    """16 GPUs: s1 and s2 run eight one-GPU pods each since t=0 and want eight more; wide waits with a
    12-GPU job, wider than its share (a third of 16)."""
    led = QuotaLedger(validate(TREE))
    for q in ("s1", "s2"):
        for i in range(8):
            led.bind(Allocation(f"{q}-{i}", q, gpus(1), started_at=float(i), checkpointable=True), now=float(i))
    return led


ASKED = {"wide": 12000.0, "s1": 16000.0, "s2": 16000.0}


def follow(turns: TurnTaking, ledger: QuotaLedger, until: float, step: float) -> dict[str, float]:
    shares = {}
    t = 0.0
    while t <= until:
        shares = turns.update(ledger, ASKED, t)
        t += step
    return shares


def test_owed_service_is_the_same_whatever_the_update_rate(ledger):
    coarse, fine = TurnTaking(), TurnTaking()
    follow(coarse, ledger, 1800, 600)
    follow(fine, ledger, 1800, 10)
    share = 16000 / 3
    assert coarse.owed("wide") == pytest.approx(fine.owed("wide"), rel=1e-9)
    assert 0 < coarse.owed("wide") < share              # owed: got nothing of its share lately
    assert coarse.owed("s1") < 0 and coarse.owed("s2") < 0  # served beyond their shares


def test_a_queue_is_due_only_after_owing_enough_and_takes_only_leased_pods(ledger):
    turns = TurnTaking(due=0.1, lease_s=900)
    shares = follow(turns, ledger, 300, 60)
    assert turns.due_queues(ledger, shares) == []        # owed 0.056 of its share after 5 minutes
    assert turns.plan(ledger, "wide", gpus(12), shares, 300) is None
    shares = follow(turns, ledger, 660, 60)
    assert turns.due_queues(ledger, shares) == ["wide"]  # 0.12 after 11 minutes
    assert turns.plan(ledger, "wide", gpus(12), shares, 660) is None  # every pod younger than the lease
    shares = follow(turns, ledger, 960, 60)
    plan = turns.plan(ledger, "wide", gpus(12), shares, 960)
    assert plan is not None and len(plan) == 12
    assert {a.queue for a in plan} == {"s1", "s2"}
    assert all(960 - a.started_at >= 900 for a in plan)
    # the longest-running pods of the most over-served queues first
    assert max(a.started_at for a in plan) <= min(a.started_at for a in ledger.running.values() if a not in plan)


def test_a_queue_below_its_share_or_owed_is_not_a_victim(ledger):
    for i in range(6):                                  # s2 keeps two pods: below its share
        ledger.release(f"s2-{i}", 0)
    turns = TurnTaking(due=0.1, lease_s=0)
    shares = follow(turns, ledger, 1200, 60)
    assert turns.plan(ledger, "wide", gpus(15), shares, 1200) is None  # 6 free + s1's 8 cannot make 15
    plan = turns.plan(ledger, "wide", gpus(10), shares, 1200)
    assert plan is not None and {a.queue for a in plan} == {"s1"} and len(plan) == 4


def test_a_turn_takes_lower_priority_pods_first_but_priority_does_not_shield_a_queue(ledger):
    turns = TurnTaking(due=0.1, lease_s=0)
    shares = follow(turns, ledger, 1200, 60)
    for a in ledger.running.values():  # s1 marks its pods high, and four of s2's
        a.priority = 1 if a.queue == "s1" or a.uid in {"s2-0", "s2-1", "s2-2", "s2-3"} else 0
    plan = turns.plan(ledger, "wide", gpus(6), shares, 1200)
    assert plan is not None and {a.uid for a in plan} == {"s2-4", "s2-5", "s2-6", "s2-7"} | {"s1-0", "s2-0"}
    plan = turns.plan(ledger, "wide", gpus(12), shares, 1200)  # priority orders victims, it does not forbid them
    assert plan is not None and len(plan) == 12 and [a.priority for a in plan] == [0] * 4 + [1] * 8
    for a in ledger.running.values():  # a pod that cannot checkpoint would lose its work: never taken
        a.checkpointable = a.queue == "s2"
    plan = turns.plan(ledger, "wide", gpus(8), shares, 1200)
    assert plan is not None and {a.queue for a in plan} == {"s2"}
    assert turns.plan(ledger, "wide", gpus(9), shares, 1200) is None


def test_a_served_queue_is_not_due_and_bad_settings_are_refused(ledger):
    turns = TurnTaking()
    shares = follow(turns, ledger, 3600, 300)
    assert "s1" not in turns.due_queues(ledger, shares)
    assert turns.plan(ledger, "s1", gpus(1), shares, 3600) is None
    with pytest.raises(ValueError, match="due must be > 0"):
        TurnTaking(due=0)


def _at_share(s2_binds_at: float) -> tuple[TurnTaking, QuotaLedger, dict[str, float]]:
    """s1 and s2 want 4 GPUs each and hold them (s1 from t=0, s2 from ``s2_binds_at``): their shares,
    water-filled, are exactly 4; wide wants 12 against its 8. Followed minute by minute to t=1200."""
    led = QuotaLedger(validate(TREE))
    asked = {"wide": 12000.0, "s1": 4000.0, "s2": 4000.0}
    turns = TurnTaking(due=0.1, lease_s=0)
    shares: dict[str, float] = {}
    for t in range(0, 1201, 60):
        for q, at in (("s1", 0.0), ("s2", s2_binds_at)):
            if t == at:
                for i in range(4):
                    led.bind(Allocation(f"{q}-{i}", q, gpus(1), started_at=at, checkpointable=True), now=at)
        shares = turns.update(led, asked, float(t))
    return turns, led, shares


def test_a_queue_exactly_at_its_share_yields_unless_it_is_owed_a_turn():
    turns, led, shares = _at_share(s2_binds_at=0.0)
    assert shares["s1"] == pytest.approx(4000.0) and shares["wide"] == pytest.approx(8000.0)
    plan = turns.plan(led, "wide", gpus(12), shares, 1200.0)  # 8 free: 4 more from queues at their share
    assert plan is not None and len(plan) == 4 and {a.queue for a in plan} <= {"s1", "s2"}
    # s2 waited below its share for 14 minutes before it ran: owed a turn itself, it is spared
    turns, led, shares = _at_share(s2_binds_at=840.0)
    assert turns.owed("s2") >= 0.1 * shares["s2"]
    plan = turns.plan(led, "wide", gpus(12), shares, 1200.0)
    assert plan is not None and {a.queue for a in plan} == {"s1"} and len(plan) == 4
