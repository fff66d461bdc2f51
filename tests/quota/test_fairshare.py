from __future__ import annotations

import math

import numpy as np
import pytest

from gpuaware.quota import DecayedUsage, dominant_share, jain_index, normalised_shares, water_fill


@pytest.mark.parametrize("x, expected", [
    ([1, 1, 1, 1], 1.0),
    ([1, 0, 0, 0], 0.25),     # one takes all: 1/n
    ([1, 0.5], 0.9),          # 1.5^2 / (2 * 1.25)
    ([], 1.0),
])
def test_jain(x, expected):
    assert jain_index(x) == pytest.approx(expected)


def test_water_fill_caps_at_demand_and_honours_weight_and_guarantee():
    assert water_fill(10, {"a": 8, "b": 2}, {}) == pytest.approx({"a": 8, "b": 2})
    assert water_fill(10, {"a": 8, "b": 8}, {}) == pytest.approx({"a": 5, "b": 5})
    # weights 3:1 over 8 -> 6 / 2
    assert water_fill(8, {"a": 8, "b": 8}, {"a": 3, "b": 1}) == pytest.approx({"a": 6, "b": 2})
    # b guaranteed 6 first, then 4 split -> a 2, b 8? b demand 8: gets 6 + 2, a 2
    assert water_fill(10, {"a": 8, "b": 8}, {}, {"b": 6}) == pytest.approx({"a": 2, "b": 8})


def test_normalised_shares_ignore_tenants_without_demand():
    assert list(normalised_shares({"a": 2, "b": 5}, {"a": 4, "b": 4, "c": 0})) == [0.5, 1.0]


def test_dominant_share_skips_resources_the_cluster_lacks():
    assert dominant_share(np.array([2, 0, 5]), np.array([8, 0, 10])) == 0.5


def test_decay_is_the_exact_integral_whatever_the_step():
    one, many = DecayedUsage(100, 1), DecayedUsage(100, 1)
    one.advance(0, {"a": np.array([4.0])})
    one.advance(300, {"a": np.array([4.0])})
    many.advance(0, {"a": np.array([4.0])})
    for t in range(10, 301, 10):
        many.advance(t, {"a": np.array([4.0])})
    assert one.history["a"][0] == pytest.approx(many.history["a"][0])
    # held 4 for 3 half-lives: mean recent = 4 * (1 - 2^-3) = 3.5
    assert one.mean_recent("a")[0] == pytest.approx(3.5)
    # then idle for one half-life: halves
    one.advance(400, {})
    assert one.mean_recent("a")[0] == pytest.approx(1.75)
    assert one.tau == pytest.approx(100 / math.log(2))


def test_bursty_tenant_waits_behind_steady_one():
    u = DecayedUsage(3600, 1)
    cap = np.array([64.0])
    u.advance(0, {"big": np.array([60.0]), "small": np.array([4.0])})
    u.advance(3600, {"big": np.array([60.0]), "small": np.array([4.0])})
    now = np.array([0.0])
    assert u.priority_key("small", now, cap, 1) < u.priority_key("big", now, cap, 1)
