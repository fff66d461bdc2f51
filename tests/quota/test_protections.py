"""Victims' protections: a queue's lease (min_runtime_s, inherited) and the cap on preemptions per pod,
honoured alike by the guarantee's reclaim plan, the fair-share reclaim plan and turns."""

from __future__ import annotations

import pytest

from gpuaware.quota import (
    Allocation,
    Demand,
    QuotaConfigError,
    QuotaLedger,
    TurnTaking,
    fair_reclaim_plan,
    reclaim_plan,
    validate,
)

TREE = """
capacity: {{"*": {{gpus: 4, gpu_milli: 4000}}}}
{cap}
queues:
  - {{name: org, guaranteed: {{"*": {{gpus: 4}}}}, min_runtime_s: 600}}
  - {{name: owner, parent: org, guaranteed: {{"*": {{gpus: 2}}}}}}
  - {{name: busy, parent: org, guaranteed: {{"*": {{gpus: 2}}}}}}
"""
ASKED = {"owner": 4000.0, "busy": 4000.0}
PLANS = ["guarantee", "fair", "turn"]


def gpus(n: int) -> Demand:
    return Demand.of(gpus=n, gpu_milli=1000 * n)


def busy_ledger(start: float = 0.0, preempted: tuple[int, ...] = (0, 0, 0, 0), cap: str = "") -> QuotaLedger:
    """4 GPUs, all held by ``busy`` (guaranteed 2, so 2 borrowed): four one-GPU checkpointable pods bound
    at ``start``, pod i preempted ``preempted[i]`` times before; ``owner`` (guaranteed 2) holds none.
    Both queues inherit org's 600-s lease."""
    ledger = QuotaLedger(validate(TREE.format(cap=cap)))
    for i, times in enumerate(preempted):
        for k in range(times):
            ledger.preempted(f"busy-{i}", start - 1000.0 + k)
        ledger.bind(Allocation(f"busy-{i}", "busy", gpus(1), started_at=start + i, checkpointable=True), now=start)
    return ledger


def named(plan: str, ledger: QuotaLedger, now: float) -> list[str]:
    """The pods ``plan`` names so that owner's one-GPU pod fits at ``now``."""
    if plan == "guarantee":
        victims, _ = reclaim_plan(ledger, "owner", gpus(1), now)
    elif plan == "fair":
        victims = fair_reclaim_plan(ledger, "owner", gpus(1), ASKED, now)
    else:
        turns = TurnTaking(due=0.1, lease_s=0)
        t, step, shares = 0.0, max(60.0, now / 50), {}
        while t <= now:  # owner holds nothing of its share (2 GPUs) all along: it comes due
            shares = turns.update(ledger, ASKED, t)
            t += step
        victims = turns.plan(ledger, "owner", gpus(1), shares, now)
    return [v.uid for v in victims or []]


def test_the_lease_is_inherited_from_the_nearest_ancestor_that_sets_it():
    tree = validate("""
queues:
  - {name: org, min_runtime_s: 600}
  - {name: team, parent: org}
  - {name: quick, parent: team, min_runtime_s: 0}
  - {name: slow, parent: team, min_runtime_s: 1800}
  - {name: plain, parent: team}
  - {name: other}
""")
    assert {q: tree.min_runtime(q) for q in ("org", "team", "quick", "slow", "plain", "other")} == {
        "org": 600, "team": 600, "quick": 0, "slow": 1800, "plain": 600, "other": 0}


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize(("start", "now", "takeable"), [
    (1000.0, 1200.0, False),   # ran 200-203 s of its 600-s lease
    (0.0, 1200.0, True),       # ran 1,197-1,200 s: past it
])
def test_a_pod_inside_its_queues_lease_is_not_named(plan, start, now, takeable):
    got = named(plan, busy_ledger(start), now)
    assert bool(got) is takeable
    assert all(g.startswith("busy-") for g in got)


