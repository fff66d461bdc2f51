"""The scheduling loop's audit trail in PostgreSQL (migration 0009 ``placement_events``).

One row per event of the loop as it crossed NATS: pending, decided, unschedulable, bound, bind
failed, preempted, finished, checkpoint requested and acknowledged. The recorder service
(``gpuaware.services.recorder``) turns each message into its row with ``placement_event`` and writes
batches with ``write_placement_events``; the dashboards and ``pod_history`` read them.

Keys: ``(cluster, subject, msg_key)`` is the primary key and ``msg_key`` is the message's
de-duplication id (``Nats-Msg-Id``) when it has one, else what identifies the event itself (pod uid
and attempt, the decision id, the checkpoint request id). Writes are first-writer-wins, so a
redelivered message, or a stream replayed after a restart, stores nothing twice.

Why COPY through a staging table: COPY is the cheapest way in, but it cannot skip a row that is
stored already; the batch goes into a session-temporary table first and from there into
``placement_events`` with ``ON CONFLICT DO NOTHING`` (no conflict target, which would need SELECT
on the key columns: the writer's role may only INSERT). The count returned is the rows that were new.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from psycopg import sql
from psycopg.types.json import Jsonb

from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    Event,
    GpuSlice,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPending,
    PodPreempted,
    PodUnschedulable,
)
from gpuaware.tsdb.pool import Connection

__all__ = [
    "LOOP_EVENTS",
    "PLACEMENT_EVENT_COLUMNS",
    "PlacementEvent",
    "count_placement_events",
    "placement_event",
    "pod_history",
    "write_placement_events",
]

LOOP_EVENTS: tuple[type[Event], ...] = (PodPending, PlacementDecided, PodUnschedulable, PodBound, PodBindFailed,
                                        PodPreempted, PodFinished, CheckpointRequested, CheckpointAcknowledged)
"""the events ``placement_events`` records (their subjects are their tags)"""


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
    """a reason code (unschedulable, bind failed, preempted, checkpoint requested), the policy
    (decided), the outcome (finished) or the checkpoint's status (acknowledged)"""
    payload: Any = None
    """the message as JSON-able data"""


PLACEMENT_EVENT_COLUMNS: tuple[str, ...] = ("cluster", "subject", "msg_key", "pod_uid", "event_at", "decision_id",
                                            "node", "gpu_milli", "detail", "payload")
_PG_TYPES = ("text", "text", "text", "text", "timestamptz", "text", "text", "integer", "text", "jsonb")
_COLS = sql.SQL(", ").join(map(sql.Identifier, PLACEMENT_EVENT_COLUMNS))
_STAGING = "pg_temp.placement_events_staging"
# spelled out rather than LIKE placement_events: LIKE needs SELECT on the table, the writer may only INSERT
_CREATE_STAGING = ("CREATE TEMP TABLE IF NOT EXISTS placement_events_staging ("
                   + ", ".join(f"{c} {t}" for c, t in zip(PLACEMENT_EVENT_COLUMNS, _PG_TYPES, strict=True))
                   + ") ON COMMIT DELETE ROWS")
_CLEAR_STAGING = f"TRUNCATE {_STAGING}"
_COPY = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.SQL(_STAGING), _COLS)
_INSERT = sql.SQL("INSERT INTO placement_events ({cols}) SELECT {cols} FROM {staging} "
                  "ON CONFLICT DO NOTHING").format(cols=_COLS, staging=sql.SQL(_STAGING))
_COUNT = "SELECT subject, count(*) FROM placement_events WHERE cluster = %s GROUP BY subject ORDER BY subject"
_HISTORY = ("SELECT subject, event_at, decision_id, node, gpu_milli, detail FROM placement_events "
            "WHERE cluster = %s AND pod_uid = %s ORDER BY event_at, recorded_at")


def _milli(slices: Sequence[GpuSlice]) -> int:
    return sum(s.gpu_milli for s in slices)


