"""The scheduling loop's audit trail in PostgreSQL (migration 0009 ``placement_events``).

One row per event of the loop (pending, decided, unschedulable, bound, bind failed, preempted,
finished) as it crossed NATS; writes are first-writer-wins on ``(cluster, subject, msg_key)`` so a
recorder that reads a message twice stores it once. Services may not import psycopg, so the demo's
recorder (and any later auditor) uses these calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from gpuaware.tsdb.pool import Connection

__all__ = [
    "PLACEMENT_EVENT_COLUMNS",
    "PlacementEvent",
    "count_placement_events",
    "pod_history",
    "write_placement_events",
]


@dataclass(frozen=True, slots=True)
class PlacementEvent:
    """One row of ``placement_events``."""

    cluster: str
    subject: str
    msg_key: str
    pod_uid: str
    event_at: datetime
    decision_id: str | None = None
    node: str | None = None
    gpu_milli: int = 0
    detail: str = ""
    """a reason code (unschedulable, bind failed, preempted) or the policy (decided)"""
    payload: Any = None
    """the message as JSON-able data"""


PLACEMENT_EVENT_COLUMNS: tuple[str, ...] = ("cluster", "subject", "msg_key", "pod_uid", "event_at", "decision_id",
                                            "node", "gpu_milli", "detail", "payload")
_INSERT = (f"INSERT INTO placement_events ({', '.join(PLACEMENT_EVENT_COLUMNS)}) "
           f"VALUES ({', '.join(['%s'] * len(PLACEMENT_EVENT_COLUMNS))}) ON CONFLICT DO NOTHING")
_COUNT = "SELECT subject, count(*) FROM placement_events WHERE cluster = %s GROUP BY subject ORDER BY subject"
_HISTORY = ("SELECT subject, event_at, decision_id, node, gpu_milli, detail FROM placement_events "
            "WHERE cluster = %s AND pod_uid = %s ORDER BY event_at, recorded_at")


def _params(rows: Iterable[PlacementEvent]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        t = astuple(r)
        out.append((*t[:-1], Jsonb(t[-1] if t[-1] is not None else {})))
    return out


async def write_placement_events(conn: Connection, rows: Sequence[PlacementEvent]) -> int:
    """Insert the rows not stored yet (one transaction); returns how many were new."""
    params = _params(rows)
    if not params:
        return 0
    new = 0
    async with conn.transaction(), conn.cursor() as cur:
        for p in params:  # per-row rowcount: executemany would only report the last statement's
            await cur.execute(_INSERT, p)
            new += max(cur.rowcount, 0)
    return new


async def count_placement_events(conn: Connection, cluster: str) -> dict[str, int]:
    """Rows per subject for one cluster (one demo run)."""
    cur = await conn.execute(_COUNT, (cluster,))
    return {subject: int(n) for subject, n in await cur.fetchall()}


async def pod_history(conn: Connection, cluster: str,
                      pod_uid: str) -> list[tuple[str, datetime, str | None, str | None, int, str]]:
    """(subject, event_at, decision_id, node, gpu_milli, detail) of one pod, oldest first."""
    cur = await conn.execute(_HISTORY, (cluster, pod_uid))
    return list(await cur.fetchall())
