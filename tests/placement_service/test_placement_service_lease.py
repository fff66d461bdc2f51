"""gpuaware.bus.LeaderLease on a real server: one holder, hand-over on release, expiry on a crash,
and a holder that cannot renew steps down before anyone else can win."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gpuaware import bus


async def _lease(js, holder: str, changes: list, ttl: float = 1.0) -> bus.LeaderLease:
    async def on_change(leading: bool) -> None:
        changes.append((holder, leading, time.monotonic()))

    return await bus.LeaderLease(js, "test-lease", "k", holder, ttl_s=ttl, poll_s=0.05,
                                 on_change=on_change).start()


@contextlib.asynccontextmanager
async def _a_leads_b_waits(url: str) -> AsyncIterator[tuple[bus.LeaderLease, bus.LeaderLease, list[Any]]]:
    """Holder "a" leads; "b" campaigns on a connection of its own. Yields both and their changes."""
    async with bus.connected(url, name="a") as nca, bus.connected(url, name="b") as ncb:
        changes: list[Any] = []
        a = await _lease(nca.jetstream(), "a", changes)
        assert await a.wait_leading(3.0)
        yield a, await _lease(ncb.jetstream(), "b", changes), changes


async def test_one_holder_handover_and_expiry(nats_proc) -> None:
    async with _a_leads_b_waits(nats_proc.url) as (a, b, changes):
        await asyncio.sleep(1.5)  # a renews across more than one TTL; b never wins meanwhile
        assert a.leading and not b.leading
        # graceful: a releases, b wins at its next poll
        released = time.monotonic()
        await a.stop(release=True)
        assert await b.wait_leading(2.0) and time.monotonic() - released < 0.5
        assert b.term > a.term  # terms increase: usable as fencing tokens
        # crash: b stops renewing without releasing; a newcomer wins once the key expired
        b._task.cancel()
        crashed = time.monotonic()
        c = await _lease(a.js, "c", changes)  # on a's connection
        assert await c.wait_leading(3.0)
        assert 0.8 < time.monotonic() - crashed < 2.5
        await c.stop()


async def test_a_holder_that_cannot_renew_steps_down_in_time(nats_proc) -> None:
    async with bus.connected(nats_proc.url, name="a") as nc:
        changes: list = []
        a = await _lease(nc.jetstream(), "a", changes, ttl=1.2)
        assert await a.wait_leading(3.0)
        won = time.monotonic()

        async def failing_update(*_args, **_kw):
            raise TimeoutError("partitioned")

        a._kv.update = failing_update  # the server is unreachable for this holder
        await asyncio.sleep(1.3)
        assert not a.leading
        stepped_down = next(t for h, leading, t in changes if h == "a" and not leading)
        assert stepped_down - won < 1.2  # before the TTL: nobody else can hold it yet
        await a.stop()


async def test_resign_hands_over_to_a_standby_and_stays_out_for_the_cooldown(nats_proc) -> None:
    async with _a_leads_b_waits(nats_proc.url) as (a, b, changes):
        a.resign(3.0)  # a cannot do the leader's work: b wins at its next poll, not at a's expiry (1 s)
        assert await b.wait_leading(5.0)
        assert not a.leading and ("a", False) in [(h, leading) for h, leading, _ in changes]
        assert a.resignations == 1
        await b.stop(release=True)  # the key is free again, but a is still cooling down
        await asyncio.sleep(1.0)
        assert not a.leading
        assert await a.wait_leading(10.0)  # after the cooldown a campaigns again and wins
        await a.stop()


def _reply_lost_once(call: Callable[..., Awaitable[int]]) -> tuple[Callable[..., Awaitable[int]], list[int]]:
    """`call` that is applied but whose first reply is lost (TimeoutError), and the revision it lost."""
    lost: list[int] = []

    async def reply_lost(*args: Any, **kw: Any) -> int:
        revision = await call(*args, **kw)
        if not lost:
            lost.append(revision)
            raise TimeoutError("reply lost")
        return revision

    return reply_lost, lost


async def test_a_renewal_whose_reply_was_lost_does_not_lose_the_lease(nats_proc) -> None:
    """A server restart can apply a renewal whose reply the holder never gets (it timed out here):
    the next renewal's compare-and-set then misses. The key still holds our value: lead on."""
    async with _a_leads_b_waits(nats_proc.url) as (a, b, changes):
        a._kv.update, lost = _reply_lost_once(a._kv.update)
        await asyncio.sleep(2.0)  # several renewals, across two TTLs
        assert lost and a.leading and not b.leading
        assert [(h, leading) for h, leading, _ in changes] == [("a", True)]
        await a.stop()
        assert await b.wait_leading(3.0)  # and a's release still worked (from the revision it adopted)
        await b.stop()


async def test_a_win_whose_reply_was_lost_is_taken_up_without_waiting_for_expiry(nats_proc) -> None:
    """`create` applied but its reply lost: the key holds our value; without adopting it, nobody
    would lead until it expired (10 s here)."""
    async with bus.connected(nats_proc.url, name="a") as nc:
        changes: list = []
        a = bus.LeaderLease(nc.jetstream(), "test-lease-10s", "k", "a", ttl_s=10.0, poll_s=0.05)
        await a.start()
        a._kv.create, lost = _reply_lost_once(a._kv.create)
        assert await a.wait_leading(5.0)
        assert lost and a.term == lost[0]
        await a.stop()
        assert not changes
