from __future__ import annotations

import pytest

from gpuaware.quota.backfill import Running, Waiting, easy_backfill, shadow


def test_shadow_time_and_extra():
    # 8 free; running 4 ending at 50 and 8 ending at 100; need 12 -> at 50: 12 >= 12 -> (50, 0)
    assert shadow(8, [Running(8, 100), Running(4, 50)], 12, now=0) == (50, 0)
    # need 14 -> at 100: 20 - 14 = 6 extra
    assert shadow(8, [Running(8, 100), Running(4, 50)], 14, now=0) == (100, 6)
    assert shadow(8, [], 12, now=0) == (float("inf"), 0)
    assert shadow(8, [], 4, now=7) == (7, 4)


def test_docstring_example():
    pred = {"B": 50.0, "C": 500.0, "D": 500.0, "A": 1000.0}
    got = easy_backfill(8, [Running(8, 100)], [Waiting("A", 12), Waiting("B", 4), Waiting("C", 4), Waiting("D", 2)],
                        now=0, predict=pred.__getitem__)
    assert got == ["B", "C"]


@pytest.mark.parametrize("waiting, expected", [
    # x starts (6 free); head (10) reserved at t=100 when 6 + 8 = 14 free: 4 extra.
    # a long job of 5 would delay the head -> waits; one of 4 fits in the extra -> starts
    ([("x", 2), ("head", 10), ("long", 5)], ["x"]),
    ([("x", 2), ("head", 10), ("long", 4)], ["x", "long"]),
    # a short job ends before the shadow time (t=100) -> starts
    ([("head", 10), ("short", 4)], ["short"]),
])
def test_reservation_is_protected(waiting, expected):
    pred = {"x": 1000.0, "head": 1000.0, "long": 1000.0, "short": 60.0}
    got = easy_backfill(8, [Running(8, 100)], [Waiting(k, s) for k, s in waiting], now=0, predict=pred.__getitem__)
    assert got == expected
