"""Seed the placement view with the world's truth: `world.snapshot`, served by the binder.

At start the view would otherwise come from the streams alone; the binder knows every node and
every bound pod now, so one paged request brings the view up to date before the streams are
replayed on top of it (the ledger applies both idempotently).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpuaware import bus
from gpuaware.schemas import WORLD_SNAPSHOT, WorldSnapshotReply, WorldSnapshotRequest
from gpuaware.services.placement.state import PlacementState

log = logging.getLogger(__name__)

__all__ = ["world_sync"]

PAGE = 500
"""nodes and pods per page"""


async def world_sync(nc: Any, state: PlacementState, cluster: str, source: str, *, quiet: bool) -> bool:
    """Apply every page of the world's nodes and bound pods to `state`. False when no binder answers
    (the streams alone then rebuild the view); `quiet` logs nothing about that."""
    node_offset: int | None = 0
    pod_offset: int | None = 0
    pods = pages = 0
    while node_offset is not None or pod_offset is not None:
        req = WorldSnapshotRequest(source=source, emitted_at=time.time(), cluster=cluster,
                                   include_nodes=node_offset is not None, include_pods=pod_offset is not None,
                                   node_offset=node_offset or 0, pod_offset=pod_offset or 0, limit=PAGE)
        try:
            page = await bus.request(nc, WORLD_SNAPSHOT, req, WorldSnapshotReply, timeout=5.0)
        except (bus.ServiceError, bus.RequestTimeout) as exc:
            if not quiet:
                log.info("no world snapshot (%s): the view comes from the streams; asking again later", exc)
            return False
        if page.cluster != cluster:
            return False
        pods += state.apply_world(page)
        pages += 1
        node_offset = page.next_node_offset if req.include_nodes else None
        pod_offset = page.next_pod_offset if req.include_pods else None
    log.info("world snapshot: %d nodes, %d bound pods (%d pages)", len(state.world_nodes), pods, pages)
    return True
