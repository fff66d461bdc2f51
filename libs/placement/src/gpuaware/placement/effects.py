"""How often a signal decided a placement: an observer of the score cache's decisions.

A profile's signal scores (signals.py) are small-weight tie-breakers, so whether a signal is *read*
says little; whether it *changed a decision* is the question an operator asks ("did the forecasts do
anything?"). `SignalEffect` answers it per decision made while the signal exists on some GPU: the
node is chosen again from the weighted sums minus the part the scores reading the signal gave
(the same tie rule), and on the same node the GPUs are chosen again with the signal blanked
(`Snapshot.without_signal`; signal-aware GPU choice reads it too).

The placement service registers one for forecasts and exports its counts as metrics; the engine
itself names no signal and no plugin for it (`CachedScheduler.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaware.placement.cache import Pick
from gpuaware.placement.choose import best_index

__all__ = ["SignalEffect"]


@dataclass(slots=True)
class SignalEffect:
    """Counts the decisions made while `signal` existed, and of those the ones it changed."""

    signal: str
    scored: int = 0
    """decisions made while some GPU carried the signal"""
    changed: int = 0
    """of those, decisions whose node would differ without the scores reading it"""
    gpu_changed: int = 0
    """of those, decisions on the same node whose GPUs would differ with the signal blanked"""

    def observe(self, pick: Pick) -> None:
        self.scored += 1
        without, _ = best_index(pick.totals - pick.part, pick.tie_rank)
        if without != pick.node:
            self.changed += 1
        elif pick.gpus_on(pick.snap.without_signal(self.signal)) != pick.gpus:
            self.gpu_changed += 1
