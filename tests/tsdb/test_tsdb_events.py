"""placement_events: each loop event's row and key, first-writer-wins batches through COPY, and the
recorder's role writing them with INSERT alone."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest
from tsdb_helpers import fetch_one

from gpuaware.schemas import (
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
    GpuSlice,
    GpuStateChanged,
    HealthState,
    PlacementDecided,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
    PodUnschedulable,
)
from gpuaware.tsdb import (
    LOOP_EVENTS,
    Connection,
    PlacementEvent,
    connect,
    count_placement_events,
    is_data_error,
    is_transient,
    placement_event,
    pod_history,
    write_placement_events,
)

C = "c1"
T = 1_767_225_600.0  # 2026-01-01 00:00 UTC
SLICES = (GpuSlice(gpu_uuid="GPU-a", gpu_index=0, gpu_milli=500, memory_mib=0),
          GpuSlice(gpu_uuid="GPU-b", gpu_index=1, gpu_milli=250, memory_mib=0))
BASE = {"source": "t", "emitted_at": T, "cluster": C, "pod_uid": "p", "pod_name": "p", "namespace": "ns"}

EVENTS = [
    # event, its key without a message id, event time, decision, node, milli, detail
    (PodPending(**BASE, submitted_at=T, num_gpu=2, attempt=1), "p/1", T, None, None, 2000, ""),
    (PodPending(**BASE, submitted_at=T), "p/0", T, None, None, 0, ""),  # no GPU asked: 0, not gpu_milli
    (PlacementDecided(**BASE, decision_id="p/1", node="n1", slices=SLICES, policy="GpuAware", score=90.0,
                      decided_at=T + 1, attempt=1), "p/1", T + 1, "p/1", "n1", 750, "GpuAware"),
    (PodUnschedulable(**BASE, reason="insufficient_gpu", attempt=2), "p/2/insufficient_gpu", T, None, None, 0,
     "insufficient_gpu"),
    (PodBound(**BASE, node="n1", slices=SLICES, bound_at=T + 2, decision_id="p/1"), "p/1", T + 2, "p/1", "n1", 750,
     ""),
    (PodBindFailed(**BASE, node="n1", decision_id="p/1", reason="gpu_busy", transient=True, failed_at=T + 2),
     "p/1", T + 2, "p/1", "n1", 0, "gpu_busy"),
    (PodPreempted(**BASE, node="n1", reason="priority", preempted_at=T + 3, decision_id="q/0", slices=SLICES),
     "p/q/0", T + 3, "q/0", "n1", 750, "priority"),
    (PodFinished(**BASE, outcome=PodOutcome.SUCCEEDED, finished_at=T + 4, node="n1", slices=SLICES), "p", T + 4,
     None, "n1", 750, "succeeded"),
    (CheckpointRequested(**BASE, request_id="r1", node="n1", reason="preemption", deadline_s=30.0,
                         requested_at=T + 5, decision_id="q/0"), "r1", T + 5, "q/0", "n1", 0, "preemption"),
    (CheckpointAcknowledged(**{k: v for k, v in BASE.items() if k != "pod_name"}, request_id="r1",
                            status=CheckpointStatus.COMPLETED, acknowledged_at=T + 6), "r1", T + 6, None, None, 0,
     "completed"),
]


@pytest.mark.parametrize(("ev", "key", "at", "decision", "node", "milli", "detail"), EVENTS,
                         ids=[f"{type(e[0]).__name__}-{i}" for i, e in enumerate(EVENTS)])
def test_each_loop_event_makes_its_row(ev, key, at, decision, node, milli, detail) -> None:
    row = placement_event(ev)
    assert (row.cluster, row.subject, row.msg_key, row.pod_uid) == (C, ev.__struct_config__.tag, key, "p")
    assert (row.event_at, row.decision_id, row.node, row.gpu_milli, row.detail) == (
        datetime.fromtimestamp(at, UTC), decision, node, milli, detail)
    assert row.payload["kind"] == ev.__struct_config__.tag  # the message itself, as JSON
    # the message id is the key when the message has one
    assert placement_event(ev, msg_id="c1/x/1").msg_key == "c1/x/1"


def test_every_loop_event_has_a_row_and_nothing_else_does() -> None:
    assert {type(e[0]) for e in EVENTS} == set(LOOP_EVENTS)
    changed = GpuStateChanged(source="t", emitted_at=T, node="n", gpu_uuid="g", gpu_index=0,
                              current=HealthState.DEGRADED, score=50.0, changed_at=T)
    with pytest.raises(TypeError, match="GpuStateChanged is not an event of the scheduling loop"):
        placement_event(changed)
    with pytest.raises(ValueError, match="out of range"):  # a valid message no database can hold
        placement_event(PodFinished(**BASE, outcome=PodOutcome.FAILED, finished_at=1e300))


def rows(n: int, *, cluster: str = C, start: int = 0) -> list[PlacementEvent]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [PlacementEvent(cluster, "placement.pod.decided.v1", f"d{i}", f"p{i}", at, f"d{i}", "n1", 500, "P",
                           {"i": i}) for i in range(start, start + n)]


async def test_a_batch_is_stored_once_and_only_its_new_rows_count(conn: Connection) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    first = [*rows(3), PlacementEvent(C, "binder.pod.bound.v1", "d0", "p0", at, "d0", "n1", 500),
             PlacementEvent("other", "binder.pod.bound.v1", "d0", "p0", at)]
    assert await write_placement_events(conn, first) == 5
    # a redelivered batch overlapping the first, with a row named twice in itself: only the new one lands
    assert await write_placement_events(conn, [*rows(4), *rows(1, start=3)]) == 1
    assert await write_placement_events(conn, []) == 0
    assert await count_placement_events(conn, C) == {"binder.pod.bound.v1": 1, "placement.pod.decided.v1": 4}
    assert [h[0] for h in await pod_history(conn, C, "p0")] == ["placement.pod.decided.v1", "binder.pod.bound.v1"]
    assert await fetch_one(conn, "SELECT payload FROM placement_events WHERE msg_key = 'd2'") == ({"i": 2},)


async def test_inside_a_callers_transaction_a_failed_batch_leaves_nothing_and_the_next_starts_clean(
        conn: Connection) -> None:
    async with conn.transaction():
        assert await write_placement_events(conn, rows(2)) == 2
        assert await write_placement_events(conn, rows(1, start=2)) == 1  # the staging table was emptied first
    with pytest.raises(psycopg.DataError) as refused:  # PostgreSQL refuses a NUL character in text
        await write_placement_events(conn, [*rows(1, start=3), PlacementEvent(
            C, "binder.pod.bound.v1", "bad\x00", "p", datetime(2026, 1, 1, tzinfo=UTC))])
    # the row's own fault: a writer sets that row aside (retrying the batch would fail the same way)
    assert is_data_error(refused.value) and not is_transient(refused.value)
    assert await count_placement_events(conn, C) == {"placement.pod.decided.v1": 3}


@pytest.fixture
async def recorder_url(migrated_url: str) -> AsyncIterator[str]:
    """A throwaway LOGIN role in the recorder's group; dropped afterwards (roles are cluster-wide)."""
    name = f"t_recorder_{uuid.uuid4().hex[:8]}"
    async with await connect(migrated_url, autocommit=True) as admin:
        await admin.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE gpuaware_recorder')
    dbname = migrated_url.rsplit("/", 1)[1]
    base = migrated_url.rsplit("@", 1)[1].rsplit("/", 1)[0]
    yield f"postgresql://{name}@{base}/{dbname}"
    async with await connect(migrated_url, autocommit=True) as admin:
        await admin.execute(f'DROP OWNED BY "{name}"')
        await admin.execute(f'DROP ROLE "{name}"')


async def test_the_recorder_role_writes_events_and_may_do_nothing_else(recorder_url: str) -> None:
    async with await connect(recorder_url, autocommit=True) as recorder:
        assert await write_placement_events(recorder, rows(2)) == 2
        assert await write_placement_events(recorder, rows(3)) == 1  # a redelivery, without reading the table
        for forbidden in ("SELECT count(*) FROM placement_events", "DELETE FROM placement_events",
                          "UPDATE placement_events SET detail = ''", "SELECT count(*) FROM gpu_samples",
                          "INSERT INTO quota_usage (ts, cluster, queue, used_gpu_milli, guaranteed_gpu_milli, "
                          "fair_share_gpu_milli) VALUES (now(), 'c', 'q', 0, 0, 0)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                await recorder.execute(forbidden)
            # the deployment's fault, not a row's: no row is set aside for it
            assert not is_data_error(refused.value) and not is_transient(refused.value)
