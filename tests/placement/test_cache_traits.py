"""The score cache reads the traits plugins declare, never their names or the methods they happen to have."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from placement_helpers import node, share

from gpuaware.placement import (
    BestFitGpu,
    CachedScheduler,
    Cluster,
    CycleState,
    Decision,
    FilterPlugin,
    PodRequest,
    Scheduler,
    ScorePlugin,
    Snapshot,
    WeightedScore,
)


class LastNode(ScorePlugin):
    """Prefers the highest node index; per node unless told otherwise."""

    name: ClassVar[str] = "last-node"
    per_node: ClassVar[bool] = True

    def __init__(self) -> None:
        self.calls = 0

    def score(self, cycle: CycleState, pod: PodRequest, snap: Snapshot, nodes: np.ndarray) -> np.ndarray:
        self.calls += 1
        return nodes.astype(np.int64)


class LastNodeAcrossNodes(LastNode):
    name: ClassVar[str] = "random"  # a name the cache once special-cased: now only the trait counts
    per_node: ClassVar[bool] = False


class EvenNodes(FilterPlugin):
    """Per node, with no `filter_rows` of its own: the protocol's default judges a restricted view."""

    name: ClassVar[str] = "even-nodes"
    per_node: ClassVar[bool] = True

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        return np.array([int(n[1:]) % 2 == 0 for n in snap.node_names])


def _cluster() -> Cluster:
    return Cluster([node(f"n{i}") for i in range(5)])


def test_a_per_node_score_is_cached_and_one_that_is_not_is_computed_per_decision() -> None:
    pod = share(milli=300)
    c = _cluster()
    cached = CachedScheduler(Scheduler("s", [WeightedScore(LastNode())], BestFitGpu()))
    fresh = CachedScheduler(Scheduler("s", [WeightedScore(LastNodeAcrossNodes())], BestFitGpu()))
    assert cached.cacheable and not fresh.cacheable
    for s in (cached, fresh):
        for _ in range(3):
            d = s.schedule(pod, c.snapshot())
            assert isinstance(d, Decision) and d.node == 4
    assert cached.inner.scores[0].plugin.calls == 1  # nothing changed between the decisions: reused
    assert fresh.inner.scores[0].plugin.calls == 3 and fresh.stats.passthrough == 3


def test_a_per_node_filter_without_filter_rows_is_judged_on_the_changed_rows() -> None:
    c = _cluster()
    sched = Scheduler("s", [WeightedScore(LastNode())], BestFitGpu(), filters=(EvenNodes(),))
    cached = CachedScheduler(sched)
    assert cached.cacheable
    d = cached.schedule(share(milli=300), c.snapshot())
    assert isinstance(d, Decision) and d.node == 4
    c.reserve(share(milli=300, name="other"), 1, (0,))  # node 1 changes: re-judged through a view of it
    again = cached.schedule(share(milli=300), c.snapshot())
    assert isinstance(again, Decision) and again.node == 4 and cached.stats.nodes_recomputed == 6


def test_a_filter_that_is_not_per_node_passes_every_decision_through() -> None:
    class Whole(EvenNodes):
        per_node: ClassVar[bool] = False

    cached = CachedScheduler(Scheduler("s", [WeightedScore(LastNode())], BestFitGpu(), filters=(Whole(),)))
    assert not cached.cacheable
    assert isinstance(cached.schedule(share(milli=300), _cluster().snapshot()), Decision)
    assert cached.stats.passthrough == 1
