"""Strict partitions as a Filter: nodes reserved to some queues are never used by anyone else's pods.

Quota declares the partitions (libs/quota: a partition names nodes and the queues they are reserved
to, descendants included) and refuses a pod proposed on a node it may not use; without this filter
placement would keep proposing such nodes, and a pod it parked after the refusal could be proposed
there again. With it, a reserved node is simply infeasible for other queues' pods, even when idle,
so neither a decision, a preemption plan nor a reclaim plan (they all go through the profile's
filters) ever puts one there. Pods of a queue allowed on a partition may still use other nodes.

The plugin is pure and per node (its verdict for a node depends on the node's name and the pod's
queue only), so the scheduler's per-node cache keeps it: `reserved` maps each reserved node to the
queues allowed on it (expanded by the caller, e.g. `gpuaware.quota.QueueTree.reserved_nodes`), and a
pod that names no queue (``""`` / ``default``) is taken to be of `default_queue`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import ClassVar

import numpy as np

from gpuaware.placement.cluster import Snapshot
from gpuaware.placement.framework import CycleState, FilterPlugin
from gpuaware.placement.model import PodRequest

__all__ = ["StrictPartitions"]


class StrictPartitions(FilterPlugin):
    """Filter: a node reserved to some queues passes only pods of those queues."""

    name: ClassVar[str] = "strict-partitions"
    per_node: ClassVar[bool] = True
    """its verdict on a node depends on that node alone (the scheduler's cache may keep it)"""

    def __init__(self, reserved: Mapping[str, Collection[str]], default_queue: str = "") -> None:
        self.reserved = {node: frozenset(queues) for node, queues in reserved.items()}
        self.default_queue = default_queue
        self._names: Sequence[str] | None = None
        self._groups: np.ndarray = np.zeros(0, dtype=np.int64)
        self._allowed: list[frozenset[str]] = sorted(set(self.reserved.values()), key=sorted)
        self._group_of = {q: i for i, q in enumerate(self._allowed)}

    def queue_of(self, pod: PodRequest) -> str:
        return self.default_queue if pod.queue in ("", "default") and self.default_queue else pod.queue

    def _node_groups(self, snap: Snapshot) -> np.ndarray:
        """Per node: the index of its allowed-queue set, or -1 when the node is not reserved."""
        names = snap.node_names
        if names is self._names:
            return self._groups
        groups = np.fromiter((self._group_of[q] if (q := self.reserved.get(n)) is not None else -1 for n in names),
                             dtype=np.int64, count=len(names))
        self._names, self._groups = names, groups
        return groups

    def filter(self, cycle: CycleState, pod: PodRequest, snap: Snapshot) -> np.ndarray:
        groups = self._node_groups(snap)
        if not self.reserved:
            return np.ones(groups.size, dtype=bool)
        queue = self.queue_of(pod)
        ok = [i for i, allowed in enumerate(self._allowed) if queue in allowed]
        return (groups < 0) | np.isin(groups, ok)
