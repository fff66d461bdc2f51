"""The twin's pace: slow the accelerated clock when the services cannot keep up with it.

The live twin replays a day in minutes (576x: a wall second is ten virtual minutes), and the services
deciding for it answer in wall time. On a quiet machine placement answers a pending pod in a fraction of
a second - a minute or so of the twin's time. On a busy one (other work on the same cores) the same
answer takes seconds, the twin's clock runs on regardless, and every pod queues for hours it would
never queue on a real cluster: the comparison then measures the machine, not the scheduler.

``Pacer`` measures that lag and sets the speed. The world tells it when it published a pod's pending
(``published``) and when placement's first verdict on it arrived (``answered``: a decision, or an
unschedulable verdict - both are answers, so a pod that waits for capacity does not count as lag). Over
the last ``window`` answers it takes the median lag in wall seconds times the speed: the services' lag
in the twin's seconds. Above ``slow_above_s`` the speed is halved (never under ``floor`` of the speed
asked for); under ``resume_below_s`` it is raised by half again, up to the speed asked for. Every change
is recorded (``changes``) with the lag that caused it, and the window starts afresh (lags measured at
the old speed say nothing about the new one).

Pure and clock-free: times are passed in (wall seconds of any monotonic source), so a test drives it
with plain numbers; the binder's twin world (``TwinWorld``) feeds it and applies the speed to its
``AcceleratedClock``.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["PaceChange", "Pacer"]


@dataclass(frozen=True)
class PaceChange:
    """One change of the twin's speed and why."""

    wall: float
    speed: float
    """the speed from then on (virtual seconds per wall second)"""
    lag_virtual_s: float
    """the services' median lag (pending -> first verdict) in the twin's seconds that caused it"""


class Pacer:
    """The speed of the twin's clock, set from the services' lag (module docstring)."""

    def __init__(self, nominal: float, *, floor: float = 0.25, slow_above_s: float = 300.0,
                 resume_below_s: float = 60.0, window: int = 24, max_tracked: int = 50_000) -> None:
        if not nominal > 0:
            raise ValueError(f"the speed asked for must be > 0, got {nominal}")
        if not 0 < floor <= 1:
            raise ValueError(f"floor is a share of the speed asked for, in (0, 1], got {floor}")
        if not 0 <= resume_below_s < slow_above_s:
            raise ValueError("resume_below_s must lie under slow_above_s")
        self.nominal = float(nominal)
        self.floor = float(floor)
        """the slowest the twin may run, as a share of ``nominal``: a run that needs more than that is
        too far behind to be paced into a fair one, and says so (the demo's judgement)"""
        self.slow_above_s = float(slow_above_s)
        """the services' median lag (the twin's seconds) above which the twin slows: five virtual minutes,
        half the default inference SLO"""
        self.resume_below_s = float(resume_below_s)
        """... and under which it speeds up again (one virtual minute)"""
        self.window = int(window)
        self.max_tracked = int(max_tracked)
        self.speed = self.nominal
        self.changes: list[PaceChange] = []
        self._published: dict[tuple[str, int], float] = {}
        self._lags: deque[float] = deque(maxlen=self.window)
        self.answered_count = 0
        self.max_lag_virtual_s = 0.0

    def published(self, pod: str, attempt: int, wall: float) -> None:
        """The world published ``pod``'s pending (its ``attempt``) at ``wall``."""
        if len(self._published) >= self.max_tracked:  # pods never answered: forget the oldest
            self._published.pop(next(iter(self._published)))
        self._published.setdefault((pod, attempt), wall)

    def answered(self, pod: str, attempt: int, wall: float) -> float | None:
        """Placement's first verdict on ``pod``'s ``attempt`` arrived at ``wall``. Returns the new speed
        when this answer changed it, else None (a verdict on a pending not seen, or a later verdict on the
        same attempt, changes nothing)."""
        seen = self._published.pop((pod, attempt), None)
        if seen is None:
            return None
        self.answered_count += 1
        self._lags.append(max(0.0, wall - seen))
        if len(self._lags) < self.window:
            return None
        lag = statistics.median(self._lags) * self.speed
        self.max_lag_virtual_s = max(self.max_lag_virtual_s, lag)
        lowest = self.nominal * self.floor
        if lag > self.slow_above_s and self.speed > lowest:
            new = max(lowest, self.speed / 2)
        elif lag < self.resume_below_s and self.speed < self.nominal:
            new = min(self.nominal, self.speed * 1.5)
        else:
            return None
        self.speed = new
        self.changes.append(PaceChange(wall=wall, speed=new, lag_virtual_s=round(lag, 1)))
        self._lags.clear()
        return new

    @property
    def at_floor(self) -> bool:
        return self.speed <= self.nominal * self.floor

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the speed asked for and now, the slowest reached, the changes and the answers timed."""
        return {"nominal_speed": self.nominal, "speed": self.speed,
                "slowest": min((c.speed for c in self.changes), default=self.nominal),
                "changes": len(self.changes), "answers_timed": self.answered_count,
                "max_lag_virtual_s": round(self.max_lag_virtual_s, 1), "at_floor": self.at_floor}
