"""The steps a newly elected placement leader takes before it decides, each one retried.

Why a module of its own: winning the lease is not leading. Before the first decision the view must
hold everything stored (a previous leader's last decisions), and the pending-pods consumer must
exist; either can fail on a NATS blip. A takeover that failed unobserved would leave a leader that
renews its lease and never decides, so every step here either succeeds, is retried with the bus's
one backoff policy (`bus.RetryPolicy`), or ends the takeover with `TakeoverFailed`, upon which the
service gives the lease up (`LeaderLease.resign`) and a standby takes over:

    step                          one try fails when                       retried
    replay the streams            a follower still replaying handled        yes; a window with
                                  nothing for `takeover_sync_timeout_s`     progress is not a failure
    catch up with the streams     a follower's `sync` did not finish        yes
                                  (or hung) within `takeover_sync_timeout_s`
    create the pending consumer   `subscribe_pipelined` raised              yes

`takeover_attempts` failed tries in a row of one step end the takeover. Cancellation (the lease
lost or given up mid-takeover) ends it too, and leaves nothing half-made running (`created`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gpuaware import bus
from gpuaware.services.placement.settings import PlacementSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

CREATE_GRACE_S = 10.0
"""how long a cancelled takeover waits for a consumer being created, to stop it: two JetStream API
requests at nats-py's 5 s timeout; after that the creation is cancelled (nothing pulls)"""


class TakeoverFailed(Exception):
    """A takeover step failed `tries` times in a row: this instance gives the lease up."""

    def __init__(self, step: str, tries: int, last: BaseException) -> None:
        super().__init__(f"{step} failed {tries} times in a row (last: {type(last).__name__}: {last})")
        self.step = step
        self.tries = tries


class Progressing(Exception):
    """A try that did not finish but moved forward (a long replay): tried again at once, and the
    failures counted so far are forgotten."""


@dataclass(frozen=True, slots=True)
class Steps:
    """How one takeover step is tried: up to `attempts` failures in a row, `backoff` between them."""

    cluster: str
    attempts: int
    backoff: bus.RetryPolicy

    @classmethod
    def of(cls, s: PlacementSettings) -> Steps:
        return cls(s.cluster, s.takeover_attempts,
                   bus.RetryPolicy(base=s.takeover_backoff_s, cap=s.takeover_backoff_cap_s))

    async def run(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`await attempt()` until it succeeds; `TakeoverFailed` after `attempts` failures in a row."""
        failures = 0
        while True:
            try:
                return await attempt()
            except Progressing as exc:
                failures = 0
                log.info("placement takeover of cluster %s: %s: %s", self.cluster, what, exc)
            except Exception as exc:
                failures += 1
                if failures >= self.attempts:
                    raise TakeoverFailed(what, failures, exc) from exc
                delay = self.backoff.delay(failures)
                log.warning("placement takeover of cluster %s: %s failed (try %d of %d: %s: %s); trying again "
                            "in %.2fs", self.cluster, what, failures, self.attempts, type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)


async def replayed(followers: Sequence[bus.Follower], window_s: float) -> None:
    """One try: every follower has replayed what its stream held when it started (`caught_up`).
    `Progressing` when one still replaying handled messages within `window_s`; else a failure."""
    replaying = [f for f in followers if not f.caught_up.is_set()]
    if not replaying:
        return
    before = [f.last_seq for f in replaying]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(f.caught_up.wait() for f in replaying)), window_s)
        return
    behind = [f.name for f in replaying if not f.caught_up.is_set()]
    if not behind:
        return
    if any(f.last_seq != seq for f, seq in zip(replaying, before, strict=True)):
        raise Progressing(f"{', '.join(behind)} still replaying")
    raise TimeoutError(f"{', '.join(behind)} replayed nothing for {window_s:g}s")


async def synced(followers: Sequence[bus.Follower], timeout_s: float) -> None:
    """One try: every follower has handled everything stored on its subjects until now (what a
    previous leader decided just before it stopped). A failure names the followers behind; a
    `sync` that hangs counts as not finished."""

    async def one(f: bus.Follower) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                return await f.sync(timeout=timeout_s)
        except TimeoutError:
            return False

    done = await asyncio.gather(*(one(f) for f in followers))
    behind = [f.name for f, ok in zip(followers, done, strict=True) if not ok]
    if behind:
        raise TimeoutError(f"{', '.join(behind)} not in sync within {timeout_s:g}s")


async def created(create: Callable[[], Awaitable[T]], stop: Callable[[T], Awaitable[None]]) -> T:
    """`await create()`, except that a cancellation (the lease lost or given up mid-takeover) does
    not leave what was being created running: the creation may finish (up to `CREATE_GRACE_S`),
    then it is stopped, before the cancellation goes on."""
    creating = asyncio.ensure_future(create())
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # a creation that failed or timed out left nothing running
            made = await asyncio.wait_for(creating, CREATE_GRACE_S)
            await stop(made)
            log.info("takeover cancelled mid-creation: what it created is stopped again")
        raise
