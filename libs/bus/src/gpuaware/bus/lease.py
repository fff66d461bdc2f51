"""Leader election on a NATS KV bucket: one holder per key, handed over within a TTL.

Why a KV lease and not a home-made protocol: JetStream already gives the two primitives a lease
needs, a compare-and-set write (`update(key, last=revision)`) and expiry (the bucket's `max_age`).
The holder writes the key, then renews it with CAS on its own last revision every `renew_s`; a
standby tries `create(key)`, which only succeeds when the key is absent: never written, deleted by a
holder stepping down, or expired because the holder stopped renewing (crash, partition, a stuck
event loop). So:

    graceful hand-over   holder deletes the key on stop    -> a standby wins within `poll_s`
    holder resigns       it deletes the key and stays out  -> a standby wins within `poll_s`; the
                         of the election for a cooldown       resigner campaigns again only after it
    holder crashes       the key expires after `ttl_s`     -> a standby wins within ttl_s + poll_s
    holder cut off       its renewals fail; it steps down itself once `ttl_s - margin` has passed
                         since its last successful renewal, before anyone else can win the key

`resign()` is for a holder that won but cannot do the leader's work (its takeover keeps failing):
it hands the key over as a graceful stop does, yet keeps campaigning, after the cooldown, so a
lone instance tries again while a standby, if there is one, wins first.

A write whose reply is lost (the server restarted; the client re-sent the request as it reconnected)
may still have been applied: the holder's next compare-and-set then misses, or a campaigner finds the
key taken. When the key holds our own value, the lease goes on from that revision instead of
believing it lost, which would leave nobody leading until its own key expired.

The last rule is the fence: a holder never believes it leads longer than the server would keep its
key. Leadership changes are reported through `on_change(leading)` (awaited in order, never two at
once) and `leading` / `term` (the KV revision that won the election, increasing across terms, usable
as a fencing token in messages).

The bucket's TTL applies to every key in it, so give each TTL its own bucket (a bucket that
exists with another TTL is used as it is, with a warning).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from gpuaware.bus.jetstream import cluster_replicas

log = logging.getLogger(__name__)

__all__ = ["LeaderLease", "open_lease_bucket"]

OnChange = Callable[[bool], Awaitable[None]]


async def open_lease_bucket(js: JetStreamContext, bucket: str, ttl_s: float) -> KeyValue:
    """The KV bucket holding leases with `ttl_s` expiry (created when missing)."""
    config = api.KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, storage=api.StorageType.FILE,
                                description=f"leader leases, {ttl_s:g}s TTL", replicas=cluster_replicas(js))
    try:
        return await js.create_key_value(config)
    except BadRequestError as exc:  # exists with another configuration: use it, say so
        log.warning("lease bucket %s exists with another configuration (%s); using it as is",
                    bucket, exc.description)
        return await js.key_value(bucket)


class LeaderLease:
    """Campaign for `key` in `bucket`; lead while the lease is renewed.

    `holder` identifies this instance in the key's value (logs, `nats kv get`). `poll_s` is how
    often a standby tries to win; `renew_s` how often the holder renews (default ttl/3); `margin_s`
    how long before the TTL a holder that cannot renew steps down (default ttl/4).
    """

    def __init__(self, js: JetStreamContext, bucket: str, key: str, holder: str, *, ttl_s: float = 3.0,
                 poll_s: float = 0.25, renew_s: float | None = None, margin_s: float | None = None,
                 on_change: OnChange | None = None, request_timeout_s: float | None = None) -> None:
        if ttl_s <= 0 or poll_s <= 0:
            raise ValueError("ttl_s and poll_s must be > 0")
        self.js = js
        self.bucket = bucket
        self.key = key
        self.holder = holder
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self.renew_s = renew_s if renew_s is not None else ttl_s / 3
        self.margin_s = margin_s if margin_s is not None else ttl_s / 4
        if self.renew_s >= ttl_s - self.margin_s:
            raise ValueError("renew_s must leave time to renew before the lease is given up")
        self.request_timeout_s = request_timeout_s if request_timeout_s is not None else min(1.0, ttl_s / 4)
        self._on_change = on_change
        self._kv: KeyValue | None = None
        self._revision = 0
        self._renewed_at = 0.0
        self._leading = False
        self.term = 0
        """KV revision that won the current (or last) term; 0 before the first win"""
        self.elections_won = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._out_until = 0.0
        """monotonic time before which this instance neither leads nor campaigns (`resign`)"""
        self._unconfirmed_since: float | None = None
        """start of the first write of ours since the last confirmed one whose reply never came (it
        may have been applied, e.g. sent as the client reconnected): the earliest its TTL can run from"""
        self.resignations = 0
        self._campaign_failures = 0

    @property
    def leading(self) -> bool:
        return self._leading

    async def start(self) -> LeaderLease:
        self._kv = await open_lease_bucket(self.js, self.bucket, self.ttl_s)
        self._task = asyncio.create_task(self._run(), name=f"lease {self.bucket}/{self.key}")
        return self

    async def wait_leading(self, timeout: float | None = None) -> bool:
        """Wait until this instance leads (True) or `timeout` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._leading:
            self._changed.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    def resign(self, cooldown_s: float | None = None) -> None:
        """Step down and stay out of the election for `cooldown_s` (default `ttl_s`), so that another
        instance wins the key rather than this one again; campaign again afterwards.

        Returns at once: the lease's own task releases the key (a standby wins within its `poll_s`;
        if the release fails the key expires within `ttl_s`) and reports `on_change(False)` as for
        any step-down, so it may be called from anywhere, `on_change` and done-callbacks included.
        Called while not leading, it only keeps this instance out for the cooldown.
        """
        cooldown = self.ttl_s if cooldown_s is None else cooldown_s
        if cooldown < 0:
            raise ValueError("cooldown_s must be >= 0")
        self._out_until = max(self._out_until, time.monotonic() + cooldown)
        self.resignations += 1
        log.info("lease %s/%s: %s resigns; out of the election for %.1fs", self.bucket, self.key,
                 self.holder, cooldown)
        self._wake.set()

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; when leading, step down (and delete the key so a standby wins now)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._leading:
            if release:
                await self._release()
            await self._set(False)

    async def _release(self) -> None:
        """Delete our key so a standby wins at its next poll (on failure it expires within `ttl_s`)."""
        if self._kv is None:
            return
        kv = self._kv
        try:
            # no longer than the TTL: by then the key has expired anyway
            await asyncio.wait_for(kv.delete(self.key, last=self._revision), self.ttl_s)
        except Exception as exc:
            failure: Exception | None = exc
            # a renewal whose reply was lost may have moved the revision on: delete from the current one
            entry = await self._ours(kv, self.holder.encode())
            if entry is not None and entry.revision:
                try:
                    await asyncio.wait_for(kv.delete(self.key, last=entry.revision), self.ttl_s)
                    failure = None
                except Exception as again:
                    failure = again
            if failure is not None:  # expiry hands it over anyway
                log.warning("lease %s/%s: release failed (%s); it expires in %.1fs",
                            self.bucket, self.key, failure, self.ttl_s)
                return
        self._unconfirmed_since = None
        log.info("lease %s/%s: released by %s", self.bucket, self.key, self.holder)

    async def _nap(self, seconds: float) -> None:
        """Sleep `seconds`, less when `resign()` wakes the loop."""
        if seconds > 0 and not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), seconds)
        else:
            await asyncio.sleep(0)
        self._wake.clear()

    async def _ours(self, kv: KeyValue, value: bytes) -> KeyValue.Entry | None:
        """The key's entry when its latest value is ours, else None (someone else's, absent, unknown)."""
        try:
            entry = await asyncio.wait_for(kv.get(self.key), self.request_timeout_s)
        except Exception:
            return None
        return entry if entry.value == value and entry.revision else None

    async def _held_unawares(self, kv: KeyValue, value: bytes) -> tuple[int, float] | None:
        """After `create` found the key taken: (revision, earliest write time) when it is ours after
        all, a write whose reply was lost having been applied (a server restart: the request went out
        as the client reconnected). Without this, nobody would lead until our own key expired. Only
        adopted while the fence, counted from that write's earliest start, leaves time to renew."""
        since = self._unconfirmed_since
        if since is None:
            return None
        entry = await self._ours(kv, value)
        if entry is None:
            self._unconfirmed_since = None  # someone else's: a late write of ours can no longer land
            return None
        if (entry.revision or 0) <= self._revision:
            return None  # our last confirmed write: its fence has passed already (we stepped down)
        if time.monotonic() - since >= self.ttl_s - self.margin_s:
            return None  # too old to trust: it expires soon, then the key is campaigned for anew
        log.info("lease %s/%s: a write of ours whose reply was lost holds the key (revision %d)",
                 self.bucket, self.key, entry.revision)
        return entry.revision or 0, since

    async def _set(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        self._changed.set()
        if leading:
            self.elections_won += 1
        log.info("lease %s/%s: %s %s (term %d)", self.bucket, self.key, self.holder,
                 "leads" if leading else "stepped down", self.term)
        if self._on_change is not None:
            try:
                await self._on_change(leading)
            except Exception:
                log.exception("lease %s/%s: on_change(%s) failed", self.bucket, self.key, leading)

    async def _run(self) -> None:
        assert self._kv is not None
        kv = self._kv
        value = self.holder.encode()
        while not self._stop.is_set():
            now = time.monotonic()
            if self._leading and now < self._out_until:  # resign(): hand the key over now
                await self._set(False)  # first: the holder stops leading before another can win
                await self._release()
                continue
            if self._leading:
                try:
                    self._revision = await asyncio.wait_for(
                        kv.update(self.key, value, last=self._revision), self.request_timeout_s)
                    self._renewed_at = time.monotonic()
                    self._unconfirmed_since = None
                except KeyWrongLastSequenceError:
                    entry = await self._ours(kv, value)
                    if entry is not None:  # a renewal whose reply was lost was applied: renew on from it
                        log.info("lease %s/%s: a renewal whose reply was lost was applied (revision %d)",
                                 self.bucket, self.key, entry.revision)
                        self._revision = entry.revision or self._revision
                        continue  # `_renewed_at` stays at the last confirmed renewal: the fence holds
                    log.warning("lease %s/%s: lost (someone else holds it)", self.bucket, self.key)
                    await self._set(False)
                    continue
                except Exception as exc:
                    if self._unconfirmed_since is None:
                        self._unconfirmed_since = now
                    if now - self._renewed_at >= self.ttl_s - self.margin_s:
                        log.warning("lease %s/%s: cannot renew for %.1fs (%r); stepping down",
                                    self.bucket, self.key, now - self._renewed_at, exc)
                        await self._set(False)
                        continue
                    log.info("lease %s/%s: renewal failed (%r), retrying", self.bucket, self.key, exc)
                    await self._nap(min(self.poll_s, self.renew_s))
                    continue
                # sleep until the next renewal, but never past the point where we must step down
                wait = min(self.renew_s, max(0.0, self._renewed_at + self.ttl_s - self.margin_s - time.monotonic()))
                await self._nap(wait)
            elif now < self._out_until:
                await self._nap(self._out_until - now)
            else:
                try:
                    started = time.monotonic()
                    rev = await asyncio.wait_for(kv.create(self.key, value), self.request_timeout_s)
                except (KeyWrongLastSequenceError, KeyNotFoundError):
                    held = await self._held_unawares(kv, value)
                    if held is None:
                        await self._nap(self.poll_s)
                        continue
                    rev, started = held
                except Exception as exc:
                    if self._unconfirmed_since is None:
                        self._unconfirmed_since = started
                    self._campaign_failures += 1
                    # a standby polls all the time: say so only when it has failed for a while
                    log.log(logging.WARNING if self._campaign_failures % 20 == 0 else logging.DEBUG,
                            "lease %s/%s: campaign failed %d times in a row (%r)", self.bucket, self.key,
                            self._campaign_failures, exc)
                    await self._nap(self.poll_s)
                    continue
                self._campaign_failures = 0
                self._unconfirmed_since = None
                self._revision = rev
                if time.monotonic() < self._out_until:  # resign() came while campaigning: give it back
                    await self._release()
                    continue
                self._renewed_at = started  # the TTL clock started no later than our request
                self.term = rev
                await self._set(True)
