"""The placement service's Permit plugin: every decision waits until it is admitted and stored.

A decision leaves the scheduling session staged, its statement open (`session.WaitingPod`). Before it
is final, quota must admit it (when a quota service answers; quota_permit.py asks over the bus) and
the placement stream must store it (handlers.py publishes). Then the service allows it and the
planner records it in the ledger; a refusal by quota parks the pod, and a decision that was not
stored is discarded, so the redelivered pending pod is decided again. Either way nothing stays
reserved and no victim stays evicted: the statement is discarded, not undone by hand.
"""

from __future__ import annotations

from typing import ClassVar

from gpuaware.placement import WAIT, CycleState, Decision, PermitVerdict, PodRequest, Snapshot

__all__ = ["AdmittedAndStored"]


class AdmittedAndStored:
    """Wait for every decision (see the module docstring)."""

    name: ClassVar[str] = "admitted-and-stored"

    def permit(self, cycle: CycleState, pod: PodRequest, decision: Decision, snap: Snapshot) -> PermitVerdict:
        return WAIT
