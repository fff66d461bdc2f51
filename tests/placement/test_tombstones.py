"""`Tombstones` behaves exactly like the bounded `OrderedDict` it replaced (highest attempt per uid,
first-in-first-out eviction, a re-closed uid becomes the most recent), in memory allocated once."""

from __future__ import annotations

import tracemalloc
from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuaware.placement.ledger import Ledger
from gpuaware.placement.tombstones import Tombstones


class Model:
    """The reference: what the ledger did before, an OrderedDict capped at `capacity`."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.d: OrderedDict[str, int] = OrderedDict()

    def close(self, uid: str, attempt: int) -> None:
        self.d[uid] = max(attempt, self.d.get(uid, -1))
        self.d.move_to_end(uid)
        while len(self.d) > self.capacity:
            self.d.popitem(last=False)


ops = st.lists(st.tuples(st.integers(0, 60).map(lambda i: f"pod-{i}"), st.integers(0, 5)), max_size=400)


@given(capacity=st.integers(1, 40), script=ops)
def test_tombstones_match_a_capped_ordered_dict(capacity: int, script: list[tuple[str, int]]) -> None:
    t, m = Tombstones(capacity), Model(capacity)
    for uid, attempt in script:
        t.close(uid, attempt)
        m.close(uid, attempt)
        assert len(t) == len(m.d)
    for i in range(61):
        uid = f"pod-{i}"
        assert t.get(uid) == m.d.get(uid), uid
        assert (uid in t) == (uid in m.d)


def test_colliding_home_slots_survive_deletions() -> None:
    # many keys in a small table: long probe runs that wrap around, entries deleted from their middle
    t, m = Tombstones(8), Model(8)
    for n in range(2_000):
        uid = f"u{(n * 7919) % 23}"
        t.close(uid, n % 4)
        m.close(uid, n % 4)
        assert {u: t.get(u) for u in m.d} == dict(m.d)
        assert len(t) == len(m.d)


def test_memory_is_allocated_once() -> None:
    t = Tombstones(50_000)
    for i in range(60_000):  # warm every path, eviction included
        t.close(f"warm-{i}", 0)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(200_000):
            t.close(f"pod-{i}", i % 3)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(t) == 50_000
    assert grown < 64 * 1024, f"the tombstone table grew by {grown} bytes"


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Tombstones(0)


def test_the_ledger_forgets_the_oldest_closed_pods_beyond_its_cap() -> None:
    ledger = Ledger(max_tombstones=3)
    for i in range(5):
        ledger.closed.close(f"p{i}", 1)
    assert not ledger.is_closed("p0", 1) and not ledger.is_closed("p1", 1)
    assert ledger.is_closed("p4", 1) and ledger.is_closed("p4", 0) and not ledger.is_closed("p4", 2)
