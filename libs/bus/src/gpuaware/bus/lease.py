"""Leader election on a NATS KV bucket: one holder per key, handed over within a TTL.

Why a KV lease and not a home-made protocol: JetStream already gives the two primitives a lease
needs, a compare-and-set write (`update(key, last=revision)`) and expiry (the bucket's `max_age`).
The holder writes the key, then renews it with CAS on its own last revision every `renew_s`; a
standby tries `create(key)`, which only succeeds when the key is absent: never written, deleted by a
holder stepping down, or expired because the holder stopped renewing (crash, partition, a stuck
event loop). So:

    graceful hand-over   holder deletes the key on stop    -> a standby wins within `poll_s`
    holder crashes       the key expires after `ttl_s`     -> a standby wins within ttl_s + poll_s
    holder cut off       its renewals fail; it steps down itself once `ttl_s - margin` has passed
                         since its last successful renewal, before anyone else can win the key

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

log = logging.getLogger(__name__)

__all__ = ["LeaderLease", "open_lease_bucket"]

OnChange = Callable[[bool], Awaitable[None]]


async def open_lease_bucket(js: JetStreamContext, bucket: str, ttl_s: float) -> KeyValue:
    """The KV bucket holding leases with `ttl_s` expiry (created when missing)."""
    config = api.KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, storage=api.StorageType.FILE,
                                description=f"leader leases, {ttl_s:g}s TTL")
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

    async def stop(self, release: bool = True) -> None:
        """Stop campaigning; when leading, step down (and delete the key so a standby wins now)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._leading:
            if release and self._kv is not None:
                try:
                    await self._kv.delete(self.key, last=self._revision)
                    log.info("lease %s/%s: released by %s", self.bucket, self.key, self.holder)
                except Exception as exc:  # expiry hands it over anyway
                    log.warning("lease %s/%s: release failed (%s); it expires in %.1fs",
                                self.bucket, self.key, exc, self.ttl_s)
            await self._set(False)

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
            if self._leading:
                try:
                    self._revision = await asyncio.wait_for(
                        kv.update(self.key, value, last=self._revision), self.request_timeout_s)
                    self._renewed_at = time.monotonic()
                except KeyWrongLastSequenceError:
                    log.warning("lease %s/%s: lost (someone else holds it)", self.bucket, self.key)
                    await self._set(False)
                    continue
                except Exception as exc:
                    if now - self._renewed_at >= self.ttl_s - self.margin_s:
                        log.warning("lease %s/%s: cannot renew for %.1fs (%s); stepping down",
                                    self.bucket, self.key, now - self._renewed_at, exc)
                        await self._set(False)
                        continue
                    log.info("lease %s/%s: renewal failed (%s), retrying", self.bucket, self.key, exc)
                    await asyncio.sleep(min(self.poll_s, self.renew_s))
                    continue
                # sleep until the next renewal, but never past the point where we must step down
                wait = min(self.renew_s, max(0.0, self._renewed_at + self.ttl_s - self.margin_s - time.monotonic()))
                await asyncio.sleep(wait)
            else:
                try:
                    started = time.monotonic()
                    rev = await asyncio.wait_for(kv.create(self.key, value), self.request_timeout_s)
                except (KeyWrongLastSequenceError, KeyNotFoundError):
                    await asyncio.sleep(self.poll_s)
                    continue
                except Exception as exc:
                    log.debug("lease %s/%s: campaign failed (%s)", self.bucket, self.key, exc)
                    await asyncio.sleep(self.poll_s)
                    continue
                self._revision = rev
                self._renewed_at = started  # the TTL clock started no later than our request
                self.term = rev
                await self._set(True)
