"""Node-power recommendations in Kubernetes: the binder cordons and annotates, something else switches.

gpuaware does not hold a BMC's credentials or a cloud's node-group API; what it owns is the cluster's
view of the node. A ``power-down`` cordons the node and annotates it ``gpuaware.io/power: off`` (with
``gpuaware.io/power-changed-at``): the cluster autoscaler's scale-down, Karpenter's consolidation or a
BMC tool watching that annotation switches the machine off, and no pod is scheduled there meanwhile. A
``power-up`` uncordons only a node gpuaware cordoned this way (a JSON patch whose ``test`` fails on any
other node, so a node an operator cordoned stays cordoned) and marks it ``on``; the node takes pods once
its kubelet reports Ready, Kubernetes' own signal.

Kept in its own module because it is the binder's only write to Node objects: the chart grants
``nodes/patch`` only where node power is switched on (``power.enabled``).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Literal

from gpuaware import k8s
from gpuaware.schemas import NodePowerChanged, NodePowerRecommended

__all__ = ["switch_node"]


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


async def switch_node(core: Any, rec: NodePowerRecommended, *, now: float, source: str) -> NodePowerChanged:
    """Carry ``rec`` out on the node object; the answer says ``off`` (cordoned and marked) or ``on``."""
    off = rec.action == "power-down"
    try:
        changed, message = await asyncio.to_thread(k8s.patch_node_power, core, rec.node, off=off, at=_rfc3339(now))
    except Exception as exc:  # the apiserver refused or is unreachable: the node is as it was
        changed, message = False, f"patching the node failed: {type(exc).__name__}: {exc}"
    state: Literal["off", "on"] = "off" if off and changed else "on"
    reason = "" if changed or not off else f"node_unchanged: {message}"
    return NodePowerChanged(source=source, emitted_at=now, cluster=rec.cluster, node=rec.node, state=state,
                            changed_at=now, recommendation_id=rec.recommendation_id, reason=reason)
