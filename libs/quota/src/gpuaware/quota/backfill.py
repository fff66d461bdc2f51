"""Backfill: start short jobs in the gap while a wide job waits for its reservation (EASY backfilling).

Why: when the job at the head of the queue does not fit, starting whatever fits behind it (first fit)
keeps the GPUs busy but can starve the wide job for ever -- smaller jobs keep taking each GPU as it
frees. EASY backfilling (Lifka, 1995; the default of Slurm's backfill) gives the head job a
reservation at its *shadow time* -- the earliest time enough GPUs free, by the predicted ends of the
running jobs -- and lets a later job start now only if it fits now and either ends (by its predicted
duration) before the shadow time or uses only GPUs the reservation does not need (the *extra*).

Durations are predictions: the forecasting service's duration predictor where it answers, else a
conservative default (``Backfill.default_s``). A job that runs past its prediction only delays the
reservation by what it overran; nothing is ever preempted here. Pure: times, sizes and predictions
come in, the jobs to start now go out. Sizes are in any one unit (GPUs or GPU milli).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Running", "Waiting", "easy_backfill", "shadow"]


@dataclass(frozen=True, slots=True)
class Running:
    size: int
    predicted_end: float


@dataclass(frozen=True, slots=True)
class Waiting:
    key: str
    size: int


def shadow(free: int, running: Sequence[Running], need: int, now: float) -> tuple[float, int]:
    """(the earliest time ``need`` fits as the running jobs end, in predicted-end order; what is left
    over then, the *extra*). ``(inf, 0)`` when it never fits (the cluster is smaller than ``need``)."""
    if free >= need:
        return now, free - need
    avail = free
    for r in sorted(running, key=lambda r: r.predicted_end):
        avail += r.size
        if avail >= need:
            return max(now, r.predicted_end), avail - need
    return float("inf"), 0


def easy_backfill(free: int, running: Sequence[Running], waiting: Sequence[Waiting], now: float,
                  predict: Callable[[str], float]) -> list[str]:
    """The keys of the waiting jobs to start now, in ``waiting``'s order (the policy's order).

    Jobs start in order while they fit; the first that does not fit gets the reservation; after it a
    job starts only if it fits now and ends by the shadow time (``now + predict(key) <= shadow``) or
    fits in the extra GPUs (which it then takes). Worked example: 8 free of 16, running 8 ending at
    t=100; waiting A(12), B(4, 50 s), C(4, 500 s), D(2, 500 s): A waits, shadow 100 with extra 4;
    B ends at 50 <= 100 -> starts (4 free left); C (500 s) would hold 4 past 100: only if 4 <= extra 4
    -> starts, extra 0, free 0; D does not fit -> [B, C].
    """
    start: list[str] = []
    head: Waiting | None = None
    shadow_t, extra = float("inf"), 0
    for w in waiting:
        if w.size <= 0:
            start.append(w.key)
            continue
        if head is None:
            if w.size <= free:
                start.append(w.key)
                free -= w.size
                continue
            head = w
            shadow_t, extra = shadow(free, running, w.size, now)
            continue
        if w.size > free:
            continue
        if now + predict(w.key) <= shadow_t:
            start.append(w.key)
            free -= w.size
        elif w.size <= extra:
            start.append(w.key)
            free -= w.size
            extra -= w.size
    return start