def placement_event(ev: Event, *, msg_id: str | None = None) -> PlacementEvent:
    """The row of one loop event (``LOOP_EVENTS``); ``msg_id`` is its ``Nats-Msg-Id``, the row's key
    when given. Raises ``TypeError`` for another event and ``ValueError`` for a time no database can
    hold (such a message can never be stored: it is dead-lettered, not retried)."""
    row: tuple[str, str, float, str | None, str | None, int, str]
    if isinstance(ev, PodPending):
        row = (ev.pod_uid, f"{ev.pod_uid}/{ev.attempt}", ev.emitted_at, None, None,
               ev.gpu_milli_total if ev.num_gpu else 0, "")
    elif isinstance(ev, PlacementDecided):
        row = (ev.pod_uid, ev.decision_id, ev.decided_at, ev.decision_id, ev.node, _milli(ev.slices), ev.policy)
    elif isinstance(ev, PodUnschedulable):
        row = (ev.pod_uid, f"{ev.pod_uid}/{ev.attempt}/{ev.reason}", ev.emitted_at, None, None, 0, ev.reason)
    elif isinstance(ev, PodBound):
        row = (ev.pod_uid, ev.decision_id or ev.pod_uid, ev.bound_at, ev.decision_id, ev.node, _milli(ev.slices), "")
    elif isinstance(ev, PodBindFailed):
        row = (ev.pod_uid, ev.decision_id, ev.failed_at, ev.decision_id, ev.node, 0, ev.reason)
    elif isinstance(ev, PodPreempted):
        row = (ev.pod_uid, f"{ev.pod_uid}/{ev.decision_id}", ev.preempted_at, ev.decision_id, ev.node,
               _milli(ev.slices), ev.reason)
    elif isinstance(ev, PodFinished):
        row = (ev.pod_uid, ev.pod_uid, ev.finished_at, None, ev.node, _milli(ev.slices), ev.outcome.value)
    elif isinstance(ev, CheckpointRequested):
        row = (ev.pod_uid, ev.request_id, ev.requested_at, ev.decision_id, ev.node, 0, ev.reason)
    elif isinstance(ev, CheckpointAcknowledged):
        row = (ev.pod_uid, ev.request_id, ev.acknowledged_at, None, None, 0, ev.status.value)
    else:
        raise TypeError(f"{type(ev).__name__} is not an event of the scheduling loop")
    pod_uid, key, at, decision, node, milli, detail = row
    try:
        event_at = datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"event time {at!r} is out of range: {exc}") from None
    subject = ev.__struct_config__.tag
    assert isinstance(subject, str)  # a contract event's tag is its subject
    return PlacementEvent(cluster=ev.cluster, subject=subject, msg_key=msg_id or key, pod_uid=pod_uid,
                          event_at=event_at, decision_id=decision, node=node, gpu_milli=milli, detail=detail,
                          payload=msgspec.to_builtins(ev))


def _params(rows: Iterable[PlacementEvent]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        t = astuple(r)
        out.append((*t[:-1], Jsonb(t[-1] if t[-1] is not None else {})))
    return out


async def write_placement_events(conn: Connection, rows: Sequence[PlacementEvent]) -> int:
    """Insert the rows not stored yet, in one transaction (a savepoint inside the caller's): COPY into
    the session's staging table, then ``INSERT ... ON CONFLICT DO NOTHING``. Returns how many were new."""
    params = _params(rows)
    if not params:
        return 0
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute(_CREATE_STAGING)
        await cur.execute(_CLEAR_STAGING)  # emptied at commit; inside a caller's transaction it may still hold rows
        async with cur.copy(_COPY) as copy:
            for p in params:
                await copy.write_row(p)
        await cur.execute(_INSERT)
        return max(cur.rowcount, 0)


async def count_placement_events(conn: Connection, cluster: str) -> dict[str, int]:
    """Rows per subject for one cluster (one demo run)."""
    cur = await conn.execute(_COUNT, (cluster,))
    return {subject: int(n) for subject, n in await cur.fetchall()}


async def pod_history(conn: Connection, cluster: str,
                      pod_uid: str) -> list[tuple[str, datetime, str | None, str | None, int, str]]:
    """(subject, event_at, decision_id, node, gpu_milli, detail) of one pod, oldest first."""
    cur = await conn.execute(_HISTORY, (cluster, pod_uid))
    return list(await cur.fetchall())