def test_the_guarantee_waits_for_the_lease_and_is_told_how_long():
    ledger = busy_ledger(start=1000.0)
    victims, wait = reclaim_plan(ledger, "owner", gpus(1), 1200.0)
    assert victims is None and wait == pytest.approx(400.0)  # busy-0 bound at 1,000: its lease ends at 1,600
    a = ledger.admit("owner", gpus(1), 1200.0)
    assert not a.admitted and a.retry_after_s == pytest.approx(400.0)
    # at 1,600 busy-0 alone is past its lease (busy-1..3 were bound 1-3 s later)
    assert [v.uid for v in ledger.admit("owner", gpus(1), 1600.0).reclaim] == ["busy-0"]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize(("cap", "preempted", "takeable"), [
    ("", 2, False),                                  # default cap 2: preempted twice, never again
    ("", 1, True),
    ("max_preemptions_per_pod: 3", 2, True),
    ("max_preemptions_per_pod: 1", 1, False),
    ("max_preemptions_per_pod: null", 50, True),     # no cap
    ("max_preemptions_per_pod: 0", 0, False),        # quota never names a victim
])
def test_a_pod_preempted_the_maximum_times_is_never_named(plan, cap, preempted, takeable):
    ledger = busy_ledger(preempted=(preempted,) * 4, cap=cap)
    for now in (5_000.0, 100_000.0):                 # long past every lease
        assert bool(named(plan, ledger, now)) is takeable


def test_capped_pods_leave_the_guarantee_no_time_to_wait_for():
    ledger = busy_ledger(preempted=(2, 2, 2, 2))
    assert reclaim_plan(ledger, "owner", gpus(1), 5_000.0) == (None, None)
    a = ledger.admit("owner", gpus(1), 5_000.0)
    assert not a.admitted and a.retry_after_s is None and "not reclaimable" in a.reason


@pytest.mark.parametrize("plan", PLANS)
def test_the_least_preempted_pod_goes_first_and_a_capped_one_never(plan):
    ledger = busy_ledger(preempted=(1, 2, 0, 1))
    assert named(plan, ledger, 5_000.0) == ["busy-2"]
    ledger.release("busy-2", 5_000.0)
    ledger.bind(Allocation("owner-0", "owner", gpus(1), started_at=5_000.0), now=5_000.0)
    # owner holds 1 of its 2 and asks 1 more: a once-preempted pod, never busy-1 (preempted twice)
    assert named(plan, ledger, 10_000.0) in (["busy-0"], ["busy-3"])


def test_the_count_survives_the_pods_requeue_and_is_forgotten_when_it_finishes():
    ledger = QuotaLedger(validate(TREE.format(cap="")))
    ledger.bind(Allocation("p", "busy", gpus(1), started_at=0.0))
    assert ledger.preempted("p", 100.0) == 1
    assert "p" not in ledger.running and ledger.preemptions("p") == 1
    ledger.bind(Allocation("p", "busy", gpus(1), started_at=200.0))  # re-queued, bound again: same uid
    assert ledger.running["p"].preemptions == 1
    assert ledger.preempted("p", 900.0) == 2
    assert ledger.preempted("p", 900.0) == 2                          # the same event delivered again
    ledger.bind(Allocation("p", "busy", gpus(1), started_at=1000.0))
    assert ledger.running["p"].preemptions == 2
    ledger.finished("p", 5000.0)
    assert "p" not in ledger.running and ledger.preemptions("p") == 0
    ledger.bind(Allocation("p", "busy", gpus(1), started_at=6000.0))
    assert ledger.running["p"].preemptions == 0


def test_a_new_ledger_keeps_the_counts_it_is_given():
    old = busy_ledger(preempted=(2, 0, 0, 0))
    new = QuotaLedger(old.tree, running=dict(old.running), preempted_at=old.preempted_at)
    assert new.running["busy-0"].preemptions == 2 and new.preemptions("busy-0") == 2


@pytest.mark.parametrize(("snippet", "reason"), [
    ("queues: [{name: a, min_runtime_s: -1}]", "Expected `float` >= 0.0 - at `$.queues[0].min_runtime_s`"),
    ("queues: [{name: a, min_runtime_s: ten}]", "at `$.queues[0].min_runtime_s`"),
    ("queues: [{name: a, min_runtime_s: .inf}]", "a: min_runtime_s must be a finite number of seconds"),
    ("queues: [{name: a, min_runtime_s: .nan}]", "at `$.queues[0].min_runtime_s`"),
    ("{max_preemptions_per_pod: -1, queues: [{name: a}]}", "Expected `int` >= 0 - at `$.max_preemptions_per_pod`"),
    ("{max_preemptions_per_pod: 1.5, queues: [{name: a}]}", "at `$.max_preemptions_per_pod`"),
])
def test_bad_leases_and_caps_are_refused_with_the_path(snippet, reason):
    with pytest.raises(QuotaConfigError) as err:
        validate(snippet)
    assert reason in str(err.value)


def test_defaults_no_lease_and_two_preemptions():
    tree = validate("queues: [{name: a}]")
    assert tree.min_runtime("a") == 0 and tree.config.max_preemptions_per_pod == 2
