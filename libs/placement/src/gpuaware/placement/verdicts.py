"""Why a pod waits: the session's verdict turned into the reason code published with the pod.

The reason is the explanation's (explain.py: which filter rejected the most nodes of each class),
except where the session's own status says more: the nodes left were refused by the binder
(``refused_by_binder``), or a gang member fits but its gang does not (``insufficient_gpu``). A retry
that changed nothing about a parked pod publishes nothing and computes no explanation.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuaware.placement.explain import PodExplanation
from gpuaware.placement.framework import Code, Status
from gpuaware.placement.ledger import Ledger, Phase, PodEntry
from gpuaware.placement.model import PodRequest
from gpuaware.placement.outcomes import (
    INSUFFICIENT_GPU,
    NO_MATCHING_GPU_TYPE,
    REFUSED_BY_BINDER,
    Counters,
    Outcome,
    Parked,
)

__all__ = ["park"]


def park(entry: PodEntry, status: Status, *, publish: bool, refused: bool, ledger: Ledger,
         explain: Callable[[PodRequest], PodExplanation], counters: Counters, now: float) -> list[Outcome]:
    """Park `entry` (or mark it unresolvable) for `status`; the verdict to publish, if any. `publish`:
    the caller publishes a verdict even when nothing changed (a pending pod's first); `refused`: the
    binder refused the pod on some nodes."""
    assert entry.request is not None
    if status.code == Code.ERROR:
        raise RuntimeError(f"placement plugin {status.plugin} failed: {status.reason}")
    unresolvable = status.code == Code.UNRESOLVABLE
    override = None
    if status.plugin == "exclude":
        # the nodes left were refused by the binder, or one is held for a starved pod: then it
        # waits for capacity like any other, explained as such
        override = REFUSED_BY_BINDER if refused else None
    elif status.plugin == "gang":
        override = INSUFFICIENT_GPU
    elif status.code == Code.DENIED:
        override = status.reason  # a Permit plugin said why (the nodes alone would have fit it)
    if not publish and entry.phase in (Phase.PARKED, Phase.UNRESOLVABLE) \
            and (entry.phase == Phase.UNRESOLVABLE) == unresolvable and override in (None, entry.reason):
        return []  # a retry that changed nothing: no explanation computed, nothing published
    why = explain(entry.request)
    reason = override or why.reason or (NO_MATCHING_GPU_TYPE if unresolvable else INSUFFICIENT_GPU)
    changed = entry.reason != reason
    ledger.wait(entry.uid, entry.attempt, Phase.UNRESOLVABLE if unresolvable else Phase.PARKED, reason, now=now)
    if not (publish or changed):
        return []
    if unresolvable:
        counters.unresolvable += 1
    else:
        counters.unschedulable += 1
    return [Parked(entry, reason, why.summary, why, unresolvable=unresolvable)]
