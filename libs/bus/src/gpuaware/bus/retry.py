"""The one backoff of the platform: how long to wait before trying again after the n-th failure.

Every retry loop (redelivering a failed message, reconnecting to NATS, re-watching the Kubernetes
API, rewriting a COPY, re-asking a cluster that has no stream leader yet) waits
``min(cap, base * 2**(attempt-1))``, less a random fraction ``jitter`` of it where many clients
would otherwise retry in step. Doubling finds the time an outage takes in a few tries; the cap
bounds how late a recovered dependency is noticed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

__all__ = ["RetryPolicy", "Uniform"]

_MAX_DOUBLINGS = 30
"""2**30 times base is past any cap; bounding the exponent keeps huge attempt counts finite"""


class Uniform(Protocol):
    """Where the jitter's draw comes from (``random.Random``, or a fixed value in tests)."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Delay before the try after failed attempt ``attempt`` (1 = the first failure): base * 2**(attempt-1),
    at most ``cap``, less a random fraction ``jitter`` of it."""

    base: float = 1.0
    """seconds before the second attempt"""
    cap: float = 60.0
    """longest delay, seconds"""
    jitter: float = 0.0
    """fraction of the delay drawn at random (0: none), so many clients spread their attempts"""

    def delay(self, attempt: int, rng: Uniform | None = None) -> float:
        delay: float = min(self.cap, self.base * (2 ** max(0, min(attempt - 1, _MAX_DOUBLINGS))))
        if not self.jitter:
            return delay
        draw = rng.random() if rng is not None else random.random()
        return delay * (1.0 - self.jitter * draw)
