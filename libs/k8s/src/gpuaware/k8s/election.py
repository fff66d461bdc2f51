"""Leader election on a coordination.k8s.io Lease, with the interface of ``gpuaware.bus.LeaderLease``.

Why: in cluster mode the leader of placement must be decided by the cluster itself (the Lease
kube-scheduler and controllers use, visible with ``kubectl get lease``), not by a NATS bucket that
a NATS partition could split from the apiserver's view; the NATS KV lease stays for the embedded
setup. The arithmetic is ``leader.decide`` (pure); this loop carries it out through the official
client on a thread (the client is synchronous) and reports changes through ``on_change(leading)``
as the NATS lease does, so the placement service takes either.

Timing, as client-go's defaults scaled: a holder renews every ``renew_s`` (duration / 3); a holder
that could not renew for ``duration_s - margin_s`` steps down before anyone can take over; a standby
retries every ``retry_s``. ``resign(cooldown_s)`` releases and stays out for the cool-down;
``stop(release=True)`` empties ``holderIdentity`` so a standby takes over at its next try.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpuaware.k8s import api
from gpuaware.k8s.leader import LeaseStep, decide
from gpuaware.k8s.objects import lease

__all__ = ["KubeLeaderLease"]

log = logging.getLogger(__name__)


class KubeLeaderLease:
    def __init__(self, namespace: str, name: str, holder: str, *, duration_s: int = 15, renew_s: float | None = None,
                 retry_s: float = 2.0, margin_s: float | None = None,
                 on_change: Callable[[bool], Awaitable[None]] | None = None, coordination: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.namespace, self.name, self.holder = namespace, name, holder
        self.duration_s = duration_s
        self.renew_s = renew_s if renew_s is not None else duration_s / 3
        self.margin_s = margin_s if margin_s is not None else duration_s / 4
        self.retry_s = retry_s
        self.coordination = coordination
        self.clock = clock
        self._on_change = on_change
        self._leading = False
        self._renewed_at = 0.0
        self._out_until = 0.0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.term = 0

    @property
    def leading(self) -> bool:
        return self._leading

    async def start(self) -> KubeLeaderLease:
        self._task = asyncio.create_task(self._run(), name=f"lease {self.namespace}/{self.name}")
        return self

    async def wait_leading(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._leading:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def resign(self, cooldown_s: float | None = None) -> None:
        self._out_until = self.clock() + (cooldown_s if cooldown_s is not None else self.duration_s)
        if self._leading:
            asyncio.get_running_loop().create_task(self._give_up())

    async def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if release and self._leading:
            await self._give_up()

    async def _give_up(self) -> None:
        await self._set(False)
        try:
            current = await asyncio.to_thread(api.lease_get, self.namespace, self.name, self.coordination)
            if current and (current.get("spec") or {}).get("holderIdentity") == self.holder:
                body = lease(self.namespace, self.name, "", duration_s=self.duration_s, now=self.clock(),
                             transitions=int(current["spec"].get("leaseTransitions") or 0),
                             resource_version=current["metadata"].get("resourceVersion"))
                await asyncio.to_thread(api.lease_write, LeaseStep("renew", body, ""), self.coordination)
        except Exception as exc:  # the lease then simply expires
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)

    async def _set(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.term += 1
        log.info("lease %s/%s: %s %s", self.namespace, self.name, self.holder, "leads" if leading else "stands by")
        if self._on_change is not None:
            await self._on_change(leading)

    async def _try(self) -> bool:
        """One election step; True when we hold the lease afterwards."""
        current = await asyncio.to_thread(api.lease_get, self.namespace, self.name, self.coordination)
        step = decide(current, namespace=self.namespace, name=self.name, me=self.holder, now=self.clock(),
                      duration_s=self.duration_s)
        if step.action == "wait":
            return False
        return await asyncio.to_thread(api.lease_write, step, self.coordination)

    async def _run(self) -> None:
        while not self._stop.is_set():
            now = self.clock()
            if now < self._out_until:
                await self._nap(self._out_until - now)
                continue
            try:
                held = await self._try()
            except Exception as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                held = None
            if held:
                self._renewed_at = self.clock()
                await self._set(True)
            elif held is False or self.clock() - self._renewed_at > self.duration_s - self.margin_s:
                await self._set(False)  # lost it, or could not renew in time: step down before others take over
            await self._nap(self.renew_s if self._leading else self.retry_s)

    async def _nap(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
