"""Virtual time for the digital twin: a day of cluster time in a few minutes, quiet stretches skipped.

The twin never reads a clock: every call that moves it takes the time as an argument
(``Twin.advance(until)``), so a run is a pure function of (seed, workload, the calls made). Two
clocks produce those times:

* ``VirtualClock`` only moves when told (tests, offline replays that jump from event to event);
* ``AcceleratedClock`` maps wall time to virtual time at ``speed`` (288 = one day in five minutes)
  for the live demo, where our real services answer in wall time. It can also *skip* forward
  (``skip_to``): when nothing is in flight the driver jumps the clock to the twin's next event
  instead of sleeping through a quiet night of a trace - event-driven virtual time.

Virtual times are Unix-epoch seconds like every timestamp of the contract: ``start`` is the
epoch at which the simulated day begins.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["AcceleratedClock", "VirtualClock", "speed_for"]


def speed_for(virtual_s: float, wall_s: float) -> float:
    """The speed factor that plays ``virtual_s`` of cluster time in ``wall_s`` (86400, 300 -> 288)."""
    if virtual_s <= 0 or wall_s <= 0:
        raise ValueError(f"durations must be > 0, got virtual {virtual_s}, wall {wall_s}")
    return virtual_s / wall_s


class VirtualClock:
    """A clock that moves forward only when told to; ``clock()`` returns the current time."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> float:
        """Move to ``t``; raises ValueError when ``t`` lies in the past (time never goes back)."""
        if t < self._now:
            raise ValueError(f"time does not go backwards: {t} < {self._now}")
        self._now = float(t)
        return self._now

    def advance(self, seconds: float) -> float:
        return self.advance_to(self._now + seconds)


class AcceleratedClock:
    """Virtual time = ``start + speed * (wall - wall at start) + skipped``.

    ``wall`` is any monotonic seconds source (``time.monotonic`` by default; tests pass a fake).
    ``skip_to(t)`` moves virtual time forward to ``t`` at once; time never moves backwards.
    """

    __slots__ = ("_wall", "_wall0", "skipped", "speed", "start")

    def __init__(self, *, speed: float, start: float, wall: Callable[[], float] = time.monotonic) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = float(speed)
        self.start = float(start)
        self.skipped = 0.0
        """virtual seconds jumped over by ``skip_to``"""
        self._wall = wall
        self._wall0 = wall()

    def __call__(self) -> float:
        return self.start + (self._wall() - self._wall0) * self.speed + self.skipped

    def now(self) -> float:
        return self()

    def wall_delay(self, until: float) -> float:
        """Wall seconds until virtual time reaches ``until`` (0 when it already has)."""
        return max(0.0, (until - self()) / self.speed)

    def to_wall(self, virtual_s: float) -> float:
        """A virtual duration in wall seconds."""
        return virtual_s / self.speed

    def set_speed(self, speed: float) -> None:
        """Run at ``speed`` from now on: virtual time goes on from where it is (no jump, never back)."""
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        now = self()
        self._wall0 = self._wall()
        self.start = now - self.skipped
        self.speed = float(speed)

    def skip_to(self, t: float) -> float:
        """Jump forward to ``t`` (no-op when ``t`` is not ahead); returns the virtual seconds skipped."""
        gap = t - self()
        if gap <= 0:
            return 0.0
        self.skipped += gap
        return gap
