"""The recorder's writing logic without servers: the group commit (batching), holding a batch through a
database outage, and each message's fate in the batch handler (stored, skipped, dead-lettered,
redelivered)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from gpuaware import bus, tsdb
from gpuaware.schemas import (
    Explanation,
    PlacementDecided,
    PlacementExplained,
    PodFinished,
    PodOutcome,
    PodPending,
)
from gpuaware.services.recorder.handlers import RecorderHandlers
from gpuaware.services.recorder.settings import RecorderSettings
from gpuaware.services.recorder.writer import RowWriter

C = "c1"
T = 1_767_225_600.0
NO_WAIT = bus.RetryPolicy(base=0.001, cap=0.001)


def row(i: int, subject: str = "placement.pod.decided.v1") -> tsdb.PlacementEvent:
    return tsdb.PlacementEvent(C, subject, f"k{i}", f"p{i}", datetime(2026, 1, 1, tzinfo=UTC))


@dataclass
class FakeDatabase:
    """A pool whose COPYs land in a set keyed like the table (first writer wins), and that can be taken
    away (transient errors) or refuse rows (a data error for a key named in ``bad``)."""

    stored: dict[tuple[str, str, str], tsdb.PlacementEvent] = field(default_factory=dict)
    copies: list[int] = field(default_factory=list)
    down: bool = False
    bad: set[str] = field(default_factory=set)
    denied: bool = False
    attempts: int = 0
    back: asyncio.Event = field(default_factory=asyncio.Event)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[FakeDatabase]:
        self.attempts += 1
        if self.down:
            raise psycopg.OperationalError("connection refused")
        yield self

    async def close(self) -> None:
        pass

    async def write(self, _conn: Any, rows: Sequence[tsdb.PlacementEvent]) -> int:
        if self.denied:
            raise psycopg.errors.InsufficientPrivilege("permission denied for table placement_events")
        if any(r.msg_key in self.bad for r in rows):
            raise psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence")
        self.copies.append(len(rows))
        new = 0
        for r in rows:
            key = (r.cluster, r.subject, r.msg_key)
            if key not in self.stored:
                self.stored[key] = r
                new += 1
        return new


def writer(db: FakeDatabase, **kw: Any) -> RowWriter:
    return RowWriter(db, write=db.write, retry=NO_WAIT, **{"linger_s": 0.05, "hold_s": 5.0, **kw})


async def test_submissions_within_the_linger_share_one_copy_and_a_redelivery_stores_nothing_new() -> None:
    db = FakeDatabase()
    w = writer(db)
    # the BINDER and PLACEMENT consumers' batches arrive together: one COPY of 5 rows
    await asyncio.gather(w.submit([row(0), row(1)]), w.submit([row(2), row(3), row(4)]))
    assert db.copies == [5]
    await w.submit([row(3), row(4), row(5)])  # redelivered messages beside a new one
    assert (w.stats.copies, w.stats.rows, w.stats.new_rows) == (2, 8, 6)
    assert len(db.stored) == 6
    await w.close()


async def test_a_full_batch_is_written_at_once_and_split_at_flush_rows() -> None:
    db = FakeDatabase()
    w = writer(db, flush_rows=4, linger_s=30.0)  # no linger wait: full batches go now
    await asyncio.wait_for(asyncio.gather(w.submit([row(i) for i in range(3)]), w.submit([row(3), row(4)]),
                                          w.submit([row(5), row(6)])), 5.0)
    assert db.copies == [3, 4]  # 3 + 2 would exceed 4: the second COPY takes both later submissions
    await w.close()


async def test_a_short_outage_is_held_in_place_and_nothing_is_lost_or_doubled() -> None:
    db = FakeDatabase(down=True)
    w = writer(db, hold_s=10.0)
    fut = w.submit([row(0), row(1)])
    while db.attempts < 3:  # retried in place while the database is away
        await asyncio.sleep(0.01)
    assert not fut.done()
    db.down = False
    await asyncio.wait_for(fut, 5.0)
    assert w.stats.retries >= 2 and w.stats.failures == 0 and len(db.stored) == 2
    await w.close()


async def test_past_the_hold_the_batch_fails_with_the_outage_and_a_later_try_stores_it() -> None:
    db = FakeDatabase(down=True)
    w = writer(db, hold_s=0.05)
    with pytest.raises(psycopg.OperationalError):
        await asyncio.wait_for(w.submit([row(0)]), 5.0)
    assert w.stats.failures == 1 and tsdb.is_transient(psycopg.OperationalError("x"))
    db.down = False
    await w.submit([row(0)])  # the redelivered message
    assert len(db.stored) == 1
    await w.close()


# --- the batch handler --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeDelivery:
    msg_id: str | None
    attempt: int = 1

    async def in_progress(self) -> None:
        pass


def pending(uid: str, cluster: str = C) -> PodPending:
    return PodPending(source="binder/t", emitted_at=T, cluster=cluster, pod_uid=uid, pod_name=uid, namespace="ns",
                      submitted_at=T, num_gpu=1)


def decided(uid: str) -> PlacementDecided:
    return PlacementDecided(source="placement/t", emitted_at=T, cluster=C, decision_id=f"{uid}/0", pod_uid=uid,
                            pod_name=uid, namespace="ns", node="n1", slices=(), policy="GpuAware", score=50.0,
                            decided_at=T)


def handlers(db: FakeDatabase) -> RecorderHandlers:
    settings = RecorderSettings(cluster=C, retry_cap_s=8.0)
    return RecorderHandlers(settings, writer(db, hold_s=0.05))


async def test_each_member_of_a_batch_gets_its_own_fate() -> None:
    db = FakeDatabase(bad={"c1/pending/bad/0"})
    h = handlers(db)
    explained = PlacementExplained(source="placement/t", emitted_at=T, cluster=C, pod_uid="a", pod_name="a",
                                   namespace="ns", explanation=Explanation(schedulable=False, summary="waits"),
                                   explained_at=T)
    msgs = [pending("a"), pending("b", cluster="elsewhere"), explained, decided("a"), pending("bad"),
            PodFinished(source="binder/t", emitted_at=T, cluster=C, pod_uid="z", pod_name="z", namespace="ns",
                        outcome=PodOutcome.SUCCEEDED, finished_at=1e300)]
    deliveries = [FakeDelivery("c1/pending/a/0"), FakeDelivery("x"), FakeDelivery("y"), FakeDelivery("a/0"),
                  FakeDelivery("c1/pending/bad/0"), FakeDelivery("c1/finished/z")]
    failures = await h.handle_batch(msgs, deliveries)  # type: ignore[arg-type]  # the handler reads msg_id, attempt
    # stored: a's pending and decision, keyed on their message ids; skipped: another cluster's, an explanation
    assert sorted(k for _, _, k in db.stored) == ["a/0", "c1/pending/a/0"]
    assert dict(h.skipped) == {"other_cluster": 1, "not_a_loop_event": 1}
    # dead-lettered alone: a row the database refuses (found by writing the batch row by row), a time no
    # database holds (refused before any COPY)
    assert set(failures) == {4, 5} and all(isinstance(e, bus.PermanentError) for e in failures.values())
    assert "cannot store this event" in failures[4].reason and "out of range" in failures[5].reason
    assert h.refused == 2 and dict(h.recorded) == {"binder.pod.pending.v1": 1, "placement.pod.decided.v1": 1}


async def test_while_the_database_is_away_the_batch_comes_back_later_whole() -> None:
    db = FakeDatabase(down=True)
    h = handlers(db)
    failures = await h.handle_batch([pending("a"), decided("a")],  # type: ignore[arg-type]  # fake deliveries stand in for the bus's
                                    [FakeDelivery("p", attempt=3), FakeDelivery("d")])
    assert set(failures) == {0, 1} and all(isinstance(e, bus.TransientError) for e in failures.values())
    assert failures[0].delay == 8.0  # the backoff after the batch's latest attempt, capped
    assert h.refused == 0 and not db.stored
    db.down = False
    assert await h.handle_batch([pending("a"), decided("a")], [FakeDelivery("p"), FakeDelivery("d")]) == {}  # type: ignore[arg-type]  # fake deliveries stand in for the bus's
    assert len(db.stored) == 2


async def test_a_write_the_deployment_forbids_sets_no_row_aside() -> None:
    # no INSERT right: every message waits (redelivered with backoff) for an operator; none is dead-lettered
    db = FakeDatabase(denied=True)
    h = handlers(db)
    failures = await h.handle_batch([pending("a"), pending("b")],  # type: ignore[arg-type]  # fake deliveries stand in for the bus's
                                    [FakeDelivery("a"), FakeDelivery("b")])
    assert all(isinstance(e, bus.TransientError) for e in failures.values()) and len(failures) == 2
    assert h.refused == 0


@pytest.mark.parametrize(("env", "message"), [
    ({"GPUAWARE_RECORDER_MAX_DELIVER": "0"}, "MAX_DELIVER must be positive"),
    ({"GPUAWARE_RECORDER_FLUSH_ROWS": "0"}, "FLUSH_ROWS must be positive"),
    ({"GPUAWARE_RECORDER_LINGER_S": "-1"}, "LINGER_S must not be negative"),
])
def test_settings_refuse_what_cannot_work(env: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        RecorderSettings.from_env(env)


def test_settings_name_the_durable_after_the_cluster_and_read_the_shared_variables() -> None:
    s = RecorderSettings.from_env({"GPUAWARE_RECORDER_CLUSTER": "prod", "DATABASE_URL": "postgresql://x/db",
                                   "NATS_URL": "nats://n:4222"})
    assert (s.durable_name(), s.database_url, s.nats_url, s.service_name) == (
        "recorder-prod", "postgresql://x/db", "nats://n:4222", "recorder")
    assert RecorderSettings(durable="audit").durable_name() == "audit"
