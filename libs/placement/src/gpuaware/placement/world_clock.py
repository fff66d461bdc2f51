"""The world's clock as one placement instance sees it.

A bound pod's age, a reclaim's minimum runtime and a backfill's shadow time are on the clock of the
world that binds pods: Kubernetes' time, or the digital twin's virtual time, which starts at its own
epoch and runs faster than this process's clock. Reading a pod's age on the wrong clock makes every
pod look months old. So the world's time is its latest event's time plus what this clock ran since.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["WorldClock"]


class WorldClock:
    """`event(at)` for each world event heard; `now()` the world's time now."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._latest: tuple[float, float] | None = None
        """the latest event's time, and this clock when it was heard"""

    def event(self, at: float) -> None:
        """The world reported something that happened at `at` on its clock (an older one read late
        does not turn the clock back)."""
        if self._latest is None or at > self._latest[0]:
            self._latest = (at, self.clock())

    def now(self) -> float:
        """The world's time now; this clock before the world said anything."""
        if self._latest is None:
            return self.clock()
        at, seen = self._latest
        return at + max(0.0, self.clock() - seen)
