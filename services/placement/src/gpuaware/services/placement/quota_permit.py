"""Quota as placement's asynchronous Permit step: ask `quota.admit` about staged decisions.

The scheduling session (libs/placement) stages a decision; quota answers over NATS, so its permit
cannot run inside the pure session. The service asks here between staging and publishing: a pod the
quota service refuses (and every other member of its gang) is un-staged (`PlacementState.deny`:
nothing stays reserved) and parked with the reason, and the retry pass looks at it again after
`retry_after_s`. Nobody listening on `quota.admit` means admit (logged once; asked again every
`quota_recheck_s`); a quota service that does not answer in time is a transient error (the pending
pods come back).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpuaware import bus
from gpuaware.schemas.pods import PodPending
from gpuaware.schemas.quota import QUOTA_ADMIT, AdmitReply, AdmitRequest
from gpuaware.services.placement.settings import PlacementSettings
from gpuaware.services.placement.state import Decided, PlacementState, Unschedulable

log = logging.getLogger(__name__)


class QuotaPermit:
    def __init__(self, nc: object, settings: PlacementSettings, source: str, state: PlacementState,
                 retry_later: Callable[[float], None]) -> None:
        self.nc = nc
        self.settings = settings
        self.source = source
        self.state = state
        self.retry_later = retry_later
        self._absent_until = 0.0
        self._absent_logged = False

    @property
    def active(self) -> bool:
        """Worth asking: enabled, and a quota service answered (or was not known absent) lately."""
        return self.settings.quota_enabled and time.monotonic() >= self._absent_until

    async def ask(self, pod: PodPending, node: str | None, gpu_milli: int | None, dry_run: bool) -> AdmitReply | None:
        """The quota service's answer, or None when nobody answers `quota.admit` (admit)."""
        s = self.settings
        if not self.active:
            return None
        req = AdmitRequest(source=self.source, emitted_at=time.time(), cluster=s.cluster, pod=pod, node=node,
                           gpu_milli=gpu_milli, dry_run=dry_run)
        try:
            return await bus.request(self.nc, QUOTA_ADMIT, req, AdmitReply, timeout=s.quota_timeout_s)
        except bus.NoResponders:
            self._absent_until = time.monotonic() + s.quota_recheck_s
            if not self._absent_logged:
                self._absent_logged = True
                log.info("no quota service answers %s: admitting every pod (asking again every %.0fs)",
                         QUOTA_ADMIT, s.quota_recheck_s)
            return None
        except bus.RequestTimeout as exc:
            raise bus.TransientError(f"quota did not answer: {exc}", delay=1.0) from None

    async def admit(self, decided: list[Decided]) -> dict[str, Unschedulable]:
        """Ask quota about each staged decision; the refused ones (with their whole gang) are
        un-staged and parked. Returns their verdicts by pod uid, to publish instead."""
        refused: dict[str, Unschedulable] = {}
        gangs_refused: set[str] = set()
        for o in decided:
            entry = self.state.ledger.pods.get(o.msg.pod_uid)
            if entry is None or entry.payload is None:
                continue
            reply = await self.ask(entry.payload, o.msg.node, sum(s.gpu_milli for s in o.msg.slices), False)
            if reply is None:
                if not self.active:
                    break
                continue
            if not reply.admitted:
                self._deny(refused, o, reply.reason, reply.retry_after_s)
                if o.msg.gang_id:
                    gangs_refused.add(o.msg.gang_id)
        for o in decided:
            if o.msg.gang_id in gangs_refused and o.msg.pod_uid not in refused:
                self._deny(refused, o, "gang member refused by quota", None)
        if refused:
            self.retry_later(self.settings.quota_recheck_s)
        return refused

    def _deny(self, refused: dict[str, Unschedulable], o: Decided, reason: str, retry_after: float | None) -> None:
        verdict = self.state.deny(o.msg, reason, retry_after)
        if verdict is not None:
            refused[o.msg.pod_uid] = verdict
        if retry_after:
            self.retry_later(retry_after)
