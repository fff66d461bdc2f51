"""Leader election on a coordination.k8s.io Lease (cluster mode), as client-go's leaderelection does it.

Why pure: the decision (take, renew, wait) is arithmetic over the Lease's spec and our clock; the
API call that follows is an optimistic update carrying the Lease's ``resourceVersion``, so two
candidates that decide "take" at the same time cannot both win (the loser gets 409 and waits).
The embedded setup keeps the NATS KV lease; this is for a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from gpuaware.k8s.objects import lease

__all__ = ["LeaseStep", "decide"]


@dataclass(frozen=True, slots=True)
class LeaseStep:
    action: Literal["create", "renew", "take", "wait"]
    body: Any | None = None
    """the V1Lease to write (None for ``wait``)"""
    holder: str | None = None
    """who holds it after this step, as far as we know"""


def _ts(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return v.timestamp()
    return datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()


def decide(current: dict[str, Any] | None, *, namespace: str, name: str, me: str, now: float,
           duration_s: int = 15) -> LeaseStep:
    """What to do with the Lease `current` (API JSON, None when absent)."""
    if current is None:
        return LeaseStep("create", lease(namespace, name, me, duration_s=duration_s, now=now), me)
    spec = current.get("spec") or {}
    rv = (current.get("metadata") or {}).get("resourceVersion")
    holder = spec.get("holderIdentity")
    renew = _ts(spec.get("renewTime")) or 0.0
    dur = spec.get("leaseDurationSeconds") or duration_s
    transitions = int(spec.get("leaseTransitions") or 0)
    if holder == me:
        return LeaseStep("renew", lease(namespace, name, me, duration_s=duration_s, now=now,
                                        acquired=_ts(spec.get("acquireTime")), transitions=transitions,
                                        resource_version=rv), me)
    if not holder or now >= renew + dur:
        return LeaseStep("take", lease(namespace, name, me, duration_s=duration_s, now=now,
                                       transitions=transitions + 1, resource_version=rv), me)
    return LeaseStep("wait", None, holder)
