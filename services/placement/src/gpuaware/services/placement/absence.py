"""A request/reply peer nobody answers (NATS "no responders"): placement's optional advisers.

Quota (`quota.admit`) and forecasting (`forecasting.duration`) are advice: when nobody listens,
placement goes on without them and asks again after a while, saying so once in the log rather than
once per pod. One implementation for both (`quota_permit.py`, `durations.py`).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class Absence:
    def __init__(self) -> None:
        self._until = 0.0
        self._logged = False

    @property
    def present(self) -> bool:
        """Worth asking: the peer answered, or was not known absent, lately."""
        return time.monotonic() >= self._until

    @property
    def wait_s(self) -> float:
        """Seconds until it is worth asking again (0 when it is now)."""
        return max(0.0, self._until - time.monotonic())

    def noticed(self, recheck_s: float, message: str, *args: object) -> None:
        """Nobody answered: not asked again for ``recheck_s``; ``message`` logged the first time only."""
        self._until = time.monotonic() + recheck_s
        if not self._logged:
            self._logged = True
            log.info(message, *args)
